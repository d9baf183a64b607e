"""Shared test set-up: tiny-model helpers importable from every test folder, one torch thread per test
process (CI has 2 cores), a scratch cache for the built-in model, and no test leaves the garbage
collector frozen."""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "models"))
os.environ.setdefault("MOESERVE_GEMM_WARMUP_ROWS", "0")  # start-up kernel warm-up: seconds over the suite
os.environ.setdefault("MOESERVE_CACHE", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "moeserve"))

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _unfreeze_the_heap():
    """Tests that run a server process's loop in this process (server/engine_process.py) freeze the
    heap as that process does (engine/gc_heap.py). Frozen objects are never collected, not even at
    exit, so later tests would run on a frozen heap, and the cycles among Triton's IR objects from the
    kernel tests would outlive the interpreter: nanobind then reports them as leaked at exit."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


def pytest_runtest_setup(item):
    """`@pytest.mark.gpu` tests need a CUDA GPU: skipped without one (CI runs on CPU)."""
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
