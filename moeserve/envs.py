"""Every `MOESERVE_*` environment variable, declared once: name, type, default and one line of doc.

Read a variable with its declaration (`envs.CPU_BIND.get()`), never with `os.environ` directly, so
that each has one parser and one default: a switch accepts 1/0, true/false, on/off and yes/no (any
case), an empty value counts as unset, and anything else is a `ConfigError` naming the variable.
docs/configuration.md carries the table `markdown_table()` makes (tests/test_docs.py keeps it in
sync): `python -m moeserve.envs` prints it.

Settings a deployment chooses are flags (moeserve/settings.py); variables are for switches that
compare or debug a fast path, paths of one machine, and what a parent process hands its children.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moeserve.errors import ConfigError

_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def parse_bool(name: str, text: str) -> bool:
    """The one switch parser: 1/0, true/false, on/off, yes/no in any case."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r} is not a switch: use 1/0, true/false, on/off or yes/no")


@dataclass(frozen=True)
class EnvVar:
    name: str
    type: type  # bool, int, str or Path
    default: Any  # the value when unset or empty
    doc: str
    scope: str = "user"  # "user"; "internal": set by moeserve for its own child processes; "test": tests only

    def get(self, environ: dict[str, str] | None = None) -> Any:
        text = (os.environ if environ is None else environ).get(self.name, "")
        if text == "":
            return self.default
        if self.type is bool:
            return parse_bool(self.name, text)
        if self.type is int:
            try:
                return int(text)
            except ValueError:
                raise ConfigError(f"{self.name}={text!r} is not a whole number") from None
        return self.type(text)


_HOME_CACHE = Path.home() / ".cache" / "moeserve"

CACHE = EnvVar("MOESERVE_CACHE", Path, _HOME_CACHE,
               "where the built-in model and the compiled CPU kernels are kept (default ~/.cache/moeserve)")
NUM_THREADS = EnvVar("MOESERVE_NUM_THREADS", int, None,
                     "torch intra-op threads per rank when --num-threads is not given (default: auto)")
EXPERT_THREADS = EnvVar("MOESERVE_EXPERT_THREADS", int, None,
                        "threads the expert loop splits over when --expert-threads is not given (default: auto)")
CONNECT_TIMEOUT_S = EnvVar("MOESERVE_CONNECT_TIMEOUT_S", int, 60,
                          "seconds the ranks may take to connect a gloo group as it forms; past them the start fails "
                          "(a rank that died inside the connect would otherwise hold the others for the group's timeout)")
CPU_BIND = EnvVar("MOESERVE_CPU_BIND", bool, True,
                  "pin the engine to the cores --reserved-cores leaves it (kernels/cpu/cpu_binding.py)")
IDLE_HELPERS = EnvVar("MOESERVE_IDLE_HELPERS", bool, True,
                      "let a single-rank engine borrow the reserved cores' idle time at the lowest priority")
FAST_HTTP = EnvVar("MOESERVE_FAST_HTTP", bool, True,
                   "serve HTTP with uvloop and httptools when installed; off: asyncio and h11 (pure Python)")
ALLOW_LONG_MAX_MODEL_LEN = EnvVar("MOESERVE_ALLOW_LONG_MAX_MODEL_LEN", bool, False,
                                  "accept a --max-model-len past the checkpoint's trained positions (with a warning)")
CPU_KERNELS = EnvVar("MOESERVE_CPU_KERNELS", bool, True,
                     "build and use the C++ CPU kernels (kernels/cpu/cpu_kernels.py, dispatch/native.py); off: torch only")
DECODE_ATTENTION = EnvVar("MOESERVE_DECODE_ATTENTION", bool, True,
                          "the C++ paged decode attention kernel (kernels/cpu/paged_decode.py)")
PANEL_GEMM = EnvVar("MOESERVE_PANEL_GEMM", bool, True,
                    "the C++ panel GEMM for small-row fp32 linears (kernels/cpu/panel_gemm.py); off: oneDNN")
