"""Read a Hugging Face checkpoint directory: config.json + one or many *.safetensors files.

Tensors are opened lazily (`safe_open` + `get_slice`) so each rank reads only the rows, columns or
experts it owns. The reader records which tensors the model consumed or claimed; `finish()` raises
naming every tensor on disk that no layer accounted for, and `read` raises naming a missing one.
"""

from __future__ import annotations

import difflib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tqdm import tqdm


logger = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """The checkpoint does not match what the model expects; the message names the tensors."""


def load_hf_config(model_dir: str | Path):
    """config.json parsed into the transformers config class of its `model_type`."""
    from transformers import AutoConfig

    if not (Path(model_dir) / "config.json").exists():
        raise CheckpointError(f"{model_dir} has no config.json: is it a Hugging Face checkpoint directory?")
    cfg = AutoConfig.from_pretrained(str(model_dir))
    _moe_layers_as_saved(cfg, model_dir)
    return cfg


def _moe_layers_as_saved(cfg: Any, model_dir: str | Path) -> None:
    """DeepSeek's own code makes layer i an MoE layer when i >= first_k_dense_replace and
    i % moe_layer_freq == 0; transformers ignores moe_layer_freq (every layer from
    first_k_dense_replace on is MoE) and saves its checkpoints so. When a checkpoint with
    moe_layer_freq > 1 holds a router on a layer DeepSeek's rule calls dense, it was written the
    transformers way, and is read that way (moe_layer_freq taken as 1), as transformers, the
    oracle, reads it."""
    freq = getattr(cfg, "moe_layer_freq", 1) or 1
    if freq == 1 or not getattr(cfg, "n_routed_experts", 0):
        return
    try:
        names = set(CheckpointReader(model_dir, progress=False).names())
    except CheckpointError:
        return  # no weights to look at: the loader says what is missing
    first = getattr(cfg, "first_k_dense_replace", 0) or 0
    routed_off_rule = [i for i in range(first, cfg.num_hidden_layers)
                       if i % freq and f"model.layers.{i}.mlp.gate.weight" in names]
    if routed_off_rule:
        logger.info("%s: moe_layer_freq is %d but layers %s hold routers (a checkpoint saved by transformers, "
                    "which ignores the field): every layer from first_k_dense_replace on is MoE",
                    model_dir, freq, routed_off_rule[:4])
        cfg.moe_layer_freq = 1


class CheckpointReader:
    """Lazy, sliced access to every tensor of a checkpoint directory.

    read()/claim() mark tensors as accounted for; the progress bar counts them. `ignore` lists name
    suffixes that may sit on disk without a layer (e.g. precomputed `rotary_emb.inv_freq`).
    """

    def __init__(
        self, model_dir: str | Path, progress: bool = True, ignore: tuple[str, ...] = ("rotary_emb.inv_freq",)
    ):
        self.model_dir = Path(model_dir)
        self._file_of = self._index_files()
        self._handles: dict[Path, object] = {}
        self._seen: set[str] = set()
        self._ignore = ignore
        self._bar = tqdm(total=len(self._file_of), desc="loading weights", unit="tensor", disable=not progress or None)

    def _index_files(self) -> dict[str, Path]:
        index = self.model_dir / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            return {name: self.model_dir / file for name, file in weight_map.items()}
        files = sorted(self.model_dir.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"no *.safetensors files in {self.model_dir}")
        out: dict[str, Path] = {}
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                out.update({name: path for name in f.keys()})
        return out

    def names(self) -> list[str]:
        return sorted(self._file_of)

    def has(self, name: str) -> bool:
        return name in self._file_of

    def _slice(self, name: str):
        if name not in self._file_of:
            close = difflib.get_close_matches(name, self._file_of, n=3)
            hint = f"; similar names on disk: {', '.join(close)}" if close else ""
            raise CheckpointError(f"checkpoint {self.model_dir} has no tensor {name!r}{hint}")
        path = self._file_of[name]
        if path not in self._handles:
            self._handles[path] = safe_open(str(path), framework="pt")
        return self._handles[path].get_slice(name)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._slice(name).get_shape())

    def read(self, name: str, shard_dim: int | None = None, start: int = 0, end: int | None = None) -> torch.Tensor:
        """The whole tensor, or only [start, end) along `shard_dim` (read from disk, not sliced after)."""
        sl = self._slice(name)
        if shard_dim is None:
            tensor = sl[:]
        else:
            index = [slice(None)] * len(sl.get_shape())
            index[shard_dim] = slice(start, end)
            tensor = sl[tuple(index)]
        self.claim([name])
        return tensor

    def read_index(self, name: str, index: tuple) -> torch.Tensor:
        """tensor[index] for a tuple of ints/slices, read from disk lazily (fused 3D expert layouts)."""
        tensor = self._slice(name)[index]
        self.claim([name])
        return tensor

    def claim(self, names: list[str]) -> None:
        """Mark tensors as accounted for without reading them (e.g. experts held by other ranks)."""
        new = [n for n in names if n in self._file_of and n not in self._seen]
        self._seen.update(new)
        self._bar.update(len(new))

    def finish(self) -> None:
        """Raise if any tensor on disk was neither read nor claimed; closes the progress bar."""
        self._bar.close()
        unknown = [n for n in self._file_of if n not in self._seen and not n.endswith(self._ignore)]
        # zero-element tensors carry no weights: transformers writes them for a part configured to size 0
        # (Qwen2-MoE's shared_expert_intermediate_size=0, DeepSeek's n_shared_experts=0) and runs the
        # model as if the part were absent, which is what moeserve builds
        unknown = [n for n in unknown if 0 not in self.shape(n)]
        self._handles.clear()
        if unknown:
            shown = ", ".join(sorted(unknown)[:10])
            more = f" (and {len(unknown) - 10} more)" if len(unknown) > 10 else ""
            raise CheckpointError(f"checkpoint {self.model_dir} has tensors this model does not use: {shown}{more}")
