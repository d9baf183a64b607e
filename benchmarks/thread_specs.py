"""`--runs` specs shared by the benchmarks: "NUM_THREADS:EXPERT_THREADS[:SWITCH...]", each a number or `auto`.

    auto:auto          what a user gets with no flag (intra-op threads by hidden size, expert threads = cores)
    1:1                strictly one core's worth of compute threads
    2:2                --num-threads 2 --expert-threads 2
    auto:auto:nopanel  the default without the few-row panel GEMM kernel (kernels/cpu/panel_gemm.py): oneDNN
                       for every GEMM, to measure the kernel side by side
    auto:auto:noattn   the default without the C++ decode attention (kernels/cpu/paged_decode.py): torch's
                       gather + SDPA at decode
    auto:auto:nopanel:noattn  neither kernel
    auto:auto:nobind   a server whose engine is not pinned to the cores left after --reserved-cores
                       (kernels/cpu/cpu_binding.py); the Python API never pins, so offline runs ignore it
    auto:auto:nosplit  a server that does not spread bursts of prompts over steps
                       (--no-split-prefill-bursts, core/prefill_split.py); offline engines never do
    auto:auto:budget128  a server (or engine) with --max-num-batched-tokens 128: prefill bursts cut
                       into steps of at most 128 tokens
    auto:auto:h11      a server on asyncio's event loop and h11's pure-Python HTTP parser instead of uvloop
                       and httptools (MOESERVE_FAST_HTTP=0; server/cli.py)
    auto:auto:noidle   a server whose engine does not lend the front end's core at idle priority
                       (MOESERVE_IDLE_HELPERS=0; kernels/cpu/cpu_binding.py)
    auto:auto:reserved0  a server with --reserved-cores 0: no core left to the front end, the engine
                       unpinned on every core
"""
from __future__ import annotations

import os

DEFAULT_RUNS = ["auto:auto", "1:1"]

# moeserve raises oneDNN's kernel cache once its CPU kernel set is made (kernels/cpu/gemm.py); the peer runs with what the
# user's environment says, so a benchmark drops the setting from the peer's environment unless the
# user set it (read here, before any moeserve import)
_USER_ONEDNN_CACHE = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def peer_env(**extra: str) -> dict:
    """The environment to start a peer engine with."""
    env = dict(os.environ, **extra)
    if _USER_ONEDNN_CACHE is None:
        env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
    return env


# spec switch -> the environment variable that turns the same kernel (or the core pinning) off in a
# server process
SWITCHES = {"nopanel": "MOESERVE_PANEL_GEMM", "noattn": "MOESERVE_DECODE_ATTENTION", "nobind": "MOESERVE_CPU_BIND",
            "h11": "MOESERVE_FAST_HTTP", "noidle": "MOESERVE_IDLE_HELPERS"}
# spec switch -> the `moeserve serve` flag it adds
FLAG_SWITCHES = {"nosplit": "--no-split-prefill-bursts"}


def _reserved(switch: str) -> int | None:
    """"reservedN" -> N (--reserved-cores); None for other switches."""
    if switch.startswith("reserved") and switch[8:].isdigit():
        return int(switch[8:])
    return None


def _budget(switch: str) -> int | None:
    """"budgetN" -> N (the step token budget, --max-num-batched-tokens); None for other switches."""
    if switch.startswith("budget") and switch[6:].isdigit() and int(switch[6:]) > 0:
        return int(switch[6:])
    return None


def parse_run(spec: str) -> tuple[int | None, int | None]:
    """"N:E[:SWITCH...]" -> (num_threads, expert_threads), None for `auto`."""
    try:
        num, expert, *switches = spec.split(":")
        if any(s not in SWITCHES and s not in FLAG_SWITCHES and _budget(s) is None and _reserved(s) is None
               for s in switches):
            raise ValueError(spec)
        return tuple(None if v == "auto" else int(v) for v in (num, expert))  # type: ignore[return-value]
    except ValueError:
        raise SystemExit(
            f"bad run spec {spec!r}: want NUM_THREADS:EXPERT_THREADS[:SWITCH...], each a number or auto, "
            f"switches from {sorted(SWITCHES) + sorted(FLAG_SWITCHES)}, budgetN or reservedN") from None


def switches(spec: str) -> set[str]:
    parse_run(spec)
    return set(spec.split(":")[2:])


def uses_panels(spec: str) -> bool:
    return "nopanel" not in switches(spec)


def server_env(spec: str, env: dict) -> dict:
    """`env` with the spec's kernels switched off (a server's kernels are switched per process)."""
    return dict(env, **{SWITCHES[s]: "0" for s in switches(spec) if s in SWITCHES})


def apply_switches(spec: str, model) -> None:
    """Turn the spec's kernels off on a loaded model (an in-process engine)."""
    if not uses_panels(spec):
        drop_panels(model)
    if "noattn" in switches(spec):
        from moeserve.dense.attention import Attention
        from moeserve.kernels.base import KernelSet

        for module in model.modules():
            if isinstance(module, Attention):  # the torch set's attention; its linears keep the CPU set
                module.kernels = KernelSet()


def drop_panels(model) -> int:
    """Take the panel copies off every layer of a loaded model (an in-process `nopanel` engine: the
    kernel switch itself is process-wide); returns how many layers had them."""
    count = 0
    for module in model.modules():
        state = getattr(module, "kernel_state", None)
        if getattr(state, "panels", None) is not None:
            state.panels = None
            count += 1
    return count


def token_budget(spec: str) -> int | None:
    """The spec's --max-num-batched-tokens (None: the default)."""
    budgets = [b for b in map(_budget, switches(spec)) if b is not None]
    return budgets[-1] if budgets else None


def cli_flags(spec: str) -> list[str]:
    """The `moeserve serve` flags of a spec."""
    num, expert = parse_run(spec)
    budget = token_budget(spec)
    return (
        (["--num-threads", str(num)] if num is not None else [])
        + (["--expert-threads", str(expert)] if expert is not None else [])
        + (["--max-num-batched-tokens", str(budget)] if budget is not None else [])
        + [FLAG_SWITCHES[s] for s in sorted(switches(spec)) if s in FLAG_SWITCHES]
        + [f for s in sorted(switches(spec)) if _reserved(s) is not None for f in ("--reserved-cores", str(_reserved(s)))]
    )