PANEL_ISA = EnvVar("MOESERVE_PANEL_ISA", str, "",
                   "avx2 forces the panel GEMM's AVX2 path on an AVX-512 CPU (read by the C++ kernel)")
PACKED_GEMM = EnvVar("MOESERVE_PACKED_GEMM", bool, True,
                     "pack fp32 CPU weights for oneDNN once at load (kernels/cpu/gemm.py); off: F.linear")
GEMM_WARMUP_ROWS = EnvVar("MOESERVE_GEMM_WARMUP_ROWS", int, 256,
                          "row counts up to which the packed GEMMs are warmed up at start-up; 0 = none")
TRITON_FUSED_MOE = EnvVar("MOESERVE_TRITON_FUSED_MOE", bool, None,
                          "the triton set's routed experts in the fused MoE kernels (on: gather and routing weights inside them where one rank holds every slot) or as the torch set runs them (off: cuBLAS's grouped GEMM on a GPU); unset: off on a GPU, where the grouped GEMM measured faster than the earlier kernel, on elsewhere; FP8 experts always take the fused kernels")
TRITON_MLA_PREFILL = EnvVar("MOESERVE_TRITON_MLA_PREFILL", bool, None,
                            "the triton set's MLA prefill (both forms) in Triton kernels (on) or as the torch set runs it (off: batched GEMMs with a mask); unset: off on a GPU until gpu_check shows the kernels ahead, on elsewhere")
NVSHMEM_EMULATE = EnvVar("MOESERVE_NVSHMEM_EMULATE", bool, False,
                         "run --dispatch nvshmem's Triton put kernels over the shared-memory heap (no nvshmem4py; how CI tests them)")
SHM_PLACED_BYTES = EnvVar("MOESERVE_SHM_PLACED_BYTES", int, 1 << 20,
                          "--dispatch shm: bytes of hidden rows per rank (the step's token bound x a row's bytes) from which a call is placed, counts first and every row straight to its ExpertBatch row (docs/dispatch.md); 0: every call")
KV_SECRET = EnvVar("MOESERVE_KV_SECRET", str, "",
                   "the prefill/decode pool's shared secret when --kv-secret is not given (kept out of the process list); docs/disaggregation.md")
DECODE_GRAPHS_EAGER = EnvVar("MOESERVE_DECODE_GRAPHS_EAGER", bool, False,
                             "run the CUDA-graph decode path (persistent inputs padded to a batch-size bucket) with the captured forward called again at each replay instead of a CUDA graph, on any device: how CI checks that padding never changes a token", "test")
ENGINE_CONFIG = EnvVar("MOESERVE_ENGINE_CONFIG", str, "",
                       "the engine configuration as JSON, handed to spawned rank processes", "internal")
PARENT_PID = EnvVar("MOESERVE_PARENT_PID", int, None,
                    "the process a spawned rank exits with when it dies", "internal")
SHARED_TRACES = EnvVar("MOESERVE_SHARED_TRACES", Path, None,
                       "folder of the third-party routing traces (deepseek_sglang_counts/, mixtral_per_token/: traces/README.md) that some placement tests, benchmarks/placement_bench.py and traces/make_samples.py read; the tests skip without it", "test")
TEST_RAISE_AT = EnvVar("MOESERVE_TEST_RAISE_AT", str, "",
                       "RANK:STEP makes that spawned rank raise in that step, RANK:start exit as it starts (tests/engine/test_rank_failure.py)", "test")

ALL: tuple[EnvVar, ...] = tuple(v for v in globals().values() if isinstance(v, EnvVar))


def markdown_table() -> str:
    """The docs table of every variable."""
    rows = ["| variable | type | default | scope | what it does |", "|---|---|---|---|---|"]
    for var in ALL:
        default = "~/.cache/moeserve" if var.default == _HOME_CACHE else ("unset" if var.default in (None, "") else
                                                                          ("on" if var.default else "off") if var.type is bool
                                                                          else str(var.default))
        rows.append(f"| `{var.name}` | {var.type.__name__} | {default} | {var.scope} | {var.doc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
