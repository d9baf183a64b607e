"""The engine process: owns an EngineCore and runs its loop for the HTTP front end.

    python -m moeserve.server.engine_process --socket PATH --config-json JSON

It connects to the front end's unix socket, loads the engine, says Ready, then loops: read every
pending message (adds, aborts, shutdown), answer the adds in one AddResults, run one step while
there is work, send that step's outputs, and send a Heartbeat at least every `heartbeat_s` seconds.
A structured output's request is added at once but held (`grammar_pending`) while its grammar
compiles on a worker thread (`engine.compile_grammar`; a pathological JSON schema takes seconds); the
front end hears it was taken, or refused, once that is done (`grammar_compiled`, or a silent
`abort_request`): the loop keeps stepping the other requests meanwhile (vLLM compiles asynchronously
too), and a sampling rank in another process compiles the same grammar at the same time.
A heartbeat comes from the loop thread itself, so a stuck step stops the heartbeats and the front
end's /health turns 503. A bad request is refused here (AddResults.rejected) and never reaches
`step()`; an exception inside `step()` is fatal: it is reported (Fatal) and the process exits 1.
The process also exits when the front end goes away (socket closed, or its parent dies).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import socket
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from moeserve.config import EngineConfig, config_from_dict
from moeserve.engine.gc_heap import freeze_startup_objects
from moeserve.engine.grammar import COMPILE_THREADS
from moeserve.errors import ConfigError, RequestError
from moeserve.kv_transfer import params as kv_params
from moeserve.sampling_params import SamplingParams, SamplingParamsError
from moeserve.server import ipc

logger = logging.getLogger("moeserve.engine_process")


class Channel:
    """One blocking stream socket carrying ipc messages in both directions."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = ipc.Decoder()
        self.closed = False

    def send(self, msg: Any) -> None:
        self.sock.sendall(ipc.encode(msg))

    def receive(self, timeout: float) -> list[Any]:
        """Every message that arrives within `timeout` seconds (0 = only what is already here)."""
        msgs: list[Any] = []
        while not self.closed:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                break
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            msgs.extend(self.decoder.feed(data))
            timeout = 0.0
        return msgs


_COMPILE_POLL_S = 0.005  # how often the idle loop looks for finished grammar compiles


def _rejection(request_id: str, e: BaseException) -> dict[str, Any]:
    if isinstance(e, RequestError):
        r = ipc.Rejection(request_id, e.status, e.type, e.message, e.param, e.code)
    elif isinstance(e, SamplingParamsError):
        r = ipc.Rejection(request_id, 400, "invalid_request_error", str(e), e.param)
    else:
        logger.exception("engine could not add request %s", request_id)
        r = ipc.Rejection(request_id, 500, "server_error", "the engine could not add the request")
    return r.__dict__.copy()


