"""The start-up summary: one block, on rank 0, saying what the engine runs and where to send requests.

`summary_rows(engine)` gives (label, text) rows from what rank 0 knows once the engine is built: the
model and its checkpoint format, the dtype, the layout, the dispatch backend and kernel set chosen (and
why, for `auto`), the KV cache and the largest concurrency at the longest prompt, the placement. The
server adds the address it listens on and logs the rows as one block (server/cli.py); the Python
`LLM` logs them without one. Every rank's own start-up detail (warm-ups, thread checks) is logged at
debug level.
"""
from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("moeserve")

Rows = list[tuple[str, str]]


def summary_rows(engine: Any) -> Rows:
    """engine: an EngineCore. An executor without a rank-0 worker (tests' fakes) gives fewer rows."""
    config = engine.config
    runner = getattr(getattr(engine.executor, "worker", None), "runner", None)
    rows: Rows = [("model", _model(engine, runner))]
    if runner is not None:
        weights = f"{runner.weight_bytes / 2**20:,.1f} MiB of weights on rank 0"
        online = "; linears and experts quantized to FP8 at load" if config.model.quantization == "fp8" else ""
        rows.append(("dtype", f"{str(runner.dtype).removeprefix('torch.')} on {runner.device}; {weights}{online}"))
    rows.append(("layout", _layout(config.parallel)))
    if runner is not None:
        rows.append(("dispatch", _dispatch(config, runner)))
        rows.append(("kernels", _kernels(config, runner)))
    rows.append(("KV cache", _kv_cache(engine)))
    rows.append(("placement", _placement(config, runner)))
    if config.kv_transfer.role != "both" or config.kv_transfer.enabled:
        rows.append(("P/D", _kv_transfer(engine)))
    return rows


def format_block(rows: Rows, title: str = "moeserve is ready", footer: list[str] | None = None) -> str:
    """The rows under `title`, labels aligned, then the footer's lines: one log record."""
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join([title, *(f"  {label:<{width}}  {text}" for label, text in rows), *(footer or [])])


def log_summary(rows: Rows, title: str = "moeserve is ready", footer: list[str] | None = None) -> None:
    logger.info("%s", format_block(rows, title, footer))


def _model(engine: Any, runner: Any) -> str:
    from moeserve.builtin_model_info import builtin_model_dir

    model_dir = str(engine.config.model.model)
    where = "built-in" if model_dir == str(builtin_model_dir()) else f"from {model_dir}"
    if runner is None:
        return f"{engine.model_name}, {where}"
    architecture = (getattr(runner.hf_config, "architectures", None) or ["?"])[0]
    return f"{engine.model_name}: {architecture}, {checkpoint_format(runner.hf_config)}, {where}"


def checkpoint_format(hf_config: Any) -> str:
    """How the checkpoint stores its weights: safetensors of config.json's dtype, or its quantization."""
    quant = getattr(hf_config, "quantization_config", None)
    if quant:
        get = quant.get if isinstance(quant, dict) else lambda k, d=None: getattr(quant, k, d)
        method, block = get("quant_method", "quantized"), get("weight_block_size")
        return f"{method} safetensors" + (f" (block scales {block[0]}x{block[1]})" if block else "")
    stored = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    return f"{str(stored).removeprefix('torch.')} safetensors" if stored else "safetensors"


def _layout(parallel: Any) -> str:
    tp, ep, world, groups = parallel.tp, parallel.ep, parallel.world_size, parallel.num_attention_groups
    nodes = f"{parallel.nodes} node{'s' if parallel.nodes > 1 else ''}"
    if world == 1:
        return f"tp 1, ep 1: one rank, {nodes}"
    if ep == 1:
        return f"tp {tp}, ep 1: {world} ranks, 1 attention group; every expert split {tp} ways; {nodes}"
    return (f"tp {tp}, ep {ep}: {world} ranks, {groups} attention group{'s' if groups > 1 else ''} of {tp}, "
            f"experts over all {ep}; {nodes}")


def _dispatch(config: Any, runner: Any) -> str:
    from moeserve.dispatch.registry import describe

    dispatcher = getattr(runner.model, "dispatcher", None)
    if dispatcher is None:
        return "none (no MoE layer)"
    return describe(config.parallel.dispatch, dispatcher, runner.ctx)


def _kernels(config: Any, runner: Any) -> str:
    from moeserve.kernels.registry import why_auto

    why = why_auto(config.device.device, config.device.kernels)
    return f"{runner.kernels.name} ({why}): {runner.kernels.describe()}" if why else \
        f"{runner.kernels.name}: {runner.kernels.describe()}"


def _kv_cache(engine: Any) -> str:
    """Blocks per attention group, and how many sequences of max_model_len tokens fit at once."""
    executor, block_size = engine.executor, engine.config.cache.block_size
    groups, blocks, longest = executor.num_groups, executor.num_blocks, engine.max_model_len
    per_seq, seats = -(-longest // block_size), engine.config.scheduler.max_num_seqs
    fit = groups * min(blocks // per_seq, seats)
    bound = " (--max-num-seqs bounds it)" if blocks // per_seq > seats else ""
    where = f"in each of {groups} attention groups" if groups > 1 else "in one attention group"
    prefix = "on" if engine.config.cache.enable_prefix_caching else "off"
    fp8 = "; e4m3 (--kv-cache-dtype fp8)" if engine.config.cache.kv_cache_dtype == "fp8" else ""
    return (f"{blocks:,} blocks of {block_size} tokens {where} ({blocks * block_size:,} tokens); {fit:,} sequences "
            f"of {longest:,} tokens (max_model_len) at once{bound}; prefix caching {prefix}{fp8}")


def _kv_transfer(engine: Any) -> str:
    role = engine.config.kv_transfer.role
    side = getattr(getattr(engine, "kv", None), "side_channel", None)
    channel = f"; KV side channel {side.host}:{side.port}" if side is not None else ""
    moved = "KV blocks move by NIXL reads" if engine.config.kv_transfer.enabled else "no KV transfer"
    return f"--kv-role {role}: {moved}{channel}"


def _placement(config: Any, runner: Any) -> str:
    runtime = config.placement_runtime
    online = f"; rebalancing every {runtime.eplb_interval} steps" if runtime.eplb_interval else ""
    recording = f"; recording routing to {runtime.record_trace_dir}" if runtime.record_trace_dir else ""
    if runner is None:
        return f"{config.placement or 'none'}{online}{recording}"
    moe_layers = getattr(runner.model, "moe_layers", None)
    layers = list(moe_layers().values()) if moe_layers is not None else []
    if not layers:
        return f"none (no MoE layer){online}{recording}"
    if config.placement is None:
        per_rank = f", {layers[0].num_experts // config.parallel.ep} per rank" if config.parallel.ep > 1 else ""
        return f"none: experts in order{per_rank}{online}{recording}"
    extra = layers[0].num_slots - layers[0].num_experts
    return f"{config.placement} applied, {extra} redundant slots per layer{online}{recording}"
