"""The built-in model's LLM, shared by the tests of the Python API (its start-up is the slow part)."""
from __future__ import annotations

import pytest

from moeserve import LLM


@pytest.fixture(scope="session")
def llm():
    """Tests that change its settings (monkeypatch) undo them; every test leaves the scheduler empty."""
    engine = LLM(kv_cache_blocks=96, max_model_len=256)
    yield engine
    engine.shutdown()
