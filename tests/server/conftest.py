"""One shared server (the built-in model) for the HTTP tests, and the Python API as their oracle."""
from __future__ import annotations

import pytest
from server_harness import ServerProcess
from server_settings import SERVER_ARGS

# Small on purpose: tests cover limits (max_model_len, body size) without large inputs.


@pytest.fixture(scope="session")
def server():
    with ServerProcess(*SERVER_ARGS) as srv:
        yield srv


@pytest.fixture(scope="session")
def llm():
    """The Python API on the same model: greedy outputs over HTTP must match it token for token."""
    import torch

    from moeserve import LLM

    torch.set_num_threads(1)
    engine = LLM(kv_cache_blocks=96, max_model_len=256)
    yield engine
    engine.shutdown()
