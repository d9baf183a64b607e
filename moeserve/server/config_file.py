"""`moeserve serve` settings: the engine's table (moeserve/settings.py) and the front end's, read from
YAML and the command line.

Every setting is a CLI flag and a YAML key of the same name (`--max-num-seqs` <-> `max_num_seqs`);
precedence is built-in default < YAML file < command line. Engine settings land in the frozen
`EngineConfig` (moeserve/config.py), built exactly as `LLM(...)` builds it; front-end settings in
`ServerConfig`. Everything is validated here, before any process is spawned, and a mistake raises
`ConfigError` saying what to change.
"""
from __future__ import annotations

import argparse
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeserve import envs
from moeserve.config import EngineConfig
from moeserve.engine.chat_prompt import CONTENT_FORMATS
from moeserve.engine.startup_checks import check_startup
from moeserve.errors import ConfigError
from moeserve.server.parsers import REASONING_CHOICES, TOOL_PARSERS, check_parser_names
from moeserve.settings import ENGINE_FLAGS, ENGINE_KEYS, Flag, check_value, comma_list, config_default, engine_config

# what a browser sends as Origin: scheme://host[:port], no path (docs/server.md, CORS)
_ORIGIN = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#]+")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    # output one request may have waiting for its client to read; past it the request is aborted
    max_stream_buffer_bytes: int = 16 * 1024 * 1024
    shutdown_timeout_s: float = 30.0  # SIGTERM: how long in-flight requests may take to finish
    health_timeout_s: float = 60.0  # no heartbeat for this long: the engine is stuck, /health 503
    startup_timeout_s: float = 1800.0  # model loading
    log_level: str = "info"
    # browser origins allowed to call the API (CORS); empty = no CORS headers, as a server that binds
    # loopback should be: "*" would let any web page the user visits read this server's answers
    allowed_origins: tuple[str, ...] = ()
    # further names /v1/models lists and clients may pass as `model` (--served-model-name's second and
    # later); the engine's model name, which responses carry, is not among them
    served_model_aliases: tuple[str, ...] = ()
    # names clients may also pass, unlisted: --model as given (a path or org/name, what a client written
    # for vLLM sends) and its last path component (model_aliases)
    accepted_model_names: tuple[str, ...] = ()
    # chat output parsers by model family (server/parsers/): tool calls for tool_choice "auto", reasoning
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # sampling defaults for fields a request leaves out: "auto" the checkpoint's generation_config.json (vLLM's
    # --generation-config default), "vllm" none (OpenAI's), or a directory holding a generation_config.json
    generation_config: str = "auto"
    # how a chat message's content reaches the template (vLLM's flag): "auto" the form the template reads
    # (engine/chat_prompt.content_format), "string", or "openai" (a list of text parts)
    chat_template_content_format: str = "auto"

    def validate(self) -> "ServerConfig":
        if not self.host.strip():  # uvicorn would bind every interface; getaddrinfo's own refusal named no flag
            raise ConfigError(f"--host {self.host!r}: give an address to listen on (127.0.0.1; 0.0.0.0 for every interface)")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in [0, 65535], got {self.port}")
        if self.api_key is not None and not self.api_key:
            raise ConfigError("--api-key must not be empty")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"--max-body-bytes must be >= 1024, got {self.max_body_bytes}")
        if self.max_stream_buffer_bytes < 64 * 1024:
            raise ConfigError(f"--max-stream-buffer-bytes must be >= 65536, got {self.max_stream_buffer_bytes}")
        for name in ("shutdown_timeout_s", "health_timeout_s", "startup_timeout_s"):
            if not 0 < getattr(self, name) < float("inf"):  # NaN too: it passed `<= 0` and disabled the timeout
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {getattr(self, name)}")
        if self.chat_template_content_format not in CONTENT_FORMATS:
            raise ConfigError(f"--chat-template-content-format must be one of {', '.join(CONTENT_FORMATS)}, got "
                              f"{self.chat_template_content_format}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level}")
        check_parser_names(self.tool_call_parser, self.reasoning_parser)
        if self.generation_config not in ("auto", "vllm") and not os.path.isdir(self.generation_config):
            raise ConfigError(f"--generation-config {self.generation_config!r}: give auto (the checkpoint's "
                              "generation_config.json), vllm (none) or a directory holding a generation_config.json")
        for origin in self.allowed_origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ConfigError(f"--allowed-origins: {origin!r} is not an origin; write scheme://host[:port] with no "
                                  "path or trailing slash (what browsers send), e.g. http://localhost:3000, or *")
        return self


