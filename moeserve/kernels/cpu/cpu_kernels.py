"""moeserve's C++ CPU kernels (`csrc/*.cpp`), built on first use with the system compiler.

What they are: `torch.ops.moeserve.panel_linear` (few-row GEMMs, kernels/cpu/panel_gemm.py),
`torch.ops.moeserve.decode_attention` (paged decode attention, kernels/cpu/paged_decode.py),
`rms_norm` / `add_rms_norm`, `rotary` and the MoE layer's `softmax_topk`, `moe_gather`, `moe_combine`
(kernels/cpu/small_ops.py), one shared library. Each caller has its own switch and falls back to torch (oneDNN, SDPA) when its op is not
loaded.

Build: the first `load()` of a machine builds the sources against the installed torch's headers
(C++20, -O3 -mavx2 -mfma -fopenmp, linked to torch's own libraries) into MOESERVE_CACHE/kernels/
(default ~/.cache/moeserve), named by a hash of the sources, torch's version and the command
(~20-60 s, once per machine). Ranks starting together build it once: an flock (released by the
kernel if its holder dies) serializes them, and the library is written under a temporary name and
renamed, so none ever loads half a file.
No compiler, a CPU without AVX2 and FMA, a failed build or `MOESERVE_CPU_KERNELS=0`: `load()` is
False (a failure is said once in the log) and every caller stays on torch, with the same tokens up
to fp32 rounding.
"""

from __future__ import annotations

import fcntl
import hashlib
import functools
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from moeserve import envs

logger = logging.getLogger(__name__)

SOURCES = [Path(__file__).parent / "csrc" / name
           for name in ("panel_gemm.cpp", "decode_attention.cpp", "rms_norm.cpp", "rotary.cpp", "moe_routing.cpp")]
FLAGS = ["-O3", "-std=c++20", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared"]
BUILD_TIMEOUT_S = 600

@functools.cache
def load() -> bool:
    """Whether the kernels are loaded into torch.ops.moeserve (building them on the first call)."""
    if not envs.CPU_KERNELS.get():
        return False
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        logger.info("C++ CPU kernels off: the CPU has no AVX2 (%s); GEMMs stay on oneDNN, attention on SDPA",
                    torch.backends.cpu.get_cpu_capability())
        return False
    return load_library("cpu_kernels", SOURCES, FLAGS, "C++ CPU kernels",
                        "few-row GEMMs stay on oneDNN, decode attention on SDPA")


def load_library(stem: str, sources: list[Path], flags: list[str], what: str, fallback: str) -> bool:
    """Builds (once per machine, build_library) and loads a torch.ops library; where either fails,
    logs that `what` is unavailable, why, and what runs instead (`fallback`), and returns False."""
    try:
        torch.ops.load_library(str(build_library(stem, sources, flags)))
        return True
    except Exception as exc:  # noqa: BLE001 - any build or load failure leaves the torch path
        logger.warning("%s unavailable (%s): %s", what, _short(exc), fallback)
        return False


def build_library(stem: str, sources: list[Path], flags: list[str]) -> Path:
    """Path of `stem`-<hash>.so compiled from sources with flags against the installed torch, compiling
    it if absent (once per machine: see the module docstring). Raises where it cannot."""
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++) on PATH")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    libs = cpp_extension.library_paths()
    command = [compiler, *flags, abi, *(f"-I{p}" for p in cpp_extension.include_paths())]
    command += [*map(str, sources), *(f"-L{p}" for p in libs), "-lc10", "-ltorch_cpu"]
    command += [f"-Wl,-rpath,{p}" for p in libs]
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
    digest.update(repr((torch.__version__, command[1:])).encode())
    root = envs.CACHE.get() / "kernels"
    target = root / f"{stem}-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    # one build at a time per machine (ranks start together); flock is dropped by the kernel when
    # its holder exits or dies, so a killed build never leaves the others waiting on a stale lock
    with open(root / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # built by another process while this one waited
            return target
        fd, tmp = tempfile.mkstemp(prefix=f"{stem}-", suffix=".so.tmp", dir=root)
        os.close(fd)
        try:
            logger.info("building moeserve's C++ %s (once per machine): %s", stem, target)
            done = subprocess.run([*command, "-o", tmp], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"{Path(compiler).name} failed: {done.stderr.strip()[-500:]}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return target


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]
