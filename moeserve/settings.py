"""The engine's settings, one table: each is a `moeserve serve` flag, a YAML key and an `LLM(...)` keyword.

`ENGINE_FLAGS` maps a key (`max_num_seqs`; the flag is `--max-num-seqs`) to one field of the frozen
`EngineConfig` (config.py). The config dataclasses hold the one set of defaults; `engine_config`
builds an `EngineConfig` from any mapping of keys, so a field added to a config dataclass and to
this table is at once a flag, a YAML key (server/config_file.py) and an `LLM` keyword
(engine/llm.py) with the same default.

Where `moeserve serve` deliberately starts from another value than the Python API, the flag says so
in `serve_default`, with the reason in its comment; nothing else differs between the two.
"""
from __future__ import annotations

import dataclasses
import os
import reprlib
from dataclasses import dataclass
from typing import Any

from moeserve.config import (
    DEVICES, DISPATCH_BACKENDS, KERNEL_SET_NAMES, KV_ROLES, KV_TRANSFERS, TORCH_BACKENDS, VALID_DTYPES, EngineConfig,
)
from moeserve.errors import ConfigError


@dataclass(frozen=True)
class Flag:
    key: str  # YAML key and LLM keyword; the flag is "--" + key with "-" for "_"
    # "<section>.<field>": an EngineConfig part, "engine" (its own fields) or "server"; a dict flag
    # names a whole part ("speculative"), which its class builds from the value (`from_value`)
    target: str
    type: type  # bool, int, float, str, tuple: a list (comma-separated on the command line), dict: JSON object
    help: str
    # what `moeserve serve` uses when neither the command line nor the YAML file sets the key; None:
    # the config's default, as in the Python API
    serve_default: Any = None
    choices: tuple[str, ...] | None = None  # the values a str flag takes (argparse lists them in the usage line)

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


