"""Where the third-party traces live: ../shared/traces beside the repo (CI machines have it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from moeserve import envs

SHARED_TRACES = envs.SHARED_TRACES.get() or Path(__file__).resolve().parents[2].parent / "shared" / "traces"
DEEPSEEK = SHARED_TRACES / "deepseek_sglang_counts"
MIXTRAL = SHARED_TRACES / "mixtral_per_token"

needs_shared = pytest.mark.skipif(
    not DEEPSEEK.is_dir() or not MIXTRAL.is_dir(),
    reason=f"shared routing traces not found at {SHARED_TRACES} (set MOESERVE_SHARED_TRACES)",
)
