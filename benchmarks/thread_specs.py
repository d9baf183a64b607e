"""`--runs` specs shared by the benchmarks: "NUM_THREADS:EXPERT_THREADS", each a number or `auto`.

    auto:auto  what a user gets with no flag (intra-op threads by hidden size, expert threads = cores)
    1:1        strictly one core's worth of compute threads
    2:2        --num-threads 2 --expert-threads 2
"""
from __future__ import annotations

DEFAULT_RUNS = ["auto:auto", "1:1"]


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
