"""Tile configurations as data: per card, per layer shape, per batch size, the launch a kernel's tuning
found fastest (benchmarks/tune_fused_moe.py writes them), as vLLM keeps its fused_moe configs.

    kernels/triton/configs/<kernel>.json
    {"version": 1,
     "configs": {"<card name>": {"<shape key>": {"<rows per slot>": [block_m, block_n, block_k, warps, stages]}}}}

The card name is torch.cuda.get_device_name's ("NVIDIA H200"); the shape key names the layer's sizes and
dtype ("S=32,H=7168,I=2048,dtype=bfloat16"); the batch key is an average row count per expert slot. A
lookup takes the smallest key at or above the batch's rows per slot (the largest past them), and
returns None where the table has no entry for the card or shape: the kernel's own heuristic then
picks. Everything here reads host values only (a table is read from disk once per process).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

CONFIG_DIR = Path(__file__).parent / "configs"
VERSION = 1


def table(kernel: str, directory: Path | None = None) -> dict:
    """{card: {shape: {rows: config}}} of `kernel` ({} when there is no file); directory: CONFIG_DIR."""
    return _read(directory or CONFIG_DIR, kernel)


@functools.cache
def _read(directory: Path, kernel: str) -> dict:
    path = directory / f"{kernel}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if data.get("version") != VERSION:
        raise ValueError(f"{path}: version {data.get('version')!r}, expected {VERSION}")
    return data.get("configs", {})


@functools.cache
def card_name(device: torch.device) -> str:
    """The card's name as the tables key it ("cpu" for anything not CUDA)."""
    if device.type != "cuda":
        return "cpu"
    return torch.cuda.get_device_name(device)


def lookup(kernel: str, device: torch.device, shape: str, rows_per_slot: float,
           directory: Path | None = None) -> list[int] | None:  # fmt: skip
    """The tuned config for this card, shape and batch (see the module docstring), or None."""
    entries = table(kernel, directory).get(card_name(device), {}).get(shape)
    if not entries:
        return None
    sizes = sorted(int(k) for k in entries)
    at_least = [n for n in sizes if n >= rows_per_slot]
    return list(entries[str(at_least[0] if at_least else sizes[-1])])


def store(kernel: str, card: str, shape: str, rows: int, config: list[int], directory: Path | None = None) -> None:
    """Write one tuned config into the kernel's table (the tuning script's side of `lookup`)."""
    path = (directory or CONFIG_DIR) / f"{kernel}.json"
    data = json.loads(path.read_text()) if path.exists() else {"version": VERSION, "configs": {}}
    data["configs"].setdefault(card, {}).setdefault(shape, {})[str(rows)] = list(config)
    data["configs"] = {  # a stable, readable order: cards and shapes by name, batches by size
        c: {s: dict(sorted(e.items(), key=lambda kv: int(kv[0]))) for s, e in sorted(shapes.items())}
        for c, shapes in sorted(data["configs"].items())
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1)
    path.write_text(re.sub(r"\[\s+([-\d,\s]+?)\s+\]", lambda m: "[" + ", ".join(m[1].split()).replace(",,", ",") + "]",
                           text) + "\n")  # one config a line
    _read.cache_clear()
