"""`moeserve serve`: validate the configuration, start the engine process, serve HTTP until SIGTERM.

Shutdown (SIGTERM or Ctrl-C): new requests get 503 at once; in-flight requests may finish for
--shutdown-timeout-s seconds; what is left is aborted (finish_reason "abort"); then the engine
process is stopped and the command exits 0. A second signal skips the wait.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

from moeserve import envs
from moeserve.config import EngineConfig
from moeserve.engine.gc_heap import freeze_startup_objects
from moeserve.engine.startup_summary import log_summary
from moeserve.errors import ConfigError, EngineDeadError
from moeserve.server.config_file import ServerConfig, add_flags, configs_from_args

logger = logging.getLogger("moeserve.server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.yaml", default=None,
                        help="YAML deployment file; its keys are the flag names with '_' (flags given here override it)")
    add_flags(parser)


def run(args: argparse.Namespace) -> int:
    try:
        engine_config, server_config = configs_from_args(args)
    except ConfigError as e:
        print(f"moeserve serve: error: {e}", file=sys.stderr)
        return 2
    from moeserve.engine.process_groups import RankEnv

    env = RankEnv.from_environ()
    if env is not None and env.rank != 0:
        # torchrun / deepspeed started every rank: rank 0 serves HTTP and schedules, the rest run steps
        from moeserve.engine.rank_worker import run_rank

        logging.basicConfig(level=server_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run_rank(engine_config, watch_rank0=True)  # rank 0 serves, and probes its world when idle
    problem = _cannot_listen(server_config)
    if problem:
        print(f"moeserve serve: error: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=server_config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(serve(engine_config, server_config))


def fast_http() -> bool:
    """uvloop's event loop and httptools' HTTP parser (C, as vLLM's front end runs them), unless
    MOESERVE_FAST_HTTP=0 or either is not installed: then asyncio's loop and h11 (pure Python)."""
    if not envs.FAST_HTTP.get():
        return False
    try:
        import httptools  # noqa: F401
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _http_protocol():
    from moeserve.server.http_protocol import BoundedH11Protocol, BoundedHttpToolsProtocol

    return BoundedHttpToolsProtocol if fast_http() else BoundedH11Protocol


def _loop_factory():
    if not fast_http():
        return None
    import uvloop

    return uvloop.new_event_loop


def _cannot_listen(server_config: ServerConfig) -> str | None:
    """Checked before the model loads, so a taken port fails in a second rather than after loading."""
    import socket

    try:
        infos = socket.getaddrinfo(server_config.host, server_config.port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(infos[0][4])
    except OSError as e:
        return f"cannot listen on {server_config.host}:{server_config.port}: {e.strerror or e}"
    return None


def _make_server(app, server_config: ServerConfig, summary: list[tuple[str, str]], model_names: tuple[str, ...]):
    """uvicorn without its own signal handling (we drain first) and with the start-up summary, which
    ends with the address to send requests to, logged once it listens."""
    import contextlib

    import uvicorn

    class Server(uvicorn.Server):
        def capture_signals(self):  # type: ignore[override]
            return contextlib.nullcontext()

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            addresses = [sock.getsockname()[:2] for server in self.servers for sock in server.sockets]
            log_summary(summary, footer=serving_lines(addresses, model_names))

    from moeserve.server.http_protocol import HEAD_LIMIT_BYTES

    config = uvicorn.Config(app, host=server_config.host, port=server_config.port, log_level=server_config.log_level,
                            http=_http_protocol(), h11_max_incomplete_event_size=HEAD_LIMIT_BYTES,
                            access_log=server_config.log_level == "debug", timeout_graceful_shutdown=5, lifespan="off")
    return Server(config)


def serving_lines(addresses: list[tuple[str, int]], model_names: tuple[str, ...]) -> list[str]:
    """The summary's last lines: where to send requests (scripts parse `serving NAME on URL`), and the
    other `model` names requests may carry."""
    lines = [f"moeserve is serving {model_names[0]} on http://{f'[{host}]' if ':' in host else host}:{port} "
             "(OpenAI API under /v1)" for host, port in addresses]
    if len(model_names) > 1:
        lines.append(f"requests may also name the model {', '.join(model_names[1:])}")
    return lines


def _builtin_description() -> str:
    from moeserve.engine.builtin_model import BUILTIN_NAME, builtin_model_dir

    return f"built-in {BUILTIN_NAME}, files in {builtin_model_dir()}"


def _tokenizer_description(tokenizer, model_dir: str) -> str:
    if tokenizer is None:
        return f"none in {model_dir} (token-id prompts only)"
    return f"{type(tokenizer).__name__}, {len(tokenizer)} tokens, from {model_dir} (also at GET /tokenizer_info)"


def _sampling_defaults(choice: str, model_dir: str | None) -> dict:
    """--generation-config: the sampling fields a request leaves out take from generation_config.json."""
    from moeserve.engine.generation_defaults import generation_defaults

    if choice == "vllm" or (choice == "auto" and not model_dir):
        return {}
    defaults = generation_defaults(model_dir if choice == "auto" else choice)
    if defaults:
        logger.info("requests that leave them out sample with %s (--generation-config %s; vllm for OpenAI's defaults)",
                    ", ".join(f"{k}={v}" for k, v in defaults.items()), choice)
    return defaults


async def serve(engine_config: EngineConfig, server_config: ServerConfig) -> int:
    from moeserve.engine.engine_core import load_tokenizer
    from moeserve.server.app import build_app
    from moeserve.server.common import ServerState
    from moeserve.server.engine_client import EngineClient
    from moeserve.server.metrics import ServerMetrics

    client = EngineClient(engine_config, server_config.health_timeout_s)
    loop = asyncio.get_running_loop()
    starting = asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, starting.cancel)  # a signal while loading: stop the engine and leave
    try:
        logger.info("starting the engine process (model: %s)", engine_config.model.model or _builtin_description())
        ready = await client.start(server_config.startup_timeout_s)
        tokenizer = await asyncio.to_thread(load_tokenizer, ready.model_dir, engine_config.model.chat_template)
        defaults = await asyncio.to_thread(_sampling_defaults, server_config.generation_config, ready.model_dir)
        logger.info("tokenizer: %s", _tokenizer_description(tokenizer, ready.model_dir))
        if engine_config.model.chat_template is not None:
            logger.info("chat template: from --chat-template%s", "" if tokenizer is not None else
                        " (unused: the checkpoint has no tokenizer, so chats cannot be rendered)")
    except asyncio.CancelledError:
        await client.shutdown()
        return 0
    except EngineDeadError as e:
        logger.error("%s", e)
        await client.shutdown()
        return 1
    # The model's vocabulary bounds token ids (as in the Python API); ids the tokenizer lacks decode to "".
    state = ServerState(client, server_config, tokenizer, ready.model_name, ready.max_model_len, ready.vocab_size,
                        ServerMetrics(lambda: client.stats, lambda: client.healthy, ready.model_name),
                        max_queued_requests=engine_config.scheduler.max_queued_requests, sampling_defaults=defaults)
    logger.info("HTTP front end: %s", "uvloop + httptools" if fast_http() else
                "asyncio + h11 (pure Python; uvloop and httptools are faster, MOESERVE_FAST_HTTP=0 chose this or they are missing)")
    uv = _make_server(build_app(state), server_config, [(label, text) for label, text in ready.summary],
                      (*state.model_names, *server_config.accepted_model_names))
    freeze_startup_objects()  # a full collection must not walk start-up's objects while requests stream
    drain = _Drain(state, uv, server_config.shutdown_timeout_s)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, drain.on_signal)
    try:
        await uv.serve()
    finally:
        await client.shutdown()
    logger.info("moeserve stopped")
    return 0


class _Drain:
    """First signal: 503 for new requests, wait for in-flight ones, abort the rest, stop uvicorn."""

    def __init__(self, state, server, timeout_s: float):
        self.state = state
        self.server = server
        self.timeout_s = timeout_s
        self.task: asyncio.Task | None = None

    def on_signal(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self.run())
        else:
            logger.warning("second signal: aborting in-flight requests now")
            self.state.client.abort_all()

    async def run(self) -> None:
        client = self.state.client
        self.state.draining = True
        logger.info("shutting down: %d requests in flight, waiting up to %.0f s", client.num_pending, self.timeout_s)
        deadline = time.monotonic() + self.timeout_s
        while client.num_pending and client.dead_reason is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if client.num_pending:
            logger.warning("aborting %d requests still in flight", client.num_pending)
            client.abort_all()
        self.server.should_exit = True
