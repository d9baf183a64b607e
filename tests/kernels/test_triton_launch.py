"""How moeserve's Triton kernels are launched: interpreted or compiled as TRITON_INTERPRET says at each
launch, whatever it said when triton was imported (moeserve/kernels/triton/launch.py)."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from moeserve.kernels.triton import (  # noqa: E402
    fp8_linear,
    fused_moe,
    launch,
    mla_decode,
    mla_prefill,
    norm,
    paged_attention,
    paged_prefill,
    split_combine,
)

REPO = Path(__file__).resolve().parents[2]
MODULES = (fp8_linear, fused_moe, paged_attention, paged_prefill, split_combine, mla_decode, mla_prefill, norm)
KERNELS = [obj for module in MODULES
           for obj in vars(module).values() if isinstance(obj, launch.Kernel)]  # fmt: skip
# triton's library functions that are themselves jit functions: usable only in the mode triton was imported in
IMPORT_MODE_FUNCTIONS = r"\btl\.(sum|max|min|zeros|zeros_like|sigmoid|softmax|cdiv|argmax|argmin|cumsum|ravel)\("


def test_kernels_call_no_function_fixed_at_triton_import():
    assert len(KERNELS) == 9
    for kernel in KERNELS:
        found = re.search(IMPORT_MODE_FUNCTIONS, inspect.getsource(kernel.fn))
        assert found is None, f"{kernel.fn.__name__} calls {found[0]}: use tl.reduce with launch.SUM / MAX, tl.full"


def test_mode_is_read_at_each_launch(monkeypatch):
    kernel = launch.Kernel(norm._rms_norm_kernel)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel[(1,)]  # builds, does not run
    monkeypatch.delenv("TRITON_INTERPRET")
    kernel[(1,)]
    assert isinstance(kernel.built[True], InterpretedFunction) and isinstance(kernel.built[False], JITFunction)
    assert not isinstance(kernel.built[False], InterpretedFunction)


@pytest.mark.slow
def test_kernels_run_when_triton_is_imported_under_the_interpreter():
    """The other order: TRITON_INTERPRET=1 before `import triton`, as a whole-process CI run sets it."""
    code = ("import torch, triton\n"
            "from moeserve.kernels.triton.fused_moe import fused_experts, fused_experts_reference, Tiles\n"
            "x, w13, w2 = torch.randn(5, 16), torch.randn(2, 32, 16), torch.randn(2, 16, 16)\n"
            "offsets = torch.tensor([2, 5], dtype=torch.int32)\n"
            "out = fused_experts(x, offsets, w13, w2, tiles=Tiles(16, 16, 16, 4, 1))\n"
            "ref = fused_experts_reference(x, offsets, w13, w2)\n"
            "torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)\n")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
