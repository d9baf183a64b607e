"""Few-row fp32 GEMMs through a small C++ kernel over weights stored in 16-column panels.

Why: at decode an expert gets a handful of rows (8 sequences, top-2 of 8 experts: ~2 rows each), so
its two GEMMs are a stream of its weights, and oneDNN's packed kernel (kernels/cpu/gemm.py) reads them at a
third to a half of the rate the core streams memory (measured, tiny-mixtral's expert shapes,
docs/performance.md). `csrc/panel_gemm.cpp` stores a weight [O, I] as ceil(O / 16) panels of
[I, 16] contiguous floats and runs up to 6 rows against a panel while it sits in L1, so each weight
byte is read once per call. Above `small_rows()` rows oneDNN's blocked kernel is faster, and
callers keep it there. A CPU with AVX-512 runs a 16-lane path (blocks of up to 12 rows) with the
same bits as the AVX2 path (`MOESERVE_PANEL_ISA=avx2` forces the latter).

Bits: every output element is one in-order fp32 FMA sum over the input features, on one thread, so a
row's result does not depend on the other rows of the call nor on the intra-op thread count
(kernels/cpu/step_threads.py switches that between steps). It differs from F.linear and oneDNN by fp32
rounding (~1e-6 relative), as those differ from each other.

Build and fallback: kernels/cpu/cpu_kernels.py builds it with the other C++ kernels. Not loaded there, or
`MOESERVE_PANEL_GEMM=0`: `available()` is False and every caller stays on oneDNN, with the same
tokens up to fp32 rounding.

Shape legend: T rows, I in features, O out features, P panels = ceil(O / 16).
"""

from __future__ import annotations

import torch

from moeserve import envs

from moeserve.kernels.cpu import cpu_kernels

PANEL = 16
# at most this many rows take the panel kernel, by the vector width of the path it runs here (AVX2:
# 6-row blocks of 2 registers; AVX-512: 12-row blocks of 1); more take oneDNN (crossovers measured
# at tiny-mixtral's expert and LM-head shapes, docs/performance.md)
SMALL_ROWS_BY_VECTOR_BITS = {256: 8, 512: 12}

_state: dict[str, int] = {}  # "loaded" (0/1), "small_rows": worked out once (small_rows is on every GEMM's path)
_stub: list = []  # the torch.library.Library holding the stand-in schema, kept alive


def available() -> bool:
    """Whether torch.ops.moeserve.panel_linear is loaded (building it on the first call)."""
    if "loaded" not in _state:
        _state["loaded"] = _load()
    return bool(_state["loaded"])


def _load() -> bool:
    if not envs.PANEL_GEMM.get():
        return False
    return cpu_kernels.load()


def small_rows() -> int:
    """Calls of at most this many rows take the kernel (0 when it is not available)."""
    if "small_rows" not in _state:
        bits = int(torch.ops.moeserve.panel_vector_bits()) if available() else 0
        _state["small_rows"] = SMALL_ROWS_BY_VECTOR_BITS[bits] if bits else 0
    return _state["small_rows"]


def ensure_op() -> None:
    """Make `torch.ops.moeserve.panel_linear` resolve, so TorchScript can compile code naming it:
    the kernel when it is available, else a stand-in that raises (callers only call it with panels
    from `pack`, which returns None then)."""
    if available() or _stub or cpu_kernels.load():  # the library defines it even when switched off here
        return
    library = torch.library.Library("moeserve", "DEF")
    library.define("panel_linear(Tensor x, Tensor panels, int out_features) -> Tensor")

    def unavailable(x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
        raise RuntimeError("the panel GEMM kernel is not available (kernels/cpu/panel_gemm.py)")

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
