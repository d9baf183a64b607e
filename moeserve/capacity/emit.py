"""Write a deployment as a `moeserve serve --config` YAML file (keys from server/config_file.py)."""
from __future__ import annotations

import math
from pathlib import Path

from moeserve.capacity.predict import Prediction, Workload

MIB = 1 << 20
# KV space the emitted config asks for beyond what the planned batch holds
KV_HEADROOM = 1.2


def serve_settings(pred: Prediction, w: Workload, model: str | None, gpus_per_node: int, dtype: str,
                   placement: str | None = None) -> dict:
    """Serve keys for one instance of `pred` (a decode or colocated instance; a prefill one with
    phase 'prefill'): the layout, batch bounds and a KV budget that holds the planned batch."""
    lay = pred.layout
    mem = pred.memory
    if pred.phase == "prefill":
        seqs_per_group = max(1, math.ceil(pred.batch / max(1, w.isl)))
        batched_tokens = int(pred.batch) * lay.tp
    else:
        seqs_per_group = max(1, int(pred.batch) * lay.tp)
        batched_tokens = max(w.isl, 2048)
    kv_bytes = seqs_per_group * (w.isl + w.osl) * mem["kv_bytes_per_token"] * KV_HEADROOM
    return {
        "model": model,
        "dtype": dtype,
        "max_model_len": w.isl + w.osl,
        "block_size": 64 if mem.get("mla") else 16,
        "kv_cache_memory_mb": max(64, math.ceil(kv_bytes / MIB)),
        "enable_prefix_caching": True,
        "max_num_seqs": seqs_per_group,
        "max_num_batched_tokens": batched_tokens,
        "tp": lay.tp,
        "ep": lay.ep,
        "nodes": max(1, math.ceil(lay.world / gpus_per_node)),
        "placement": placement,
    }


def write(path: str, settings: dict, header: list[str]) -> None:
    import yaml

    text = "".join(f"# {h}\n" for h in header) + yaml.safe_dump(settings, sort_keys=False)
    Path(path).write_text(text)
