"""Shared test set-up: tiny-model helpers importable from every test folder, one torch thread per test
process (CI has 2 cores), and a scratch cache for the built-in model."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "models"))
os.environ.setdefault("MOESERVE_GEMM_WARMUP_ROWS", "0")  # start-up kernel warm-up: seconds over the suite
os.environ.setdefault("MOESERVE_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "moeserve"))

import torch  # noqa: E402

torch.set_num_threads(1)


def pytest_runtest_setup(item):
    """`@pytest.mark.gpu` tests need a CUDA GPU: skipped without one (CI runs on CPU)."""
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        import pytest

        pytest.skip("needs a CUDA GPU")
