"""Kernel tests: Triton kernels run under the interpreter on CPU (fixture `interpret`) and on the GPU
when there is one (mark `gpu`, skipped without CUDA)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def interpret(monkeypatch):
    """TRITON_INTERPRET=1 for this test alone: moeserve's Triton kernels read it at launch
    (moeserve/kernels/triton/launch.py), so it need not be set before triton is imported."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