def _plain_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Scalars and lists of numbers (per-layer gauges) only: nothing else crosses the socket."""

    def plain(v: Any) -> bool:
        if isinstance(v, list):
            return all(isinstance(x, (int, float)) for x in v)
        return isinstance(v, (int, float, str, bool))

    return {k: v for k, v in stats.items() if plain(v)}


class EngineLoop:
    """receive -> add/abort -> step -> send, until Shutdown or the front end disappears."""

    def __init__(self, engine: Any, channel: Channel, heartbeat_s: float) -> None:
        self.engine = engine
        self.channel = channel
        self.heartbeat_s = heartbeat_s
        self.last_heartbeat = 0.0
        self.stopping = False
        self._service = getattr(engine, "service", None)
        self._compile_grammar = getattr(engine, "compile_grammar", None)
        self._compiling: dict[str, Future] = {}  # grammars compiling, of requests added and held, in arrival order
        self._compiler_pool: ThreadPoolExecutor | None = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            if self._compiler_pool is not None:
                self._compiler_pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self.stopping and not self.channel.closed:
            busy = self.engine.has_unfinished_requests()
            self._handle(self.channel.receive(0.0 if busy else _COMPILE_POLL_S if self._compiling else self.heartbeat_s))
            if self.stopping or self.channel.closed:
                return
            if self.engine.has_unfinished_requests():
                outputs = self.engine.step()
                if outputs:
                    self.channel.send(ipc.Outputs([ipc.output_to_wire(o) for o in outputs]))
            elif self._service is not None:
                self._service()  # idle: the prefill/decode split's releases and expiries (step runs them when busy)
            self._maybe_heartbeat()

    def _handle(self, msgs: list[Any]) -> None:
        accepted: list[str] = []
        rejected: list[dict[str, Any]] = []
        for msg in msgs:
            if isinstance(msg, ipc.AddRequest):
                try:
                    params = ipc.params_from_wire(msg.params)
                except Exception as e:  # one bad request never stops the loop
                    rejected.append(_rejection(msg.request_id, e))
                    continue
                if self._add(msg, params, accepted, rejected):
                    self._compile(msg.request_id, params)
            elif isinstance(msg, ipc.AbortRequests):
                for rid in msg.request_ids:
                    # one still compiling was never announced taken: it leaves without an output
                    self._abort(rid, output=self._compiling.pop(rid, None) is None)
            elif isinstance(msg, ipc.Shutdown):
                self.stopping = True
            elif isinstance(msg, ipc.TraceControl):
                self.channel.send(self._trace_control(msg))
        for rid, future in list(self._compiling.items()):
            if future.done():
                del self._compiling[rid]
                if future.exception() is not None:
                    self.engine.abort_request(rid, output=False)
                    rejected.append(_rejection(rid, future.exception()))
                else:
                    self.engine.grammar_compiled(rid)
                    accepted.append(rid)
        if accepted or rejected:
            self.channel.send(ipc.AddResults(accepted, rejected))

    def _add(self, msg: ipc.AddRequest, params: SamplingParams, accepted: list[str], rejected: list[dict[str, Any]]) -> bool:
        """Adds the request; True when its grammar is still to compile (held, and not yet announced taken)."""
        pending = self._compile_grammar is not None and params.structured_outputs is not None
        try:
            kv = {"kv_transfer": kv_params.parse(msg.kv_transfer)} if msg.kv_transfer is not None else {}
            extra = {"grammar_pending": True} if pending else {}
            self.engine.add_request(msg.request_id, list(msg.prompt_token_ids), params, owner=msg.owner, **kv, **extra)
        except Exception as e:  # one bad request never stops the loop
            rejected.append(_rejection(msg.request_id, e))
            return False
        if not pending:
            accepted.append(msg.request_id)
        return pending

    def _compile(self, request_id: str, params: SamplingParams) -> None:
        """Compiles an added request's grammar on a worker thread; `_handle` reports it once done."""
        if self._compiler_pool is None:
            self._compiler_pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="grammar")
        self._compiling[request_id] = self._compiler_pool.submit(self._compile_grammar, params)

    def _trace_control(self, msg: ipc.TraceControl) -> ipc.TraceControlResult:
        """Runs between steps, on the loop thread (the recorder is not thread-safe)."""
        actions = {"start": self.engine.recorder_start, "stop": self.engine.recorder_stop, "dump": self.engine.recorder_dump}
        if msg.action not in actions:
            return ipc.TraceControlResult(msg.control_id, False, f"unknown action {msg.action!r}; valid: start, stop, dump")
        try:
            path = actions[msg.action]()
        except (RequestError, RuntimeError, ValueError) as e:
            return ipc.TraceControlResult(msg.control_id, False, str(e))
        except OSError as e:  # an unwritable trace directory fails this action, not the engine
            logger.exception("recorder %s failed", msg.action)
            return ipc.TraceControlResult(msg.control_id, False, f"could not write the trace: {e.strerror or type(e).__name__}")
        return ipc.TraceControlResult(msg.control_id, True, f"recorder {msg.action} done", path if isinstance(path, str) else None)

    def _abort(self, request_id: str, output: bool = True) -> None:
        try:
            self.engine.abort_request(request_id, output=output)
        except (KeyError, ValueError):
            pass  # already finished: its last output is on its way

    def _maybe_heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_heartbeat >= self.heartbeat_s:
            self.engine.check_health()  # raises when a rank died: fatal, reported by run_engine_process
            self.channel.send(ipc.Heartbeat(_plain_stats(self.engine.stats())))
            self.last_heartbeat = now


def _ready(engine: Any) -> ipc.Ready:
    return ipc.Ready(
        model_name=engine.model_name,
        max_model_len=int(engine.max_model_len),
        vocab_size=int(engine.vocab_size),
        model_dir=str(engine.config.model.model),
        summary=[list(row) for row in engine.summary()] if hasattr(engine, "summary") else [],
    )


