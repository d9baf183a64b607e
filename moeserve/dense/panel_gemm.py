"""Few-row fp32 GEMMs through a small C++ kernel over weights stored in 16-column panels.

Why: at decode an expert gets a handful of rows (8 sequences, top-2 of 8 experts: ~2 rows each), so
its two GEMMs are a stream of its weights, and oneDNN's packed kernel (dense/gemm.py) reads them at a
third to a half of the rate the core streams memory (measured, tiny-mixtral's expert shapes,
docs/performance.md). `csrc/panel_gemm.cpp` stores a weight [O, I] as ceil(O / 16) panels of
[I, 16] contiguous floats and runs up to 6 rows against a panel while it sits in L1, so each weight
byte is read once per call. Above `small_rows()` rows oneDNN's blocked kernel is faster, and
callers keep it there. A CPU with AVX-512 runs a 16-lane path (blocks of up to 12 rows) with the
same bits as the AVX2 path (`MOESERVE_PANEL_ISA=avx2` forces the latter).

Bits: every output element is one in-order fp32 FMA sum over the input features, on one thread, so a
row's result does not depend on the other rows of the call nor on the intra-op thread count
(engine/step_threads.py switches that between steps). It differs from F.linear and oneDNN by fp32
rounding (~1e-6 relative), as those differ from each other.

Build: on first use the system C++ compiler builds the kernel against the installed torch's headers
into MOESERVE_CACHE/kernels/ (default ~/.cache/moeserve), named by a hash of the source, torch's
version and the flags (~20-50 s, once per machine). Ranks starting together build it once: an
flock (released by the kernel if its holder dies) serializes them, and the library is written under
a temporary name and renamed, so none ever loads half a file.
No compiler, a CPU without AVX2 and FMA, a failed build or `MOESERVE_PANEL_GEMM=0`: `available()` is
False (said once in the log) and every caller stays on oneDNN, with the same tokens up to fp32
rounding.

Shape legend: T rows, I in features, O out features, P panels = ceil(O / 16).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

PANEL = 16
# at most this many rows take the panel kernel, by the vector width of the path it runs here (AVX2:
# 6-row blocks of 2 registers; AVX-512: 12-row blocks of 1); more take oneDNN (crossovers measured
# at tiny-mixtral's expert and LM-head shapes, docs/performance.md)
SMALL_ROWS_BY_VECTOR_BITS = {256: 8, 512: 12}
SOURCE = Path(__file__).parent / "csrc" / "panel_gemm.cpp"
FLAGS = ["-O3", "-std=c++20", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared"]
BUILD_TIMEOUT_S = 600

_state: dict[str, bool] = {}
_rows: dict[str, int] = {}
_stub: list = []  # the torch.library.Library holding the stand-in schema, kept alive


def available() -> bool:
    """Whether torch.ops.moeserve.panel_linear is loaded (building it on the first call)."""
    if "loaded" not in _state:
        _state["loaded"] = _load()
    return _state["loaded"]


def small_rows() -> int:
    """Calls of at most this many rows take the kernel (0 when it is not available)."""
    if "small_rows" not in _rows:
        _rows["small_rows"] = SMALL_ROWS_BY_VECTOR_BITS[int(torch.ops.moeserve.panel_vector_bits())] if available() else 0
    return _rows["small_rows"]


def ensure_op() -> None:
    """Make `torch.ops.moeserve.panel_linear` resolve, so TorchScript can compile code naming it:
    the kernel when it is available, else a stand-in that raises (callers only call it with panels
    from `pack`, which returns None then)."""
    if available() or _stub:
        return
    library = torch.library.Library("moeserve", "DEF")
    library.define("panel_linear(Tensor x, Tensor panels, int out_features) -> Tensor")

    def unavailable(x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
        raise RuntimeError("the panel GEMM kernel is not available (dense/panel_gemm.py)")

    library.impl("panel_linear", unavailable, "CPU")
    _stub.append(library)


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """weight [O, I] fp32 CPU -> panels [P, I, 16] (zero columns past O), or None where the kernel
    does not apply (another dtype or device, or not available)."""
    if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu" or not available():
        return None
    out_features, in_features = weight.shape
    panels = -(-out_features // PANEL)
    padded = weight.new_zeros(panels * PANEL, in_features)
    padded[:out_features] = weight.detach()
    return padded.view(panels, PANEL, in_features).transpose(1, 2).contiguous()


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
    """x [T, I] fp32 CPU -> x @ weight.T [T, O], panels = pack(weight)."""
    return torch.ops.moeserve.panel_linear(x, panels, out_features)


def _load() -> bool:
    if os.environ.get("MOESERVE_PANEL_GEMM", "1").lower() in ("0", "false", "off"):
        return False
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        logger.info("panel GEMM kernel off: the CPU has no AVX2 (%s); few-row GEMMs stay on oneDNN",
                    torch.backends.cpu.get_cpu_capability())
        return False
    try:
        library = _build()
        torch.ops.load_library(str(library))
        return hasattr(torch.ops.moeserve, "panel_linear")
    except Exception as exc:  # noqa: BLE001 - any build or load failure leaves oneDNN
        logger.warning("panel GEMM kernel unavailable (%s); few-row GEMMs stay on oneDNN", _short(exc))
        return False


def _build() -> Path:
    """Path of the compiled kernel for this source, torch and flags, compiling it if absent."""
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++) on PATH")
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    libs = cpp_extension.library_paths()
    command = [compiler, *FLAGS, abi, *(f"-I{p}" for p in cpp_extension.include_paths())]
    command += [str(SOURCE), *(f"-L{p}" for p in libs), "-lc10", "-ltorch_cpu"]
    command += [f"-Wl,-rpath,{p}" for p in libs]
    key = hashlib.sha256(SOURCE.read_bytes() + repr((torch.__version__, command[1:])).encode()).hexdigest()[:16]
    root = Path(os.environ.get("MOESERVE_CACHE", Path.home() / ".cache" / "moeserve")) / "kernels"
    target = root / f"panel_gemm-{key}.so"
    if target.exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    # one build at a time per machine (ranks start together); flock is dropped by the kernel when
    # its holder exits or dies, so a killed build never leaves the others waiting on a stale lock
    with open(root / "panel_gemm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():  # built by another process while this one waited
            return target
        fd, tmp = tempfile.mkstemp(prefix="panel_gemm-", suffix=".so.tmp", dir=root)
        os.close(fd)
        try:
            logger.info("building the panel GEMM kernel (once per machine): %s", target)
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
