"""The thirty-third blind part of the validation table (docs/capacity.md): published figures of W4A16 deployments
(4-bit integer weights in groups with 16-bit scales, 16-bit activations: GPTQ and AWQ checkpoints) of Qwen3-235B-A22B
and DeepSeek-R1 / V3, found and recorded with the predictions of the model of main at 3cb8740 (the commit that gave
configure its int4 weight format), by someone who did not change the model; none of them was used to choose a
mechanism or a factor. Each case says which reading of its source was taken where the source is silent (`assumed`);
every reading was decided before any prediction here was computed. Earlier parts left these figures out because
configure had no INT4 format (blind 10: Qwen's GPTQ-INT4 rows; blind 22: tenstorrent's AWQ rows). Moonshot's native
INT4 Kimi K2-Thinking / K2.5 figures are left to another part.

Sources (quoted as the stored copies print them):
- Qwen, 'Speed Benchmark' (Qwen3 docs, docs/source/getting_started/speed_benchmark.md in github.com/QwenLM/Qwen3,
  last changed in c7f51a1): 'NVIDIA H20 96GB', 'SGLang 0.4.6.post1', 'vLLM 0.7.2 (Required by SGLang for AWQ
  quantization)'; 'Speed = (tokens_prompt + tokens_generation) / time'; 'We use a **batch size of 1** and the
  **minimum number of GPUs** possible'; 'generating **2048 tokens**'; 'we set `mem_fraction_static=0.85`', 'We
  configure `context_length=140000` and enable `enable_mixed_chunk=True`'; and the note '**GPTQ-INT4 Performance in
  SGLang**: The performance of GPTQ-INT4 in SGLang also needs improvement, and we are actively working with the team
  to enhance it.' Its 'Qwen3-235B-A22B (SGLang)' table, the GPTQ-INT4 rows (input length, quantization, GPU num,
  speed, note): '1 | GPTQ-INT4 | 4 | 14.69 | TP=4 GPTQ-Marlin', '6144 | GPTQ-INT4 | 4 | 56.97 | TP=4 GPTQ-Marlin',
  '14336 | GPTQ-INT4 | 4 | 109.13', '30720 | GPTQ-INT4 | 4 | 198.99', '63488 | GPTQ-INT4 | 4 | 422.77', '129042 |
  GPTQ-INT4 | 4 | 552.28' (each 'TP=4 GPTQ-Marlin'). Blinds 1, 3 and 10 and the held-out part took the BF16 and FP8
  rows; no part took these.
- tenstorrent/tt-inference-server issue #356 ('DeepSeek-R1-0528: GPU Benchmarks', github.com/tenstorrent/
  tt-inference-server/issues/356): the description's setups '8xH100s: Quantized (AWQ)' (SGLang, 'Optional: vLLM'),
  and the comment of 2025-07-10 '### Performance Benchmark Sweeps for DeepSeek-R1-0528-AWQ on 8xH100s (vLLM)' (ISL,
  OSL, concurrency, requests, TTFT ms, TPOT ms, ...): '128 | 1024 | 1 | 4 | 27.3 | 16.1 |', '1024 | 128 | 1 | 4 |
  105.3 | 16.1 |', '4096 | 128 | 1 | 2 | 120.1 | 16.4 |', '8192 | 128 | 1 | 2 | 242.0 | 16.6 |' (the stored copy
  stops within that row). Blinds 2 and 17 took the issue's 16 x H100 SGLang rows (FP8); blind 22 left these.
- The AWQ model card of Eric Hartford and v2ray (huggingface.co/cognitivecomputations/DeepSeek-R1-AWQ; the same
  text and table on cognitivecomputations/DeepSeek-V3-AWQ and QuixiAI/DeepSeek-V3-0324-AWQ): 'This quant modified
  some of the model code to fix an overflow issue when using float16.'; 'To serve using vLLM with 8x 80GB GPUs, use
  the following command: VLLM_USE_V1=0 VLLM_WORKER_MULTIPROC_METHOD=spawn VLLM_MARLIN_USE_ATOMIC_ADD=1 python -m
  vllm.entrypoints.openai.api_server ... --max-model-len 65536 --max-seq-len-to-capture 65536
  --enable-chunked-prefill --enable-prefix-caching --trust-remote-code --tensor-parallel-size 8
  --gpu-memory-utilization 0.95 ...'; 'the benchmark below was done with this wheel' (the V3-0324 card's commit
  c922ba7 names it vllm-0.8.3.dev166+g29930428e); '## TPS Per Request', '| GPU \\ Batch Input Output | B: 1 I: 2 O:
  2K | B: 32 I: 4K O: 256 | B: 1 I: 63K O: 2K | Prefill |', '| **8x H100/H200** | 61.5 | 30.1 | 54.3 | 4732.2 |',
  '| **4x H200** | 58.4 | 19.8 | 53.7 | 2653.1 |'.

Checkpoints (what is int4, the group size; all W4A16: activations stay 16-bit):
- Qwen/Qwen3-235B-A22B-GPTQ-Int4, read from a stored summary of Qwen's quantization configs (a public repository's
  notes citing the checkpoint's config.json): 'gptq', 'bits=4', 'group_size=128', 'checkpoint_format="gptq"',
  'desc_act=false', 'sym=true', no explicit modules_to_not_convert. GPTQModel quantizes the attention projections
  and the experts' gate/up/down projections of every decoder layer (Qwen3-235B has no dense or shared-expert MLPs),
  not the routers (mlp.gate) or the LM head: Precision(weights="int4"). Groups of 128 with 16-bit scales (and
  packed zero points) make the real weights about 0.52 bytes a weight, some 8% under configure's 0.5625 (groups of
  32): not adjusted.
- DeepSeek-R1-AWQ / DeepSeek-R1-0528-AWQ (cognitivecomputations / QuixiAI): the stored copy of the config.json stops
  at '"quantization_config": { "bits": 4,', so the group size could not be read (AutoAWQ's 64 or 128: real weights
  4-8% under configure's plan; not adjusted). AutoAWQ's DeepSeek-V3 path (awq/models/deepseek_v3.py) scales and
  quantizes every linear layer of a decoder layer (q_a, q_b, kv_a, kv_b and o projections, the three dense MLPs,
  shared and routed experts), not the router or the LM head: Precision(weights="int4"), except MLA's kv_b_proj,
  which vLLM dequantizes at load into the 16-bit absorbed W_UK / W_UV (kv_b="bf16"). The MTP layer (left unquantized
  in the checkpoint) is not run.

Searched: vLLM, SGLang and tenstorrent issues and pull requests, Hugging Face model cards, gpustack's performance
lab, ZhiLight, Chinese posts, for GPTQ / AWQ / W4A16 figures of Qwen3-235B-A22B and DeepSeek-V3/R1 on H20, H800,
H200, H100, B200, GB200, GB300, MI300X and MI355X.

Figures looked at and not taken:
- tenstorrent #356's other AWQ rows ('128 | 128', '2048 | 128', '3072 | 128': TPOT 16.1, 16.3 and 16.4 ms at
  concurrency 1, read but left out so one sweep of near-equal figures does not outweigh the others), its TTFT and
  E2EL columns (the same runs), its SGLang AWQ sweep (not in the readable part).
- The AWQ card's 'Prefill' column (4732.2 and 2653.1: which prompt and how it was timed are not stated), its 8x A100
  and 8x L40S rows (not configure cards).
- Qwen's Transformers tables of the same page (Hugging Face Transformers is not an engine configure plans for).
- vLLM PR #14138 / #14447 (jinzhen-lin's Marlin MoE kernels: DeepSeek-V3/R1-AWQ at batch 1-64 on 8 A800, not a
  configure card); ZhiLight's 'DeepSeek-R1 AWQ' tables (docs/benchmarks/benchmarks.md: vLLM on 8 A800; H20 only for
  ZhiLight, an engine configure does not plan for); gpustack's quantization study (Qwen3-8B only); QuantTrio's and
  other community Qwen3-235B AWQ / GPTQ cards (no figures found in the stored copies); SGLang PR #7762 and the W4A8 /
  W4AFP8 DeepSeek runs (INT4 weights with 8-bit activations: out of scope); A800, L40S, RTX and Ascend runs. No H20,
  H800 or H200 figure of a GPTQ / AWQ DeepSeek checkpoint with a stated engine and load was found beyond the card's
  4 x H200 rows.

Readings (decided before the model was run):
- Qwen's rows as blind 1 and the held-out part read that page: a GPTQ-INT4 row at input 1 as 1 / TPOT of decode (its
  speed is 2,049 tokens over one request's time: 1 / TPOT at a mean context of 1K, as the held-out part reads the
  BF16 and FP8 input-1 rows); the other rows as (prompt + 2,048) / the request's time ('tok/s/request': the prompt
  prefilled in one pass, then 2,047 decode steps of one sequence over the TP group); four H20 (96 GB) at TP 4 with
  the experts split TP 4 (Layout(4, 1)); BF16 KV (SGLang's default); CUDA graphs at decode; the GPTQ-Marlin MoE path
  of SGLang 0.4.6.post1 costed as configure's int4 (Marlin blocks at the BF16 peak), the page's own note that its
  GPTQ-INT4 speed 'needs improvement' not modelled.
- tenstorrent's rows: DeepSeek-R1-0528-AWQ (read as cognitivecomputations' / QuixiAI's DeepSeek-R1-0528-AWQ, the
  card's quantizers and pipeline) on 8 H100 with vLLM of July 2025 (version not given; V1 engine) at
  --tensor-parallel-size 8 without expert parallelism (no launch line is given: attention TP 8, experts split TP 8,
  the only layout that fits 8 x 80 GB with one instance), KV in 16 bits (vLLM's auto for an AWQ checkpoint), CUDA
  graphs, no speculative decoding; a mean TPOT at concurrency 1 as 1 / TPOT of decode of one sequence (1/8 a GPU) at
  the row's lengths (fixed: tenstorrent's random prompts of the set length).
- The AWQ card's rows: '8x H100/H200' read as 8 H100 (the card's command is for '8x 80GB GPUs'; were it H200, the
  figure is the same and configure's H200 prediction would be higher), '4x H200' as 4 H200 at
  --tensor-parallel-size 4 (the card gives only the 8-GPU command); vLLM 0.8.3.dev with the V0 engine
  (VLLM_USE_V1=0), experts split TP over the instance (no expert parallelism), KV in 16 bits (float16, the card's
  dtype), CUDA graphs up to 65,536 tokens of context (--max-seq-len-to-capture 65536), no speculative decoding, the
  Marlin MoE's atomic-add reduction not modelled apart; 'TPS Per Request' read as a request's output tokens over its
  decode time, 1 / TPOT: 'B: 1 I: 2 O: 2K' as decode of one sequence at 2 in / 2,048 out, 'B: 1 I: 63K O: 2K' at
  63,488 in (65,536, the card's --max-model-len, less the 2,048 out) / 2,048 out, 'B: 32 I: 4K O: 256' as decode of 32
  sequences in flight (4 a GPU on 8, 8 a GPU on 4) at 4,096 in / 256 out, the prompts' prefill chunks (chunked
  prefill) left out of the TPOT as done before the decodes run (all 32 sent at once, assumed).
"""
from __future__ import annotations