def _default_engine_factory(config: EngineConfig) -> Any:
    from moeserve.engine.engine_core import EngineCore

    return EngineCore(config)


def _describe(e: BaseException) -> str:
    if isinstance(e, (ConfigError, RequestError, FileNotFoundError, ValueError)):
        return str(e)
    return f"{type(e).__name__}: {e}"


def run_engine_process(
    config: EngineConfig,
    socket_path: str,
    heartbeat_s: float = 0.2,
    engine_factory: Callable[[EngineConfig], Any] = _default_engine_factory,
) -> int:
    """Connects to the front end at `socket_path`, loads the engine, serves until told to stop."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except (ConnectionRefusedError, FileNotFoundError):  # stopped (SIGTERM) before the engine got here
        logger.info("the front end is gone before the engine started: exiting")
        return 0
    channel = Channel(sock)
    try:
        engine = engine_factory(config)
    except Exception as e:
        logger.exception("engine failed to load")
        channel.send(ipc.Fatal(f"engine failed to load: {_describe(e)}"))
        return 1
    try:
        freeze_startup_objects()  # a full collection must not walk the model's objects mid-step
        channel.send(_ready(engine))
        EngineLoop(engine, channel, heartbeat_s).run()
        return 0
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the front end went away: nothing left to serve
    except Exception as e:
        logger.exception("engine loop failed")
        try:
            channel.send(ipc.Fatal(f"engine failed: {_describe(e)}"))
        except OSError:
            pass
        return 1
    finally:
        engine.shutdown()
        sock.close()


def _die_with_parent(parent_pid: int | None) -> None:
    """Linux: SIGTERM this process when the front end dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:  # it died before the signal was armed
        sys.exit(0)


def main(argv: list[str] | None = None) -> int:
    global _leaving
    p = argparse.ArgumentParser(description="moeserve engine process (started by `moeserve serve`)")
    p.add_argument("--socket", required=True, help="unix socket path the front end listens on")
    p.add_argument("--config-json", required=True, help="EngineConfig as JSON")
    p.add_argument("--parent-pid", type=int, default=None, help="exit if this process is gone")
    p.add_argument("--heartbeat-s", type=float, default=0.2, help="seconds between heartbeats")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine %(levelname)s %(message)s")
    _die_with_parent(args.parent_pid)
    # SIGTERM (from the front end or the parent-death signal): leave through `finally`, shutting down.
    signal.signal(signal.SIGTERM, _leave)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the front end's to handle (graceful drain)
    try:
        config = config_from_dict(json.loads(args.config_json))
        return run_engine_process(pinned(config), args.socket, args.heartbeat_s)
    finally:
        # leaving already: a SIGTERM from now on (the parent-death signal of a front end that just died,
        # while the interpreter waits for its threads) must not raise SystemExit into that shutdown
        _leaving = True


# True once the process is on its way out. The handler stays installed and reads this instead of being
# swapped for SIG_IGN: a SIGTERM landing between Python's and the kernel's half of such a swap is left
# pending, and CPython then reports it as "ignored due to race condition" with a traceback. A plain
# bool, not a threading.Event: handlers run on the main thread between bytecodes, and Event.set takes a
# lock, so a second SIGTERM landing inside the first handler's Event.set ran the handler again, which
# waited forever for the lock its own interrupted frame held (the engine outlived its front end). A
# SIGKILLed front end sends several: the kernel re-sends the parent-death signal each time it hands the
# engine to the next of the front end's dying threads.
_leaving = False


def _leave(*_) -> None:
    """The SIGTERM handler: one SystemExit, unwinding through run_engine_process's `finally`; any
    later SIGTERM is a no-op. (One landing between the test and the store raises its own SystemExit
    from inside this frame: still one.)"""
    global _leaving
    if _leaving:
        return
    _leaving = True
    sys.exit(0)


def pinned(config: EngineConfig) -> EngineConfig:
    """This process tuned by the kernel set it will run (the cpu set pins it to the cores the front
    end does not keep and lends it their idle time: kernels/cpu/cpu_binding.py); the config it runs."""
    from moeserve.kernels.registry import kernel_set_class, resolve

    return kernel_set_class(resolve(config.device.device, config.device.kernels)[1]).tune_engine_process(config)


if __name__ == "__main__":
    sys.exit(main())
