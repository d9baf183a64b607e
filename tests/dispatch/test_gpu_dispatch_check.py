"""benchmarks/gpu_dispatch_check.py's harness on the CPU: the nvshmem backend's Triton kernels under
TRITON_INTERPRET=1 over the shared-memory heap, two real processes, checked against `local` as the GPU
run checks them (the GPU numbers come from running it where there is one)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gpu_dispatch_check import check  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_gpu_dispatch_check_passes_on_the_emulated_heap():
    result = check(worlds=(2,), emulate=True, timeout_s=180)["2"]
    assert result["status"] == "passed", result
    assert result["cases_per_rank"] == 6 and set(result["timings_us_rank0"]) == {"T=1 H=256"}
