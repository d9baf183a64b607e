"""`moeserve serve` settings: one table of flags, read from YAML and the command line.

Every setting is a CLI flag and a YAML key of the same name (`--max-num-seqs` <-> `max_num_seqs`);
precedence is built-in default < YAML file < command line. Engine settings land in the frozen
`EngineConfig` (moeserve/config.py); front-end settings in `ServerConfig`. Everything is validated
here, before any process is spawned, and a mistake raises `ConfigError` saying what to change.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeserve.config import (CacheConfig, ConfigError, DeviceConfig, EngineConfig, ModelConfig, ParallelConfig,
                             SchedulerConfig)
from moeserve.placement.runtime_config import PlacementRuntimeConfig


# cores `moeserve serve` leaves to its front end unless --reserved-cores says otherwise
SERVE_RESERVED_CORES = 1
# a server splits bursts of prompts for time to first token unless told not to; the offline LLM
# (throughput) does not (docs/core.md)
SERVE_SPLIT_PREFILL_BURSTS = True
# what a browser sends as Origin: scheme://host[:port], no path (docs/server.md, CORS)
_ORIGIN = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#]+")


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    shutdown_timeout_s: float = 30.0  # SIGTERM: how long in-flight requests may take to finish
    health_timeout_s: float = 60.0  # no heartbeat for this long: the engine is stuck, /health 503
    startup_timeout_s: float = 1800.0  # model loading
    log_level: str = "info"
    # browser origins allowed to call the API (CORS); empty = no CORS headers, as a server that binds
    # loopback should be: "*" would let any web page the user visits read this server's answers
    allowed_origins: tuple[str, ...] = ()
    # further names clients may pass as `model` (--served-model-name's second and later); the first is
    # the engine's model name, which responses carry
    served_model_aliases: tuple[str, ...] = ()

    def validate(self) -> "ServerConfig":
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in [0, 65535], got {self.port}")
        if self.api_key is not None and not self.api_key:
            raise ConfigError("--api-key must not be empty")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"--max-body-bytes must be >= 1024, got {self.max_body_bytes}")
        for name in ("shutdown_timeout_s", "health_timeout_s", "startup_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"--log-level must be one of debug, info, warning, error, got {self.log_level}")
        for origin in self.allowed_origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ConfigError(f"--allowed-origins: {origin!r} is not an origin; write scheme://host[:port] with no "
                                  "path or trailing slash (what browsers send), e.g. http://localhost:3000, or *")
        return self


@dataclass(frozen=True)
class Flag:
    key: str  # YAML key; the flag is "--" + key with "-" for "_"
    target: str  # "<section>.<field>": an EngineConfig part, "engine" (its own fields) or "server"
    type: type  # bool, int, float, str, or tuple: a list (comma-separated on the command line)
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


FLAGS: list[Flag] = [
    Flag("model", "model.model", str, "Hugging Face checkpoint directory; omit to serve the built-in tiny MoE"),
    Flag("served_model_name", "model.served_model_name", tuple, "name(s) clients pass as `model`, space-separated on the command line (a list in YAML): any of them is accepted, /v1/models lists each, and responses carry the first, as vLLM's (default: derived from --model)"),
    Flag("dtype", "model.dtype", str, "weight and activation dtype: auto (bfloat16 on cuda, float32 on cpu), float32, bfloat16 or float16"),
    Flag("max_model_len", "model.max_model_len", int, "longest prompt + output in tokens (default: the checkpoint's)"),
    Flag("block_size", "cache.block_size", int, "tokens per KV-cache block (a power of two)"),
    Flag("kv_cache_blocks", "cache.num_blocks", int, "KV-cache blocks per attention group (overrides --kv-cache-memory-mb)"),
    Flag("kv_cache_memory_mb", "cache.kv_cache_memory_mb", int, "KV-cache memory per rank in MiB, when --kv-cache-blocks is unset"),
    Flag("enable_prefix_caching", "cache.enable_prefix_caching", bool, "reuse KV blocks of shared prompt prefixes"),
    Flag("max_num_seqs", "scheduler.max_num_seqs", int, "most running requests per attention group"),
    Flag("max_num_batched_tokens", "scheduler.max_num_batched_tokens", int, "token budget of one step per attention group"),
    Flag("max_queued_requests", "scheduler.max_queued_requests", int, "waiting-queue bound; beyond it requests get 429"),
    Flag("split_prefill_bursts", "scheduler.split_prefill_bursts", bool, "spread a burst of waiting prompts over a few steps, cut between prompts, when the engine's measured step cost says their first tokens then come sooner on average; the burst's last prompts pay one step overhead more, so the median TTFT falls and the p99 rises (default: on for serve; the Python LLM keeps it off for throughput)"),
    Flag("tp", "parallel.tp", int, "tensor-parallel degree of attention and dense layers"),
    Flag("ep", "parallel.ep", int, "expert-parallel degree (a multiple of --tp; 1 = experts split tensor-parallel)"),
    Flag("nodes", "parallel.nodes", int, "number of nodes the ranks span"),
    Flag("dispatch", "parallel.dispatch", str, "MoE dispatch backend: auto, local, a2a, agrs (auto: local at ep 1; agrs for steps of <= 32 tokens on <= 2 ranks; else a2a; docs/dispatch.md)"),
    Flag("backend", "parallel.backend", str, "torch.distributed backend: auto (nccl with CUDA, else gloo), nccl, gloo"),
    Flag("step_timeout_s", "parallel.step_timeout_s", float, "a step slower than this means a stuck rank"),
    Flag("num_threads", "parallel.num_threads", int, "torch intra-op threads per rank, pinned (default: auto; a single-rank engine times each step size both ways, one per 1024 hidden with --expert-threads forks or all of its cores without, and runs the faster; a start-up bit check keeps it on the first way unless both give the same bits)"),
    Flag("expert_threads", "parallel.expert_threads", int, "threads each rank splits its experts (and, by output columns, its large dense GEMMs) over, where timing shows it pays (default: the rank's cores over --num-threads; any value gives the same tokens)"),
    Flag("reserved_cores", "parallel.reserved_cores", int, "cores of this node left to the HTTP front end and its clients; the ranks share the rest (default 1, as vLLM's CPU backend reserves; 0 gives the engine every core); a single-rank engine still borrows their idle time at the lowest priority (MOESERVE_IDLE_HELPERS=0 turns that off)"),
    Flag("device", "device.device", str, "where the ranks run: auto (cuda when torch sees a GPU, else cpu), cpu, or cuda (each rank on cuda:LOCAL_RANK; NCCL between ranks)"),
    Flag("kernels", "device.kernels", str, "kernel set of the hot operations: auto (triton on cuda, cpu on cpu), torch (plain torch reference, any device), cpu, triton (docs/kernels.md)"),
    Flag("gpu_memory_utilization", "device.gpu_memory_utilization", float, "share of each GPU's memory the weights and KV cache may take; the KV cache is sized from what is free of it after loading unless --kv-cache-blocks is given (CUDA only)"),
    Flag("placement", "engine.placement", str, "expert placement plan JSON (from `moeserve place`)"),
    Flag("seed", "engine.seed", int, "global random seed"),
    Flag("record_trace_dir", "placement_runtime.record_trace_dir", str, "record routing traces here, one file per window"),
    Flag("record_window_steps", "placement_runtime.record_window_steps", int, "engine steps per recorded routing window"),
    Flag("eplb_interval", "placement_runtime.eplb_interval", int, "re-plan and move experts every this many steps; 0 = never"),
    Flag("eplb_window", "placement_runtime.eplb_window", int, "steps of routing counts each re-plan uses; 0 = --eplb-interval"),
    Flag("eplb_num_groups", "placement_runtime.eplb_num_groups", int, "expert groups handed to the placement optimizer"),
    Flag("host", "server.host", str, "address to listen on (default loopback; 0.0.0.0 exposes the server)"),
    Flag("port", "server.port", int, "TCP port to listen on (0 = any free port)"),
    Flag("api_key", "server.api_key", str, "require `Authorization: Bearer KEY` on every route but /health"),
    Flag("max_body_bytes", "server.max_body_bytes", int, "largest request body; larger ones get 413"),
    Flag("shutdown_timeout_s", "server.shutdown_timeout_s", float, "on SIGTERM, seconds in-flight requests may take before they are aborted"),
    Flag("health_timeout_s", "server.health_timeout_s", float, "seconds without an engine heartbeat before /health says 503"),
    Flag("startup_timeout_s", "server.startup_timeout_s", float, "seconds the engine may take to load"),
    Flag("log_level", "server.log_level", str, "debug, info, warning or error"),
    Flag("allowed_origins", "server.allowed_origins", tuple, "browser origins allowed to call the API, comma-separated (CORS; e.g. http://localhost:3000, or * for any); default none: no CORS headers. Preflights pass without a key; every other request still needs --api-key"),
]
_BY_KEY = {f.key: f for f in FLAGS}
_SECTIONS = {"model": ModelConfig, "cache": CacheConfig, "scheduler": SchedulerConfig, "parallel": ParallelConfig,
             "device": DeviceConfig, "placement_runtime": PlacementRuntimeConfig}


def _default(flag: Flag) -> Any:
    section, name = flag.target.split(".")
    if section == "server":
        return getattr(ServerConfig(), name)
    if section == "engine":
        return getattr(EngineConfig(), name)
    return getattr(_SECTIONS[section](), name)


SPACE_SEPARATED = {"served_model_name"}  # lists given as several words, as vLLM's flag takes them


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds every flag with default SUPPRESS, so `vars(args)` holds only what the user typed."""
    for f in FLAGS:
        help_text = f.help if "default" in f.help else f"{f.help} (default: {_default(f)})"
        if f.type is bool:
            parser.add_argument(f.flag, dest=f.key, action="store_true", default=argparse.SUPPRESS, help=help_text)
            parser.add_argument(
                "--no-" + f.flag[2:].removeprefix("enable-"), dest=f.key, action="store_false",
                default=argparse.SUPPRESS, help=f"turn {f.flag} off",
            )
        elif f.key in SPACE_SEPARATED:
            parser.add_argument(f.flag, dest=f.key, nargs="+", default=argparse.SUPPRESS, metavar="NAME", help=help_text)
        elif f.type is tuple:
            parser.add_argument(f.flag, dest=f.key, type=_comma_list, default=argparse.SUPPRESS, metavar="A,B", help=help_text)
        else:
            parser.add_argument(f.flag, dest=f.key, type=f.type, default=argparse.SUPPRESS, metavar=f.key.upper(), help=help_text)


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _check_type(key: str, value: Any, origin: str) -> Any:
    flag = _BY_KEY[key]
    if value is None:
        return None
    if flag.type is tuple:
        if isinstance(value, str):
            return _comma_list(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{origin}: {key} must be a list of strings (or one comma-separated string), got {value!r}")
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, (str, int, float)) and not isinstance(value, bool),
    }[flag.type]
    if not ok:
        raise ConfigError(f"{origin}: {key} must be a {flag.type.__name__}, got {value!r}")
    return flag.type(value)


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must be a mapping of setting: value")
    unknown = sorted(set(data) - set(_BY_KEY))
    if unknown:
        raise ConfigError(f"--config {path}: unknown keys {unknown}; valid keys: {', '.join(sorted(_BY_KEY))}")
    return {k: _check_type(k, v, path) for k, v in data.items()}


