"""The twelfth blind part of the validation table (docs/capacity.md): published figures found and recorded
with the predictions of the model of main at e281b5e, by someone who did not change the model; none of them
was used to choose a mechanism or a factor. Each case says which reading of its source was taken where the
source is silent (`assumed`). It was searched for H800 and H20 figures, in Chinese sources as well as English
ones; no figure here is used by another part, and its one source is new to the validation.

Source:
- dragonfive's engineering blog, the post 'deepseek-r1-benchmark' (dragonfive.github.io/post/deepseek-r1-benchmark,
  in Chinese: a short record of DeepSeek-R1's throughput under different inference engines, measured with SGLang's
  bench_serving.py; vLLM 0.7.2, so early 2025). Its two tables:
  1. 'On two H800 machines, vLLM and SGLang each serving DeepSeek': 4 requests a second, 960 requests, each 2,000
     tokens long and asked for 2,000 output tokens ('SGLang did not yet support DP [attention] then'). The row
     'sglang两机' (SGLang, two machines): 0.67 req/s, input 675.63 and output 658.57 tok/s, mean E2E 582,352.85 ms,
     mean TTFT 297,396.49 ms, mean TPOT 311.18 ms.
  2. 'On one H20 machine': 500 requests fired at once ('瞬间把500条请求打过去'), 49,851 input and 2,574,919 output
     tokens in all (mean 99.7 in / 5,149.8 out). Its rows, engine and 'config (tp-pp)': 'sglang tp=8' output
     876.83 tok/s, mean TTFT 564,953.54 ms, mean TPOT 231.00 ms; 'tp8+dp' (SGLang with DP attention) output
     1,541.31 tok/s, mean TTFT 10,717.03 ms, mean TPOT 212.49 ms; 'vllm0.7.2 tp=8' output 523.37 tok/s, mean TTFT
     1,105,337.01 ms, mean TPOT 283.14 ms.

Figures looked at and not taken: the post's vLLM 0.7.2 row on two H800 machines (1,075.78 output tok/s, mean
TPOT 195.03 ms: the layout over the 16 GPUs, TP 16 or TP 8 x PP 2, is not stated); SGLang PRs #5196 (DeepSeek-R1
on two H20 nodes at --tp 16, 0.4.4.post1), #5291 (DeepSeek-R1 on 8 H20 at --tp 8 with shared-expert fusion, max
concurrency 8) and #17133 (DeepSeek-V3.1 at TP 8 on H20, TPOT at batch 1 to 256 before and after swapAB-tuned
fused-MoE configs) and the tuned-config runs of PRs #6835, #6885 and #7631 (H20 / H20-3e at concurrency 8): their
result blocks or tables could not be read whole from the stored copies (the runs without tuned configs are in
blinds 3, 4 and 6); vLLM PRs #19205 (DeepSeek-R1-0528 on 8 H20-3e) and #19315 / #19401 (Qwen3-235B on H20-3e),
likewise; vLLM PR #18337 (DeepSeek on 8 H20: results only as images); vLLM issues #30832 and #40592 (DeepSeek-V3.2
on 8 H20: sparse attention, not modelled); SGLang issue #3956 (option ablations on two H20 nodes: figures as
images); tanjunchen's post 'DeepSeek-R1 (FP8) on one H20 machine (8 x 96 GiB)' (vLLM 0.8.2 and SGLang launch
lines; its results could not be read from the stored copy); the SGLang cookbook's and vLLM recipes' H800 pages
(blinds 3 and 9 took the Kimi K2 16xH800 recipe run); several Chinese article-mirror sites (ruibaoantu, cloud.baidu
articles) with H20 and H200 'benchmarks' that contradict the hardware they name (H200 at 80 GB, 'DeepSeek-R1-70B'
at FP16 on H20): not measurements. No H800 figure of Kimi K2 or Qwen3-235B with a stated layout was found.

Readings common to all: DeepSeek-R1 in its FP8 checkpoint (the post names no quantization; the FP8 release is the
one both engines load), BF16 KV, CUDA graphs, no MTP, no redundant experts; the H800 as configure's profile and
'one H20 machine' as 8 H20 of 96 GB; SGLang without DP attention on two machines read as --tp 16 over both (SGLang
had no pipeline parallelism then), experts split TP over the group; SGLang's 'tp8+dp' as --tp 8
--enable-dp-attention (eight attention groups of one GPU, experts split TP 8, as blind 5 reads SGLang 0.4.3's);
an output throughput as colocated (SGLang's prefill batches run apart from decode: prefill "separate", the rule
blinds 2, 4, 8 and 11 follow; vLLM's chunks ride in the decode steps) and a mean TPOT as 1 / TPOT of decode at the
same batch; the batch: where the source's mean TTFT shows requests queued behind a full server (the H800 run's
297 s, the H20 TP 8 runs' 565 s and 1,105 s) the largest whose KV cache fits (batch_rule "fit", as for runs whose
concurrency is not published), and where it shows them admitted at once (the DP-attention run's 10.7 s) the 500
sent, 62.5 a GPU (as blind 8 reads gpustack's 1,000 sent at once); lengths at the stated 2,000 / 2,000 (H800) and
the run's means 100 / 5,150 (H20).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

DRAGONFIVE = ("dragonfive's blog, 'deepseek-r1-benchmark' (dragonfive.github.io/post/deepseek-r1-benchmark, early 2025: "
              "vLLM 0.7.2 and SGLang measured with SGLang's bench_serving)")

_FP8 = Precision(weights="fp8")
_H800_W = Workload(2000, 2000)
_H20_W = Workload(100, 5150)  # 49,851 / 2,574,919 tokens over 500 requests
_H800 = ("DeepSeek-R1 (FP8 checkpoint) on two machines of 8 H800, SGLang without DP attention read as --tp 16 over both "
         "(experts split TP 16), BF16 KV, CUDA graphs; 960 requests of 2,000 in / 2,000 out sent at 4 a second against "
         "0.67 served (mean TTFT 297 s: a standing queue), so the batch is the largest whose KV cache fits")
_H20 = ("DeepSeek-R1 (FP8 checkpoint) on one machine of 8 H20 (96 GB), BF16 KV, CUDA graphs; 500 requests sent at once, "
        "mean 99.7 in / 5,149.8 out (the totals 49,851 / 2,574,919); ")
_QUEUED = "the batch the largest whose KV cache fits (mean TTFT {ttft} s: the 500 queued behind a full server)"


def _sgl_h800(unit: str) -> Case:
    if unit == "tok/s/GPU":
        return Case("SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, throughput", DRAGONFIVE, "h800", "colocated",
                    Layout(16, 1, 0), None, _H800_W, Options(prefill="separate"), 658.57 / 16, unit,
                    "output tok/s (658.57) / 16 GPUs; prefill batches apart from decode; " + _H800, _FP8,
                    model="deepseek-r1", batch_rule="fit", blind=12)
    return Case("SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, TPOT", DRAGONFIVE, "h800", "decode", Layout(16, 1, 0), None,
                _H800_W, Options(), 1000 / 311.18, unit, "1 / the mean TPOT (311.18 ms); " + _H800, _FP8,
                model="deepseek-r1", batch_rule="fit", blind=12)


def _h20(name: str, engine: str, layout: Layout, batch: float | None, how: str, out: float, tpot: float,
         prefill: str) -> list[Case]:
    who = _H20 + engine + "; " + how
    rule = "fit" if batch is None else "slo"
    return [
        Case(f"{name}, 500 at once, 100/5K, throughput", DRAGONFIVE, "h20", "colocated", layout, batch, _H20_W,
             Options(prefill=prefill), out / 8, "tok/s/GPU", f"output tok/s ({out}) / 8 GPUs; " + who, _FP8,
             model="deepseek-r1", batch_rule=rule, blind=12),
        Case(f"{name}, 500 at once, 100/5K, TPOT", DRAGONFIVE, "h20", "decode", layout, batch, _H20_W, Options(),
             1000 / tpot, "tok/s/user", f"1 / the mean TPOT ({tpot} ms); " + who, _FP8, model="deepseek-r1",
             batch_rule=rule, blind=12),
    ]


BLIND12 = [
    _sgl_h800("tok/s/GPU"),
    _sgl_h800("tok/s/user"),
    *_h20("SGLang 8xH20 TP8", "SGLang at --tp 8 (attention TP 8, experts split TP 8), prefill batches apart from "
          "decode", Layout(8, 1, 0), None, _QUEUED.format(ttft=565), 876.83, 231.00, "separate"),
    *_h20("SGLang 8xH20 TP8 DP attention", "SGLang at --tp 8 --enable-dp-attention (eight attention groups of one "
          "GPU, experts split TP 8), prefill batches apart from decode", Layout(tp=1, ep=1, moe_tp=8), 500 / 8,
          "the batch the 500 sent, 62.5 a GPU (mean TTFT 10.7 s: admitted at once)", 1541.31, 212.49, "separate"),
    *_h20("vLLM 0.7.2 8xH20 TP8", "vLLM 0.7.2 at tp=8 (attention TP 8, experts split TP 8), prefill chunks in the "
          "decode steps", Layout(8, 1, 0), None, _QUEUED.format(ttft=1105), 523.37, 283.14, "mixed"),
]

# Predicted when recorded (the model of main at e281b5e): name -> the model's figure in the case's unit.
RECORDED = {
    'SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, throughput': 132.0,
    'SGLang 2x8 H800 TP16, 2K/2K at 4 req/s, TPOT': 23.8,
    'SGLang 8xH20 TP8, 500 at once, 100/5K, throughput': 36.8,
    'SGLang 8xH20 TP8, 500 at once, 100/5K, TPOT': 37.0,
    'SGLang 8xH20 TP8 DP attention, 500 at once, 100/5K, throughput': 457.7,
    'SGLang 8xH20 TP8 DP attention, 500 at once, 100/5K, TPOT': 7.4,
    'vLLM 0.7.2 8xH20 TP8, 500 at once, 100/5K, throughput': 37.0,
    'vLLM 0.7.2 8xH20 TP8, 500 at once, 100/5K, TPOT': 37.0,
}