ENGINE_FLAGS: list[Flag] = [
    Flag("model", "model.model", str, "Hugging Face checkpoint directory, or a model name (org/name) found in the Hugging Face cache or downloaded (HF_HUB_OFFLINE=1: cache only); omit to serve the built-in tiny MoE"),
    Flag("served_model_name", "model.served_model_name", tuple, "name(s) clients pass as `model`, space-separated on the command line (a list in YAML): any of them is accepted, /v1/models lists each, and responses carry the first, as vLLM's (default: --model as given for a Hugging Face name, else the directory's name); --model as given (a path or org/name) and its last component are accepted too"),
    Flag("chat_template", "model.chat_template", str, "Jinja chat template that replaces the checkpoint's for /v1/chat/completions, /tokenize and LLM.chat: a file, or the template itself (vLLM's flag); read and checked at start-up"),
    Flag("dtype", "model.dtype", str, "weight and activation dtype: auto (bfloat16 on cuda, float32 on cpu), float32, bfloat16 or float16", choices=VALID_DTYPES),
    Flag("max_model_len", "model.max_model_len", int, "longest prompt + output in tokens (default: the checkpoint's)"),
    Flag("max_logprobs", "model.max_logprobs", int, "most alternatives per token a request may ask for in logprobs, top_logprobs or prompt_logprobs (vLLM's flag and default); -1: the whole vocabulary, which a request asks for with -1. Each alternative is a JSON entry per token of every choice, so a large bound lets one request ask for a large response"),
    Flag("quantization", "model.quantization", str, "none, or fp8: quantize a BF16/FP16 checkpoint's linear layers and experts at load into e4m3 with 128x128 block scales (the FP8 checkpoints' layout), activations per token and group of 128 at each call; needs a kernel set that runs FP8 weights (--kernels triton; docs/kernels.md)"),
    Flag("block_size", "cache.block_size", int, "tokens per KV-cache block (a power of two)"),
    Flag("kv_cache_blocks", "cache.num_blocks", int, "KV-cache blocks per attention group (overrides --kv-cache-memory-mb)"),
    Flag("kv_cache_memory_mb", "cache.kv_cache_memory_mb", int, "KV-cache memory per rank in MiB, when --kv-cache-blocks is unset; a CPU engine refuses caches larger than the host memory available at start-up (the ranks it starts on one host together)"),
    Flag("enable_prefix_caching", "cache.enable_prefix_caching", bool, "reuse KV blocks of shared prompt prefixes"),
    Flag("kv_cache_dtype", "cache.kv_cache_dtype", str, "auto (the model's dtype) or fp8: K/V (MLA: the latent and rope key) stored as e4m3 with a scale (1.0: no calibrated scales are read), half the bytes of bf16; logprobs move within FP8's error (docs/kernels.md)"),
    Flag("max_num_seqs", "scheduler.max_num_seqs", int, "most running requests per attention group"),
    Flag("max_num_batched_tokens", "scheduler.max_num_batched_tokens", int, "token budget of one step per attention group"),
    Flag("max_queued_requests", "scheduler.max_queued_requests", int, "waiting-queue bound; beyond it requests get 429"),
    Flag("max_n", "scheduler.max_n", int, "most choices (n, best_of) one request may ask for; above it a 400 (docs/limits.md)"),
    # a server answers requests that arrive in bursts and is judged by time to first token; the offline
    # LLM submits all its prompts at once and is judged by throughput, which splitting only costs
    Flag("split_prefill_bursts", "scheduler.split_prefill_bursts", bool, "spread a burst of waiting prompts over a few steps, cut between prompts, when the engine's measured step cost says their first tokens then come sooner on average; the burst's last prompts pay one step overhead more, so the median TTFT falls and the p99 rises (default: on for serve; the Python LLM keeps it off for throughput)", serve_default=True),
    Flag("async_scheduling", "scheduler.async_scheduling", bool, "the host one step ahead (vLLM's async scheduling): step N+1 is scheduled and queued on the device while step N runs, its newest tokens filled in on the device, and each step's sampled ids are read back once, asynchronously; a request that stops at step N costs step N+1 for nothing (default: on with --device cuda, off on CPUs, where the forward runs on the host thread and nothing overlaps; docs/gpu_runtime.md)"),
    Flag("tp", "parallel.tp", int, "tensor-parallel degree of attention and dense layers"),
    Flag("ep", "parallel.ep", int, "expert-parallel degree (a multiple of --tp; 1 = experts split tensor-parallel)"),
    Flag("nodes", "parallel.nodes", int, "number of nodes the ranks span"),
    Flag("dispatch", "parallel.dispatch", str, "MoE dispatch backend: auto, local, a2a, a2a_ll, agrs, shm, nvshmem, hier (auto: local at ep 1; shm when every rank shares an x86-64 host on gloo; hier across --nodes of several ranks each on x86-64 CPU hosts: shm inside each host, one exchange per host pair; a2a_ll for GPU ranks running CUDA graphs; else agrs for steps of <= 32 tokens on <= 2 ranks, a2a otherwise; docs/dispatch.md)", choices=DISPATCH_BACKENDS),
    Flag("backend", "parallel.backend", str, "torch.distributed backend: auto (nccl with CUDA, else gloo), nccl, gloo", choices=TORCH_BACKENDS),
    Flag("device", "device.device", str, "where the ranks run: auto (cuda when torch sees a GPU, else cpu), cpu, or cuda (each rank on cuda:LOCAL_RANK; NCCL between ranks)", choices=DEVICES),
    Flag("kernels", "device.kernels", str, "kernel set of the hot operations: auto (triton on cuda, cpu on cpu), torch (plain torch reference, any device), cpu, triton (docs/kernels.md)", choices=KERNEL_SET_NAMES),
    Flag("enforce_eager", "device.enforce_eager", bool, "run every step eagerly (vLLM's flag): no CUDA graphs. By default a CUDA engine captures its decode forward at start-up as one CUDA graph per batch-size bucket (1, 2, 4, 8, 16, 24, ... up to --max-num-seqs) and replays it for every decode step; prefill and mixed steps run eagerly (docs/gpu_runtime.md)"),
    Flag("gpu_memory_utilization", "device.gpu_memory_utilization", float, "share of each GPU's memory the weights and KV cache may take; the KV cache is sized from what is free of it after loading unless --kv-cache-blocks is given (CUDA only)"),
    Flag("step_timeout_s", "parallel.step_timeout_s", float, "a step slower than this means a stuck rank"),
    Flag("dist_ifname", "parallel.dist_ifname", str, "network interface the ranks of different hosts talk over (gloo; NCCL's bootstrap); default: the one that routes to the launcher's MASTER_ADDR, never loopback with --nodes > 1; GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, where set, win (docs/multihost.md)"),
    Flag("num_threads", "parallel.num_threads", int, "torch intra-op threads per rank, pinned (default: auto; a single-rank engine times each step size both ways, one per 1024 hidden with --expert-threads forks or all of its cores without, and runs the faster; a start-up bit check keeps it on the first way unless both give the same bits)"),
    Flag("expert_threads", "parallel.expert_threads", int, "threads each rank splits its experts (and, by output columns, its large dense GEMMs) over, where timing shows it pays (default: the rank's cores over --num-threads; any value gives the same tokens)"),
    # the server's HTTP front end and its clients need a core of their own (as vLLM's CPU backend
    # reserves one); the offline LLM has no front end, so its engine takes every core
    Flag("reserved_cores", "parallel.reserved_cores", int, "cores of this node left to the HTTP front end and its clients; the ranks share the rest (default 1 for serve, as vLLM's CPU backend reserves; 0 in the Python LLM, which has no front end, and 0 gives the engine every core); a single-rank engine still borrows their idle time at the lowest priority (MOESERVE_IDLE_HELPERS=0 turns that off)", serve_default=1),
    Flag("kv_role", "kv_transfer.role", str, "prefill/decode split (docs/disaggregation.md): both (prompts and tokens here), prefill (keep a finished prompt's KV blocks for a remote decoder), decode (take a prompt's KV from a prefill server); vllm-router's kv_transfer_params", choices=KV_ROLES),
    Flag("kv_transfer", "kv_transfer.transfer", str, "how KV blocks move between servers: auto (nixl for --kv-role prefill or decode, none for both), none, nixl (one-sided NIXL reads; needs pip install 'moeserve[pd]')", choices=KV_TRANSFERS),
    Flag("kv_side_channel_host", "kv_transfer.side_channel_host", str, "address the KV side channel (NIXL handshake, pins, releases; JSON over HTTP) binds to and that prefill answers name"),
    Flag("kv_side_channel_port", "kv_transfer.side_channel_port", int, "port of the KV side channel; 0 = any free port (the prefill answer names it)"),
    Flag("kv_expiry_s", "kv_transfer.expiry_s", float, "seconds a prefill server keeps a finished prompt's KV blocks for a decoder that has not read them"),
    Flag("kv_secret", "kv_transfer.secret", str, "the secret every prefill and decode server of one pool shares: prefill answers are signed with it and side-channel calls must be (docs/disaggregation.md, trust model); default: MOESERVE_KV_SECRET, else a random secret kept in MOESERVE_CACHE/kv-secret (0600), which pairs the servers one user runs on one machine; never the --api-key, which clients hold"),
    Flag("kv_max_pinned_blocks", "kv_transfer.max_pinned_blocks", int, "most KV blocks per attention group a prefill server keeps for remote decoders; a new pin past it releases the oldest unread ones, and a prompt larger than it is refused (default 0: half of the group's blocks)"),
    Flag("speculative_config", "speculative", dict, "speculative decoding, as vLLM's flag: a JSON object (a mapping in YAML and LLM) with method ngram (prompt lookup: prompt_lookup_min, prompt_lookup_max) or mtp (the checkpoint's multi-token-prediction layers), and num_speculative_tokens (docs/speculative_decoding.md); default unset: off"),
    Flag("placement", "engine.placement", str, "expert placement plan JSON (from `moeserve place`)"),
    Flag("seed", "engine.seed", int, "global random seed"),
    Flag("record_trace_dir", "placement_runtime.record_trace_dir", str, "record routing traces here, one file per window"),
    Flag("record_window_steps", "placement_runtime.record_window_steps", int, "engine steps per recorded routing window"),
    Flag("eplb_interval", "placement_runtime.eplb_interval", int, "re-plan and move experts every this many steps; 0 = never"),
    Flag("eplb_window", "placement_runtime.eplb_window", int, "steps of routing counts each re-plan uses; 0 = --eplb-interval"),
    Flag("eplb_num_groups", "placement_runtime.eplb_num_groups", int, "expert groups handed to the placement optimizer"),
]