SERVER_FLAGS: list[Flag] = [
    Flag("host", "server.host", str, "address to listen on (default loopback; 0.0.0.0 exposes the server)"),
    Flag("port", "server.port", int, "TCP port to listen on (0 = any free port)"),
    Flag("api_key", "server.api_key", str, "require `Authorization: Bearer KEY` on every route but /health"),
    Flag("max_body_bytes", "server.max_body_bytes", int, "largest request body; larger ones get 413"),
    Flag("max_stream_buffer_bytes", "server.max_stream_buffer_bytes", int, "output one request may have waiting for a client that does not read it; past it the request is aborted, logged (docs/limits.md)"),
    Flag("shutdown_timeout_s", "server.shutdown_timeout_s", float, "on SIGTERM, seconds in-flight requests may take before they are aborted"),
    Flag("health_timeout_s", "server.health_timeout_s", float, "seconds without an engine heartbeat before /health says 503"),
    Flag("startup_timeout_s", "server.startup_timeout_s", float, "seconds the engine may take to load"),
    Flag("log_level", "server.log_level", str, "debug, info, warning or error", choices=LOG_LEVELS),
    Flag("tool_call_parser", "server.tool_call_parser", str, "how chat output holds tool calls, for tool_choice \"auto\": hermes (Qwen, Hermes), deepseek_v3, glm45, openai (gpt-oss); \"required\" and named tools work without (docs/structured_outputs.md)", choices=tuple(TOOL_PARSERS)),
    Flag("reasoning_parser", "server.reasoning_parser", str, "split chat output's reasoning into reasoning (and reasoning_content, its older name): deepseek_r1, qwen3, glm45, openai (gpt-oss); a structured output constrains the answer after it", choices=REASONING_CHOICES),
    Flag("generation_config", "server.generation_config", str, "sampling defaults for fields a request leaves out (temperature, top_p, top_k, min_p, penalties, max_tokens): auto, the checkpoint's generation_config.json, as vLLM; vllm, none (OpenAI's defaults); or a directory holding one"),
    Flag("chat_template_content_format", "server.chat_template_content_format", str, "how chat messages' content reaches the template, as vLLM's flag: auto, the form the template reads (a list of text parts when it loops over a message's content, else a string); string; openai (text parts)", choices=CONTENT_FORMATS),
    Flag("allowed_origins", "server.allowed_origins", tuple, "browser origins allowed to call the API, comma-separated (CORS; e.g. http://localhost:3000, or * for any); default none: no CORS headers. Preflights pass without a key; every other request still needs --api-key"),
]
FLAGS: list[Flag] = [*ENGINE_FLAGS, *SERVER_FLAGS]
_BY_KEY = {f.key: f for f in FLAGS}


def _default(flag: Flag) -> Any:
    if flag.serve_default is not None:
        return flag.serve_default
    if flag.target.startswith("server."):
        return getattr(ServerConfig(), flag.target.split(".")[1])
    return config_default(flag)


SPACE_SEPARATED = {"served_model_name"}  # lists given as several words, as vLLM's flag takes them


def cli_flag(flag: Flag) -> str:
    """What a user types: a switch that is on unless turned off is only its `--no-` form
    (`--no-prefix-caching`); the others are `--` + key."""
    if flag.type is bool and _default(flag) is True:
        return "--no-" + flag.flag[2:].removeprefix("enable-")
    return flag.flag


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds every flag with default SUPPRESS, so `vars(args)` holds only what the user typed."""
    for f in FLAGS:
        help_text = f.help if "default" in f.help else f"{f.help} (default: {_default(f)})"
        if f.type is bool and _default(f) is None:  # unset: decided at start-up; either way can be asked for
            parser.add_argument(f.flag, dest=f.key, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=help_text)
        elif f.type is bool:
            on = _default(f) is not True  # a switch on by default can only be turned off
            help_text = help_text if on else f"off: {f.help}" + ("" if "default" in f.help else " (on by default)")
            parser.add_argument(cli_flag(f), dest=f.key, action="store_true" if on else "store_false",
                                default=argparse.SUPPRESS, help=help_text)
        elif f.key in SPACE_SEPARATED:
            parser.add_argument(f.flag, dest=f.key, nargs="+", default=argparse.SUPPRESS, metavar="NAME", help=help_text)
        elif f.type is dict:  # JSON text, parsed with the rest of the settings (a ConfigError, exit 2)
            parser.add_argument(f.flag, dest=f.key, type=str, default=argparse.SUPPRESS, metavar="JSON", help=help_text)
        elif f.type is tuple:
            parser.add_argument(f.flag, dest=f.key, type=comma_list, default=argparse.SUPPRESS, metavar="A,B", help=help_text)
        elif f.choices:
            parser.add_argument(f.flag, dest=f.key, type=f.type, choices=f.choices, default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(f.flag, dest=f.key, type=f.type, default=argparse.SUPPRESS, metavar=f.key.upper(), help=help_text)


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    if not path:
        raise ConfigError("--config '': name a YAML deployment file")
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror}") from None
    except ValueError as e:  # not UTF-8 text
        raise ConfigError(f"--config {path} is not a text file: {e}") from None
    try:
        data = yaml.load(text, Loader=_strict_loader(path)) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path} is not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must be a mapping of setting: value")
    unknown = sorted(set(data) - set(_BY_KEY))
    if unknown:
        raise ConfigError(f"--config {path}: unknown keys {unknown}; valid keys: {', '.join(sorted(_BY_KEY))}")
    return {k: check_value(_BY_KEY[k], v, path) for k, v in data.items()}


def _strict_loader(path: str):
    """A SafeLoader for the --config file `path` that refuses aliases and keys set twice."""
    import yaml

    class Strict(yaml.SafeLoader):
        """A deployment file has no use for `*alias`: nine nested aliases of nine put 9**9 items in one
        value, and the error that printed it ran out of memory (as a --hardware profile refuses them)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ConfigError(f"--config {path}: YAML aliases (*name) are not allowed, line {mark.line + 1}")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            """A key set twice: PyYAML keeps the last silently, so an edit that added `tp: 4` below an
            old `tp: 2` ran whichever came last; the file is refused instead, naming both lines."""
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, str) and key in seen:
                    raise ConfigError(f"--config {path}: {key!r} is set twice, at lines {seen[key] + 1} and "
                                      f"{key_node.start_mark.line + 1}")
                if isinstance(key, str):
                    seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return Strict


