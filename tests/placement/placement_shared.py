"""Where the third-party routing traces live: the folder MOESERVE_SHARED_TRACES names (traces/README.md
says what they are and where they come from); the tests that read them skip without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from moeserve import envs

SHARED_TRACES = envs.SHARED_TRACES.get() or Path("MOESERVE_SHARED_TRACES-is-unset")
DEEPSEEK = SHARED_TRACES / "deepseek_sglang_counts"
MIXTRAL = SHARED_TRACES / "mixtral_per_token"

needs_shared = pytest.mark.skipif(
    not DEEPSEEK.is_dir() or not MIXTRAL.is_dir(),
    reason="third-party routing traces: set MOESERVE_SHARED_TRACES to a folder holding deepseek_sglang_counts/ "
           "and mixtral_per_token/ (traces/README.md)",
)