from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.predict import Options, Workload
from moeserve.capacity.validation_cases import Case

QWEN_INT4 = ("Qwen, 'Speed Benchmark' (Qwen3 docs, docs/source/getting_started/speed_benchmark.md in "
             "github.com/QwenLM/Qwen3 at c7f51a1: SGLang 0.4.6.post1, H20 96GB, batch 1, 2,048 generated tokens), "
             "the GPTQ-INT4 rows of its 'Qwen3-235B-A22B (SGLang)' table")
TT_356_AWQ = ("tenstorrent/tt-inference-server issue #356 (github.com/tenstorrent/tt-inference-server/issues/356), the "
              "2025-07-10 comment 'Performance Benchmark Sweeps for DeepSeek-R1-0528-AWQ on 8xH100s (vLLM)'")
AWQ_CARD = ("cognitivecomputations' DeepSeek-R1-AWQ model card (huggingface.co/cognitivecomputations/DeepSeek-R1-AWQ; "
            "the same table on DeepSeek-V3-AWQ and DeepSeek-V3-0324-AWQ), its 'TPS Per Request' table")

# Qwen/Qwen3-235B-A22B-GPTQ-Int4: attention and experts int4 (groups of 128), routers and LM head 16-bit, BF16 KV
_GPTQ = Precision(weights="int4")
# AWQ DeepSeek-R1: every decoder linear layer int4; MLA's kv_b_proj dequantized by vLLM at load (16-bit); 16-bit KV
_AWQ = Precision(weights="int4", kv_b="bf16")

