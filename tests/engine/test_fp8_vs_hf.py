"""FP8 end to end, against transformers' fp32 forward: `--quantization fp8` (linears and experts quantized
at load into 128 x 128 block-scaled e4m3, the activations per token and group of 128) and
`--kv-cache-dtype fp8` (K/V, MLA's latents, stored as e4m3), through the Triton set under
TRITON_INTERPRET=1 for every architecture, and the KV cache alone through the torch set and the cpu set
(whose C++ decode kernel takes no e4m3: the torch path reads it upcast).

Tokens may differ with FP8, so each prompt token after the first is scored (prompt_logprobs) and set
against transformers' log-softmax. The stated tolerance is relative to the spread of the model's logits
(std over the vocabulary, ~0.4-0.5 for these tiny random models): mean |difference| <= 0.15 std and max
<= 0.5 std. e4m3 keeps 3 mantissa bits (an element's error up to 1/16), and errors add over the layers:
measured 0.04-0.07 std mean, 0.07-0.11 std max with both on. A run whose numbers do not move at all
(difference < 1e-6) fails too: then nothing was quantized.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tiny_models import ALL_ARCHITECTURES

# a child process: argv = architecture, scratch dir, kernel set, --quantization, --kv-cache-dtype, models dir;
# prints one JSON line
CHILD = textwrap.dedent('''
    import json, random, sys
    from pathlib import Path
    import torch
    sys.path.insert(0, sys.argv[6])
    from tiny_models import make_any_checkpoint
    from moeserve import LLM, SamplingParams

    arch, scratch, kernels, quantization, kv = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    calls = {}
    if kernels == "triton":
        from moeserve.kernels.triton import fp8_linear, fused_moe

        def counted(module, name, when):
            fn = getattr(module, name)
            def wrapped(*args, **kwargs):
                if when(args, kwargs):
                    calls[name] = calls.get(name, 0) + 1
                return fn(*args, **kwargs)
            setattr(module, name, wrapped)

        counted(fp8_linear, "fp8_linear", lambda a, k: True)
        counted(fused_moe, "fused_moe", lambda a, k: k.get("fp8") is not None)
    torch.manual_seed(0)
    hf, path = make_any_checkpoint(arch, scratch)
    rng = random.Random(0)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in (9, 14)]
    with torch.no_grad():
        logits = [hf(torch.tensor([p])).logits[0].float() for p in prompts]
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=8, kernels=kernels, quantization=quantization,
              kv_cache_dtype=kv)
    runner = llm.engine.executor.worker.runner
    cache_dtypes = sorted({str(t.dtype) for layer in runner.kv_caches for t in layer})
    fp8_params = sum(p.dtype == torch.float8_e4m3fn for p in runner.model.parameters())
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=0))
    llm.shutdown()
    diffs, spread = [], []
    for out, prompt, lg in zip(outs, prompts, logits):
        ref = torch.log_softmax(lg, dim=-1)
        spread.append(float(lg.std()))
        diffs += [abs(out.prompt_logprobs[i][0] - float(ref[i - 1, prompt[i]])) for i in range(1, len(prompt))]
    print(json.dumps({"diffs": diffs, "std": min(spread), "calls": calls, "cache": cache_dtypes,
                      "fp8_params": int(fp8_params)}))
''')


def run(arch: str, kernels: str, quantization: str, kv: str, tmp_path: Path) -> dict:
    models = Path(__file__).resolve().parents[1] / "models"
    env = {**os.environ, **({"TRITON_INTERPRET": "1"} if kernels == "triton" else {})}
    done = subprocess.run([sys.executable, "-c", CHILD, arch, str(tmp_path), kernels, quantization, kv, str(models)],
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_within_fp8s_error(out: dict) -> None:
    diffs, std = out["diffs"], out["std"]
    mean = sum(diffs) / len(diffs)
    assert mean <= 0.15 * std and max(diffs) <= 0.5 * std, f"mean {mean:.4f}, max {max(diffs):.4f}, std {std:.3f}"
    assert max(diffs) > 1e-6, "FP8 changed nothing: was anything quantized?"


@pytest.mark.slow  # ~40 s each: the whole model under the interpreter
@pytest.mark.parametrize("arch", ALL_ARCHITECTURES)
def test_fp8_weights_and_kv_cache_through_the_triton_set(arch, tmp_path):
    pytest.importorskip("triton")
    out = run(arch, "triton", "fp8", "fp8", tmp_path)
    check_within_fp8s_error(out)
    assert out["cache"] == ["torch.float8_e4m3fn"] and out["fp8_params"] > 0
    assert out["calls"].get("fp8_linear", 0) > 0 and out["calls"].get("fused_moe", 0) > 0


@pytest.mark.slow  # ~25 s each: a subprocess building and serving a model
@pytest.mark.parametrize("arch, kernels", [("mixtral", "torch"), ("mixtral", "cpu"), ("deepseek_v3", "torch")])
def test_fp8_kv_cache_through_the_torch_and_cpu_sets(arch, kernels, tmp_path):
    out = run(arch, kernels, "none", "fp8", tmp_path)
    check_within_fp8s_error(out)
    assert out["cache"] == ["torch.float8_e4m3fn"] and out["fp8_params"] == 0


def test_quantization_fp8_needs_a_set_that_runs_fp8_weights():
    from moeserve.config import EngineConfig, ModelConfig
    from moeserve.engine.startup_checks import check_formats
    from moeserve.errors import ConfigError

    with pytest.raises(ConfigError, match="--quantization fp8 .* --kernels cpu lacks"):
        check_formats(EngineConfig(model=ModelConfig(quantization="fp8")))
    with pytest.raises(ConfigError, match="--quantization 'int4' is not one of"):
        EngineConfig(model=ModelConfig(quantization="int4")).validate()


def test_an_fp8_cache_is_written_saturated_and_read_upcast():
    """write_kv stores e4m3 (saturating at +-448 where torch's cast would make NaN); the torch set's
    paged attention over it equals attention over its values upcast, exactly."""
    import torch

    from moeserve.dense.attention import write_kv
    from moeserve.dense.attention_metadata import build_attention_metadata
    from moeserve.core.step_plan import GroupBatch, ScheduledSeq
    from moeserve.kernels.base import REFERENCE

    g = torch.Generator().manual_seed(0)
    k_cache, v_cache = torch.zeros(2, 4, 4, 2, 8, dtype=torch.float8_e4m3fn)
    k, v = torch.randn(2, 10, 2, 8, generator=g) * 3
    k[0, 0, 0] = 1000.0
    meta = build_attention_metadata(GroupBatch(0, [ScheduledSeq("a", list(range(10)), 0, [2, 0, 3], True)]), 4)
    write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    assert k_cache.view(-1, 2, 8)[8, 0, 0].item() == 448.0 and not k_cache.float().isnan().any()
    q = torch.randn(10, 4, 8, generator=g)
    got = REFERENCE.paged_attention(q, k_cache, v_cache, meta, 0.3)
    torch.testing.assert_close(got, REFERENCE.paged_attention(q, k_cache.float(), v_cache.float(), meta, 0.3))
