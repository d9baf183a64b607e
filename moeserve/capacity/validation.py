"""Published deployments the step model is checked against (docs/capacity.md, tests/capacity).

Each case fixes what its source states and, where the source is silent, what is assumed (`assumed`).
`predict_case` runs the model with the package's one set of efficiency factors.
"""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.capacity.balance import ASSUMED_REPLICATED
from moeserve.capacity.efficiency import DEFAULT, Efficiency
from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.predict import Options, Predictor, Workload


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    hardware: str
    phase: str  # prefill, decode (tokens/s per GPU of that side) or colocated
    layout: Layout
    batch: float | None  # None: the largest decode batch meeting workload.tpot_slo_ms
    workload: Workload
    options: Options
    published: float  # tokens/s per GPU (input for prefill, output otherwise)
    unit: str
    assumed: str
    precision: Precision = Precision()


def predict_case(case: Case, eff: Efficiency = DEFAULT) -> float:
    pred = Predictor(load_model("deepseek-v3"), load_hardware(case.hardware), case.precision, eff)
    if case.phase == "prefill":
        return pred.prefill(case.layout, case.batch, case.workload, case.options).input_tokens_per_s_per_gpu
    if case.phase == "colocated":
        return pred.colocated(case.layout, case.batch, case.workload, case.options).output_tokens_per_s_per_gpu
    batch = case.batch or largest_decode_batch(pred, case)
    return pred.decode(case.layout, batch, case.workload, case.options).output_tokens_per_s_per_gpu


def largest_decode_batch(pred: Predictor, case: Case) -> float:
    lo, hi = 1.0, 4096.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if pred.decode(case.layout, mid, case.workload, case.options).tpot_ms <= case.workload.tpot_slo_ms:
            lo = mid
        else:
            hi = mid
    return lo


_EPLB = dict(balancedness=ASSUMED_REPLICATED)  # no source gives its balance
DEEPSEEK = "DeepSeek, 'Day 6: DeepSeek-V3/R1 Inference System Overview' (github.com/deepseek-ai/open-infra-index, 2025-03-01)"
LMSYS = "LMSYS, 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs' (2025-05-05)"
TRTLLM = "NVIDIA, TensorRT-LLM blog 'How to get best performance on DeepSeek-R1 in TensorRT-LLM' (H200 max-throughput)"

CASES = [
    Case("DeepSeek prefill, H800 EP32", DEEPSEEK, "h800", "prefill", Layout(1, 32, 32), 16384,
         Workload(4400, 1200, cache_hit=0.563, isl_cv=1.0), Options(tbo=True, cuda_graphs=False, **_EPLB), 73_700 / 8, "input tok/s/GPU",
         "a daily average of the live service, cache hits (56.3%) counted as input; prompt 4,400 tokens (608B input / 168B "
         "output tokens a day = 3.6:1 with the mean decode KV length 4,989 = prompt + half the output); 16K tokens per GPU "
         "per step and two micro-batches (DeepSeek's profile-data README); live prompt lengths spread as an exponential "
         "distribution (isl_cv 1)"),
    Case("DeepSeek decode, H800 EP144", DEEPSEEK, "h800", "decode", Layout(1, 144, 32), None,
         Workload(4400, 1200, tpot_slo_ms=1000 / 21), Options(tbo=True, decode_context=4989, **_EPLB), 14_800 / 8,
         "output tok/s/GPU", "batch = the largest whose TPOT meets the published 20-22 tok/s per user (21); no MTP "
         "(the overview does not say it is used); two micro-batches (its 5-stage pipeline)"),
    *[Case(f"LMSYS prefill, H100 EP32, {isl // 1024}K", LMSYS, "h100", "prefill", Layout(1, 32, 32), 16384,
           Workload(isl, 1), Options(tbo=True, cuda_graphs=False, **_EPLB), published / 8, "input tok/s/GPU",
           "16,384 tokens per GPU per step, two-batch overlap, EPLB with 32 redundant experts, no cache hits")
      for isl, published in ((1024, 57_674), (2048, 54_543), (4096, 50_302))],
    Case("LMSYS decode, H100 EP72", LMSYS, "h100", "decode", Layout(1, 72, 32), 256,
         Workload(2000, 100), Options(tbo=True, decode_context=2000, **_EPLB), 22_282 / 8, "output tok/s/GPU",
         "KV length 2,000 (the input; outputs short against it); two-batch overlap; no MTP; EPLB with 32 redundant experts"),
    Case("TensorRT-LLM, 8xH200 DP8 EP8", TRTLLM, "h200", "colocated", Layout(1, 8, 0), 1024 / 8,
         Workload(1024, 2048), Options(**_EPLB), 1_436, "output tok/s/GPU",
         "in-flight batching of prefill and decode on the same GPUs (trtllm-bench); FP8 KV cache; no MTP; no "
         "redundant experts", Precision(kv="fp8")),
]


def table() -> str:
    """The validation table of docs/capacity.md, as markdown rows."""
    rows = ["| deployment | hardware | published | predicted | error |", "|---|---|---:|---:|---:|"]
    for c in CASES:
        p = predict_case(c)
        rows.append(f"| {c.name} | {c.hardware} | {c.published:,.0f} | {p:,.0f} | {p / c.published - 1:+.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