_QWEN = ("Qwen/Qwen3-235B-A22B-GPTQ-Int4 (GPTQ 4-bit, group 128, sym, desc_act false: attention projections and "
         "experts int4, routers and LM head 16-bit; real weights ~8% under configure's group-32 plan, not adjusted) "
         "on 4 H20 96GB at TP 4 (experts split TP 4), SGLang 0.4.6.post1 with GPTQ-Marlin, BF16 KV, CUDA graphs at "
         "decode; the page's note that its GPTQ-INT4 speed 'needs improvement' not modelled")


def _qwen(isl: int, published: float) -> Case:
    """A GPTQ-INT4 row of Qwen's H20 speed benchmark, read as blind 1 and the held-out part read the others."""
    if isl == 1:
        return Case("SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1", QWEN_INT4, "h20", "decode", Layout(4, 1, 0),
                    1 / 4, Workload(1, 2048), Options(), published, "tok/s/user",
                    "input 1 token, 2,048 generated: the speed (14.69) is 1 / TPOT at a mean context of 1K; " + _QWEN,
                    _GPTQ, model="qwen3-235b-a22b", blind=33)
    return Case(f"SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, {isl:,}-token prompt", QWEN_INT4, "h20", "decode",
                Layout(4, 1, 0), 1 / 4, Workload(isl, 2048), Options(), published, "tok/s/request",
                f"({isl:,} prompt + 2,048 generated) / the request's time ({published}); the prompt prefilled in one "
                "pass (SGLang's chunks change the attention's order, not its work), then 2,047 decode steps; " + _QWEN,
                _GPTQ, model="qwen3-235b-a22b", blind=33)