# EngineConfig's parts, by field name (a part added to EngineConfig is found here without an edit)
SECTIONS = {f.name: type(f.default_factory()) for f in dataclasses.fields(EngineConfig)
            if f.default_factory is not dataclasses.MISSING}
ENGINE_KEYS = {f.key: f for f in ENGINE_FLAGS}


def config_default(flag: Flag) -> Any:
    """The flag's default in the config dataclasses (what `LLM(...)` uses); None for a dict flag (unset)."""
    if flag.type is dict:
        return None
    section, name = flag.target.split(".")
    owner = EngineConfig if section == "engine" else SECTIONS[section]
    return next(f for f in dataclasses.fields(owner) if f.name == name).default


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def check_value(flag: Flag, value: Any, origin: str) -> Any:
    """`value` as the flag's type (a path-like as str, a comma-separated string as a list), or
    ConfigError naming `origin` (the YAML file, `LLM(...)`) and the key."""
    if value is None:
        return None
    if flag.type is dict:
        return SECTIONS[flag.target].from_value(value, origin if origin.startswith("--") else f"{origin}: {flag.key}")
    if flag.type is tuple:
        if isinstance(value, str):
            return comma_list(value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{origin}: {flag.key} must be a list of strings (or one comma-separated string), got {reprlib.repr(value)}")
    if flag.type is str and isinstance(value, os.PathLike):
        return os.fspath(value)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, (str, int, float)) and not isinstance(value, bool),
    }[flag.type]
    if not ok:
        raise ConfigError(f"{origin}: {flag.key} must be a {flag.type.__name__}, got {reprlib.repr(value)}")
    return flag.type(value)