def _yaml_problem(error) -> str:
    """PyYAML's error in one line: what is wrong and where (its own text spans several, with a caret)."""
    mark = getattr(error, "problem_mark", None)
    what = " ".join(str(getattr(error, "problem", None) or error).split())
    return f"{what} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else what


def build_configs(values: dict[str, Any]) -> tuple[EngineConfig, ServerConfig]:
    """values: YAML keys -> values (already merged, CLI over file). Validates both configs."""
    server = {_BY_KEY[k].target.split(".")[1]: v for k, v in values.items()
              if _BY_KEY[k].target.startswith("server.") and v is not None}
    server["served_model_aliases"], server["accepted_model_names"] = model_aliases(values.get("model"),
                                                                                   values.get("served_model_name"))
    engine = engine_config({k: v for k, v in values.items() if k in ENGINE_KEYS})
    engine = _kv_secret_not_api_key(engine, server.get("api_key"))
    engine, server_config = check_startup(engine), ServerConfig(**server).validate()
    _ports_apart(engine, server_config)
    return engine, server_config


def _ports_apart(engine: EngineConfig, server: ServerConfig) -> None:
    """The KV side channel and the HTTP server cannot listen on one address and port: the second to bind
    failed after the model had loaded."""
    kv = engine.kv_transfer
    if not kv.enabled or not kv.side_channel_port or kv.side_channel_port != server.port:
        return
    if server.host in ("0.0.0.0", "::") or server.host == kv.side_channel_host:
        raise ConfigError(f"--kv-side-channel-port {kv.side_channel_port} is --port too, on {kv.side_channel_host}: "
                          "give the KV side channel a port of its own (or 0: any free port)")


def _kv_secret_not_api_key(engine: EngineConfig, api_key: str | None) -> EngineConfig:
    """The KV pool's secret is never the --api-key: every client holds that key, and whoever holds the
    pool's secret signs kv_transfer_params and side-channel calls (NIXL metadata: read and write any KV)
    as a server of the pool (docs/disaggregation.md, trust model). A --kv-secret or MOESERVE_KV_SECRET
    equal to it is refused; none given: this user's secret file (kv_transfer/trust.py)."""
    kv = engine.kv_transfer
    secret = kv.secret or envs.KV_SECRET.get()
    if kv.enabled and api_key and secret and hmac.compare_digest(secret.encode(), api_key.encode()):
        source = "--kv-secret" if kv.secret else envs.KV_SECRET.name
        raise ConfigError(f"{source} must not be the --api-key: clients hold the API key, and the KV pool's secret lets "
                          "its holder read and write every KV cache of the pool; give the pool a secret of its own")
    return engine


def model_aliases(model: str | None, served_names: tuple[str, ...] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names the front end answers to besides the engine's (the first served name, else the name
    --model gives): (the other served names, listed by /v1/models; --model as given, a path or
    org/name as a client written for vLLM sends it, and its last component, accepted unlisted)."""
    listed = tuple(dict.fromkeys(served_names[1:])) if served_names else ()
    implicit = (model, model.rstrip("/").split("/")[-1]) if model else ()
    return listed, tuple(dict.fromkeys(n for n in implicit if n and n not in listed))


def configs_from_args(args: argparse.Namespace) -> tuple[EngineConfig, ServerConfig]:
    given = {k: v for k, v in vars(args).items() if k in _BY_KEY}
    values = load_yaml(args.config) if getattr(args, "config", None) is not None else {}
    values.update(given)
    for flag in ENGINE_FLAGS:
        if flag.serve_default is not None and values.get(flag.key) is None:
            values[flag.key] = flag.serve_default
    return build_configs(values)


def flags_markdown() -> str:
    """The docs table of every setting (docs/configuration.md; tests/test_docs.py keeps it in sync)."""
    rows = ["| YAML key / `LLM` keyword | flag | default | what it sets |", "|---|---|---|---|"]
    def shown(value: Any) -> Any:
        return "unset" if value is None else "none" if value == () else value

    for f in FLAGS:
        default = shown(_default(f))
        if f.serve_default is not None:
            default = f"{f.serve_default} (`LLM`: {shown(config_default(f))})"
        where = " (serve only)" if f.target.startswith("server.") else ""
        rows.append(f"| `{f.key}`{where} | `{cli_flag(f)}` | {default} | {f.help.replace('|', '/')} |")
    return "\n".join(rows)
