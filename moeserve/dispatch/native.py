"""The one-sided protocol's tensor work in C++ (`csrc/onesided.cpp`, `torch.ops.moeserve_dispatch`):
four calls per dispatch + combine instead of a few dozen torch ops, bit for bit the torch path's
results (onesided_plan.py, the reference; tests/dispatch/test_onesided_plan.py compares them); and
the shm heap's flag traffic, a signal to every peer and the spin-then-yield wait, one call each
instead of Python loops (tests/dispatch/test_futex.py).

Built on first use like the CPU kernels (kernels/cpu/cpu_kernels.py: MOESERVE_CACHE, once per
machine, ranks starting together build it once), with portable flags (no AVX requirement) and
-ffp-contract=off (a fused multiply-add would round differently from torch's multiply, then add).
No compiler, a failed build or MOESERVE_CPU_KERNELS=0: `load()` is False and onesided.py stays on torch.
"""
from __future__ import annotations

import functools
from pathlib import Path

from moeserve import envs

SOURCES = [Path(__file__).parent / "csrc" / "onesided.cpp"]
FLAGS = ["-O3", "-std=c++20", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared"]


@functools.cache
def load() -> bool:
    """Whether torch.ops.moeserve_dispatch is loaded (building it on the first call of a machine)."""
    if not envs.CPU_KERNELS.get():
        return False
    from moeserve.kernels.cpu.cpu_kernels import load_library

    return load_library("dispatch_kernels", SOURCES, FLAGS, "C++ dispatch kernels", "shm dispatch stays on torch ops")
