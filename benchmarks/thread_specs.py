"""`--runs` specs shared by the benchmarks: "NUM_THREADS:EXPERT_THREADS", each a number or `auto`.

    auto:auto  what a user gets with no flag (intra-op threads by hidden size, expert threads = cores)
    1:1        strictly one core's worth of compute threads
    2:2        --num-threads 2 --expert-threads 2
"""
from __future__ import annotations

import os

DEFAULT_RUNS = ["auto:auto", "1:1"]

# moeserve raises oneDNN's kernel cache once imported (dense/gemm.py); the peer runs with what the
# user's environment says, so a benchmark drops the setting from the peer's environment unless the
# user set it (read here, before any moeserve import)
_USER_ONEDNN_CACHE = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def peer_env(**extra: str) -> dict:
    """The environment to start a peer engine with."""
    env = dict(os.environ, **extra)
    if _USER_ONEDNN_CACHE is None:
        env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
    return env


def parse_run(spec: str) -> tuple[int | None, int | None]:
    """"N:E" -> (num_threads, expert_threads), None for `auto`."""
    try:
        num, expert = spec.split(":")
        return tuple(None if v == "auto" else int(v) for v in (num, expert))  # type: ignore[return-value]
    except ValueError:
        raise SystemExit(f"bad run spec {spec!r}: want NUM_THREADS:EXPERT_THREADS, each a number or auto") from None


def cli_flags(spec: str) -> list[str]:
    """The `moeserve serve` flags of a spec."""
    num, expert = parse_run(spec)
    return (["--num-threads", str(num)] if num is not None else []) + (
        ["--expert-threads", str(expert)] if expert is not None else []
    )