def build_configs(values: dict[str, Any]) -> tuple[EngineConfig, ServerConfig]:
    """values: YAML keys -> values (already merged, CLI over file). Validates both configs."""
    parts: dict[str, dict[str, Any]] = {s: {} for s in (*_SECTIONS, "engine", "server")}
    names = values.get("served_model_name")
    if names is not None:  # the engine knows the first name; the front end also answers to the rest
        if not names or any(not n for n in names):
            raise ConfigError(f"--served-model-name needs one or more non-empty names, got {list(names)}")
        values = {**values, "served_model_name": names[0]}
        parts["server"]["served_model_aliases"] = tuple(names[1:])
    for key, value in values.items():
        section, name = _BY_KEY[key].target.split(".")
        parts[section][name] = value
    engine = EngineConfig(
        **{s: cls(**parts[s]) for s, cls in _SECTIONS.items()},
        **parts["engine"],
    )
    return engine.validate(), ServerConfig(**parts["server"]).validate()


def configs_from_args(args: argparse.Namespace) -> tuple[EngineConfig, ServerConfig]:
    given = {k: v for k, v in vars(args).items() if k in _BY_KEY}
    values = load_yaml(args.config) if getattr(args, "config", None) else {}
    values.update(given)
    if values.get("reserved_cores") is None:
        values["reserved_cores"] = SERVE_RESERVED_CORES
    if values.get("split_prefill_bursts") is None:
        values["split_prefill_bursts"] = SERVE_SPLIT_PREFILL_BURSTS
    return build_configs(values)


def config_to_dict(config: EngineConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(d: dict[str, Any]) -> EngineConfig:
    """Inverse of config_to_dict; nested sections are rebuilt from EngineConfig's field factories."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(EngineConfig):
        if f.name not in d:
            continue
        if f.default_factory is not dataclasses.MISSING:
            kwargs[f.name] = type(f.default_factory())(**d[f.name])
        else:
            kwargs[f.name] = d[f.name]
    return EngineConfig(**kwargs)