def engine_config(values: dict[str, Any]) -> EngineConfig:
    """An EngineConfig (not yet validated) from ENGINE_FLAGS keys -> values of the flag's type; a key
    left out or None keeps the config's default. `served_model_name` may hold several names: the
    engine takes the first (the server answers to the others)."""
    parts: dict[str, dict[str, Any]] = {s: {} for s in (*SECTIONS, "engine")}
    whole: dict[str, Any] = {}  # parts a dict flag sets at once
    for key, value in values.items():
        if value is None:
            continue
        if key == "served_model_name" and not isinstance(value, str):
            if not value or any(not n for n in value):
                raise ConfigError(f"--served-model-name needs one or more non-empty names, got {list(value)}")
            value = value[0]
        flag = ENGINE_KEYS[key]
        if flag.type is dict:
            whole[flag.target] = SECTIONS[flag.target].from_value(value, flag.flag)
            continue
        section, name = flag.target.split(".")
        parts[section][name] = value
    return EngineConfig(**{s: whole.get(s) or cls(**parts[s]) for s, cls in SECTIONS.items()}, **parts["engine"])


def describe(flags: list[Flag]) -> str:
    """One line per setting (key, type, default, help) for docstrings and docs."""
    return "\n".join(f"    {f.key} ({f.type.__name__}, default {config_default(f)!r}): {f.help}" for f in flags)