_TT = ("DeepSeek-R1-0528-AWQ (read as cognitivecomputations' / QuixiAI's: every decoder linear layer int4, MLA's "
       "kv_b_proj dequantized to 16 bits by vLLM, router and LM head 16-bit; group size not readable, real weights "
       "4-8% under configure's group-32 plan, not adjusted) on 8 H100, vLLM of July 2025 (V1) at TP 8 without expert "
       "parallelism (assumed: no launch line given), 16-bit KV, CUDA graphs, no speculative decoding")


def _label(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 else str(n)


def _tt(isl: int, osl: int, tpot: float) -> Case:
    return Case(f"vLLM DeepSeek-R1-0528-AWQ 8xH100 TP8, batch 1, {_label(isl)}/{_label(osl)}", TT_356_AWQ, "h100",
                "decode", Layout(8, 1, 0), 1 / 8, Workload(isl, osl), Options(), round(1000 / tpot, 2), "tok/s/user",
                f"1 / TPOT ({tpot} ms) at {isl:,} in / {osl:,} out, concurrency 1 (one sequence, 1/8 a GPU); " + _TT,
                _AWQ, model="deepseek-r1", blind=33)


_CARD = ("DeepSeek-R1-AWQ (cognitivecomputations: every decoder linear layer int4, MLA's kv_b_proj dequantized to 16 "
         "bits by vLLM, router and LM head 16-bit; group size not readable, real weights 4-8% under configure's "
         "group-32 plan, not adjusted), vLLM 0.8.3.dev (the card's wheel) with the V0 engine, experts split TP over "
         "the instance (no expert parallelism), float16 activations and KV, CUDA graphs to 65,536 tokens of context, "
         "chunked prefill, no speculative decoding, the Marlin MoE's atomic-add reduction not modelled apart; 'TPS Per "
         "Request' read as 1 / TPOT of decode")


def _card(hw: str, n: int, seqs: int, isl: int, osl: int, published: float, col: str) -> Case:
    gpus = ("8 H100 ('8x H100/H200' read as H100: the card's command is for '8x 80GB GPUs')" if n == 8
            else "4 H200 at --tensor-parallel-size 4 (assumed: the card's command is for 8 GPUs)")
    load = (f"{seqs} sequences in flight ({seqs / n:g} a GPU), all sent at once (assumed), their prompts' prefill "
            "chunks left out of the TPOT" if seqs > 1 else f"one sequence (1/{n} a GPU)")
    return Case(f"vLLM DeepSeek-R1-AWQ {n}x{hw.upper()} TP{n}, batch {seqs}, {col} (model card)", AWQ_CARD, hw,
                "decode", Layout(n, 1, 0), seqs / n, Workload(isl, osl), Options(), published, "tok/s/user",
                f"the '{col}' column ({published} TPS per request) at {isl:,} in / {osl:,} out; {load}; {gpus}; "
                + _CARD,
                _AWQ, model="deepseek-r1", blind=33)


BLIND33 = [
    _qwen(1, 14.69),
    _qwen(6144, 56.97),
    _qwen(14336, 109.13),
    _qwen(30720, 198.99),
    _qwen(63488, 422.77),
    _qwen(129042, 552.28),
    _tt(128, 1024, 16.1),
    _tt(1024, 128, 16.1),
    _tt(4096, 128, 16.4),
    _tt(8192, 128, 16.6),
    _card("h100", 8, 1, 2, 2048, 61.5, "B: 1 I: 2 O: 2K"),
    _card("h100", 8, 32, 4096, 256, 30.1, "B: 32 I: 4K O: 256"),
    _card("h100", 8, 1, 63488, 2048, 54.3, "B: 1 I: 63K O: 2K"),
    _card("h200", 4, 1, 2, 2048, 58.4, "B: 1 I: 2 O: 2K"),
    _card("h200", 4, 32, 4096, 256, 19.8, "B: 32 I: 4K O: 256"),
    _card("h200", 4, 1, 63488, 2048, 53.7, "B: 1 I: 63K O: 2K"),
]

# Predicted when recorded (the model of main at 3cb8740): name -> the model's figure in the case's unit.
RECORDED = {
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1': 94.8,
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, 6,144-token prompt': 359.6,
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, 14,336-token prompt': 662.7,
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, 30,720-token prompt': 1091.9,
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, 63,488-token prompt': 1409.7,
    'SGLang Qwen3-235B-A22B GPTQ-Int4, H20 TP4, batch 1, 129,042-token prompt': 1321.1,
    'vLLM DeepSeek-R1-0528-AWQ 8xH100 TP8, batch 1, 128/1K': 113.6,
    'vLLM DeepSeek-R1-0528-AWQ 8xH100 TP8, batch 1, 1K/128': 113.6,
    'vLLM DeepSeek-R1-0528-AWQ 8xH100 TP8, batch 1, 4K/128': 113.6,
    'vLLM DeepSeek-R1-0528-AWQ 8xH100 TP8, batch 1, 8K/128': 113.6,
    'vLLM DeepSeek-R1-AWQ 8xH100 TP8, batch 1, B: 1 I: 2 O: 2K (model card)': 113.6,
    'vLLM DeepSeek-R1-AWQ 8xH100 TP8, batch 32, B: 32 I: 4K O: 256 (model card)': 41.9,
    'vLLM DeepSeek-R1-AWQ 8xH100 TP8, batch 1, B: 1 I: 63K O: 2K (model card)': 93.5,
    'vLLM DeepSeek-R1-AWQ 4xH200 TP4, batch 1, B: 1 I: 2 O: 2K (model card)': 111.4,
    'vLLM DeepSeek-R1-AWQ 4xH200 TP4, batch 32, B: 32 I: 4K O: 256 (model card)': 37.0,
    'vLLM DeepSeek-R1-AWQ 4xH200 TP4, batch 1, B: 1 I: 63K O: 2K (model card)': 98.1,
}
