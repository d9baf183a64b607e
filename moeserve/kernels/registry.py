"""The kernel sets by name, and how `--device` / `--kernels` pick one (docs/kernels.md).

    torch   KernelSet (kernels/base.py): plain torch, any device, the reference
    cpu     CpuKernels (kernels/cpu/kernel_set.py): oneDNN, C++ and threads; CPU only
    triton  TritonKernels (kernels/triton_set.py): Triton kernels; CUDA, or CPU under TRITON_INTERPRET=1

Modules are imported when their set is made, so choosing `torch` imports no C++ build or triton.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from moeserve.kernels.base import KernelSet
from moeserve.parallel_state import SINGLE, ParallelContext

KERNEL_SETS = {
    "torch": "moeserve.kernels.base:KernelSet",
    "cpu": "moeserve.kernels.cpu.kernel_set:CpuKernels",
    "triton": "moeserve.kernels.triton_set:TritonKernels",
}


def kernel_set_class(name: str) -> type[KernelSet]:
    if name not in KERNEL_SETS:
        raise ValueError(f"unknown kernel set {name!r}; valid: {', '.join(KERNEL_SETS)}")
    module, cls = KERNEL_SETS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def resolve(device: str = "auto", kernels: str = "auto") -> tuple[str, str]:
    """(--device, --kernels) with `auto` replaced: cuda + triton when torch.cuda.is_available(),
    else cpu + cpu; kernels auto follows the device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if kernels == "auto":
        kernels = "triton" if device == "cuda" else "cpu"
    return device, kernels


def why_auto(device: str, kernels: str) -> str:
    """Why `auto` resolved as it did ("" when neither --device nor --kernels was auto)."""
    if "auto" not in (device, kernels):
        return ""
    return "auto: torch sees a CUDA GPU" if torch.cuda.is_available() else "auto: torch sees no CUDA GPU"


def kernels_available(name: str) -> bool:
    """Whether the set can run on this machine (triton: importable, and CUDA or TRITON_INTERPRET=1)."""
    if name == "triton":
        try:
            from moeserve.kernels import triton as triton_kernels
        except ImportError:
            return False
        return triton_kernels.available()
    return name in KERNEL_SETS


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """--dtype, where `auto` is bfloat16 on cuda and float32 on cpu (the fp32 oracle of the tests)."""
    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return getattr(torch, dtype)


def rank_device(device: str, local_rank: int = 0) -> torch.device:
    """The torch.device a rank runs on: cuda:LOCAL_RANK for cuda, else cpu."""
    return torch.device("cuda", local_rank) if device == "cuda" else torch.device("cpu")


def make_kernel_set(
    name: str, device: torch.device | str = "cpu", engine_config: Any = None, ctx: ParallelContext = SINGLE,
    hidden_size: int = 0,
) -> KernelSet:
    """The set `name` for a rank on `device`. With an engine_config, a set that tunes itself for the
    rank (threads) does so now (`for_rank`); without one (tests), its defaults."""
    cls = kernel_set_class(name)
    if engine_config is not None and hasattr(cls, "for_rank"):
        return cls.for_rank(engine_config, ctx, hidden_size)
    return cls(device)
