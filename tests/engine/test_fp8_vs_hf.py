"""FP8 end to end, against transformers' fp32 forward: `--quantization fp8` (linears and experts quantized
at load into 128 x 128 block-scaled e4m3, the activations per token and group of 128) and
`--kv-cache-dtype fp8` (K/V, MLA's latents, stored as e4m3), through the Triton set under
TRITON_INTERPRET=1 for every architecture, and the KV cache alone through the torch set and the cpu set
(whose C++ decode kernel takes no e4m3: the torch path reads it upcast).

Tokens may differ with FP8, so each prompt token after the first is scored (prompt_logprobs) and set
against transformers' log-softmax. The stated tolerance is relative to the spread of the model's logits
(std over the vocabulary, ~0.4-0.5 for these tiny random models): mean |difference| <= 0.15 std and max
<= 0.75 std. e4m3 keeps 3 mantissa bits (an element's error up to 1/16), errors add over the layers, and
a hidden state moved that much can flip a router's top-k (GLM-4.5's sigmoid routing did): measured
0.04-0.13 std mean and 0.07-0.56 std max with both on. A run whose numbers do not move at all
(difference < 1e-6) fails too: then nothing was quantized. That the differences are FP8's alone, not a
kernel's, is the W8A8Reference tests': the Triton set equals the same arithmetic in plain torch.
"""
from __future__ import annotations

import pytest

from model_jobs import run_in_child
from moeserve.kernels import registry
from moeserve.kernels.base import KernelSet
from moeserve.kernels.reference import fp8_quant
from moeserve.kernels.reference.fp8 import FP8_DTYPE
from tiny_models import ALL_ARCHITECTURES

KV_ONLY = [("mixtral", "torch"), ("mixtral", "cpu"), ("deepseek_v3", "torch")]


@pytest.fixture(scope="module")
def triton_runs(tmp_path_factory) -> dict[str, dict]:
    """Every architecture with FP8 weights and KV cache through the Triton set under the interpreter, in
    one child (model_jobs.py: its start is most of a tiny model's run)."""
    pytest.importorskip("triton")
    jobs = [{"kind": "fp8", "arch": a, "scratch": str(tmp_path_factory.mktemp(a)), "kernels": "triton",
             "quantization": "fp8", "kv": "fp8"} for a in ALL_ARCHITECTURES]
    return dict(zip(ALL_ARCHITECTURES, run_in_child(jobs, {"TRITON_INTERPRET": "1"})))


@pytest.fixture(scope="module")
def kv_only_runs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """The FP8 KV cache alone through the torch and cpu sets, in one child."""
    jobs = [{"kind": "fp8", "arch": a, "scratch": str(tmp_path_factory.mktemp(f"{a}-{k}")), "kernels": k,
             "quantization": "none", "kv": "fp8"} for a, k in KV_ONLY]
    return dict(zip(KV_ONLY, run_in_child(jobs, {})))


def check_within_fp8s_error(out: dict) -> None:
    diffs, std = out["diffs"], out["std"]
    mean = sum(diffs) / len(diffs)
    assert mean <= 0.15 * std and max(diffs) <= 0.75 * std, f"mean {mean:.4f}, max {max(diffs):.4f}, std {std:.3f}"
    assert max(diffs) > 1e-6, "FP8 changed nothing: was anything quantized?"


@pytest.mark.slow  # the fixture's child: every model under the interpreter
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("arch", ALL_ARCHITECTURES)
def test_fp8_weights_and_kv_cache_through_the_triton_set(arch, triton_runs):
    out = triton_runs[arch]
    assert "error" not in out, out.get("error")
    check_within_fp8s_error(out)
    assert out["cache"] == ["torch.float8_e4m3fn"] and out["fp8_params"] > 0
    assert out["calls"].get("fp8_linear", 0) > 0 and out["calls"].get("fused_moe_fp8", 0) > 0


@pytest.mark.slow  # the fixture's child builds and serves each model
@pytest.mark.timeout(900)
@pytest.mark.parametrize("arch, kernels", KV_ONLY)
def test_fp8_kv_cache_through_the_torch_and_cpu_sets(arch, kernels, kv_only_runs):
    out = kv_only_runs[(arch, kernels)]
    assert "error" not in out, out.get("error")
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


class W8A8Reference(KernelSet):
    """A kernel set that runs FP8 block-scaled layers in plain torch with the kernels' arithmetic
    (kernels/reference/fp8_quant.py: activations quantized per token and group of 128, each group's
    product in fp32, both scales): the oracle the Triton set's FP8 path must equal, where transformers
    (on the dequantized weights, activations unquantized) is only within FP8's error."""

    name = "w8a8-reference"
    fp8_block_weights = True

    @classmethod
    def registered(cls) -> str:
        registry.KERNEL_SETS.setdefault(cls.name, f"{__name__}:{cls.__name__}")
        return cls.name

    def linear(self, layer, x, bias):
        if layer.weight.dtype != FP8_DTYPE:
            return super().linear(layer, x, bias)
        out = fp8_quant.block_fp8_linear(x, layer.weight, layer.weight_scale_inv, layer.weight_block)
        return out if bias is None else out + bias

    def experts(self, layer, batch):
        if layer.w13.dtype != FP8_DTYPE:
            return super().experts(layer, batch)
        from moeserve.kernels.triton.fused_moe import Fp8Weights, fused_experts_reference

        fp8 = Fp8Weights(layer.w13_scale_inv, layer.w2_scale_inv, tuple(layer.weight_block))
        glu = getattr(layer, "glu", None)  # gpt-oss: biases and the clamped SwiGLU
        swiglu = (glu.alpha, glu.limit) if glu is not None else (0.0, 0.0)
        return fused_experts_reference(batch.hidden, batch.offsets, layer.w13, layer.w2, layer.act_name,
                                       getattr(layer, "b13", None), getattr(layer, "b2", None), swiglu, fp8=fp8)


@pytest.mark.slow  # the whole model under the interpreter
@pytest.mark.parametrize("arch", ["deepseek_v3", "qwen3_moe"])
def test_an_fp8_checkpoint_through_the_triton_set(arch, tmp_path, monkeypatch):
    """An FP8 block-scaled checkpoint (128 x 128 blocks, as releases ship) kept FP8 at load and run by the
    Triton set's FP8 kernels equals the same arithmetic in plain torch (W8A8Reference) up to fp32 summation
    order and the e4m3 rounding steps it can flip (measured: 0.03 std at most); that is within FP8's error of transformers on the dequantized weights (the activations' e4m3
    rounding: measured 0.17 nats mean over the vocabulary for these tiny models, at logits' std 0.74)."""
    pytest.importorskip("triton")
    import torch
    from fp8_models import make_fp8_checkpoint
    from test_fp8_checkpoints import greedy_logits, runner

    from moeserve.kernels.triton import fp8_linear

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calls = []
    real = fp8_linear.fp8_linear
    monkeypatch.setattr(fp8_linear, "fp8_linear", lambda *a, **k: calls.append(1) or real(*a, **k))
    hf, path = make_fp8_checkpoint(arch, tmp_path)
    r = runner(path, kernels="triton")
    assert type(r.kernels).__name__ == "TritonKernels"
    assert any(p.dtype == torch.float8_e4m3fn for p in r.model.parameters())
    prompt = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 88]
    got = greedy_logits(r, prompt, steps=2)
    assert calls
    reference = greedy_logits(runner(path, kernels=W8A8Reference.registered()), prompt, steps=2)
    for a, b in zip(got, reference):
        # the same arithmetic, but not the same summation order upstream (attention, norms): an ulp apart
        # before an activation is rounded to e4m3 can round it a step (1/16) the other way, and that one
        # step moves every logit a little (on one CPU the runs agreed to 1e-4, on another 0.03 std apart);
        # a wrong scale or block would move them by FP8's whole error (the check below, ~0.3 std)
        diff = (a - b).abs()
        assert diff.max() <= 0.1 * b.std() and diff.mean() <= 0.02 * b.std(), (diff.max(), diff.mean(), b.std())
    with torch.no_grad():
        want = hf(torch.tensor([prompt])).logits[0, -1].float()
    diffs = (torch.log_softmax(got[1].float(), -1) - torch.log_softmax(want, -1)).abs()
    assert diffs.mean() <= 0.3 * want.std() and diffs.max() <= 1.5 * want.std()


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ["deepseek_v3", "gpt_oss"])
def test_fp8_and_every_triton_kernel_on_the_gpu(arch, tmp_path):
    """On a GPU in bf16 (the serving dtype), with the switches of the unmeasured kernels on (MLA prefill,
    the fused MoE's gather path) and both FP8 flags: within FP8's error of transformers in fp32, and
    every FP8 kernel called. (gpu_check.py runs it with the other GPU tests.)"""
    env = {"MOESERVE_TRITON_MLA_PREFILL": "1", "MOESERVE_TRITON_FUSED_MOE": "1", "TRITON_INTERPRET": "0"}
    job = {"kind": "fp8", "arch": arch, "scratch": str(tmp_path), "kernels": "triton", "quantization": "fp8", "kv": "fp8"}
    out = run_in_child([job], env)[0]
    assert "error" not in out, out.get("error")
    check_within_fp8s_error(out)
    assert out["calls"].get("fp8_linear", 0) > 0 and out["calls"].get("fused_moe_fp8", 0) > 0


@pytest.mark.slow  # the model under the interpreter, once each way
@pytest.mark.parametrize("arch", ["glm4_moe", "gpt_oss"])
def test_both_fp8_flags_equal_the_w8a8_reference(arch, tmp_path, monkeypatch):
    """--quantization fp8 --kv-cache-dtype fp8 through the Triton set equals the same arithmetic in plain
    torch (W8A8Reference over the same e4m3 cache) to fp32 summation order: what separates it from
    transformers is FP8's rounding, not a kernel (gpt-oss: biases and the clamped SwiGLU on FP8 experts,
    sinks and windows over an e4m3 cache)."""
    pytest.importorskip("triton")
    import torch
    from test_fp8_checkpoints import greedy_logits
    from tiny_models import make_any_checkpoint

    from moeserve.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig
    from moeserve.engine.model_runner import ModelRunner
    from moeserve.parallel_state import SINGLE

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    _, path = make_any_checkpoint(arch, tmp_path)

    def logits(kernels: str) -> list[torch.Tensor]:
        cfg = EngineConfig(model=ModelConfig(model=str(path), quantization="fp8"),
                           cache=CacheConfig(block_size=4, num_blocks=32, kv_cache_dtype="fp8"),
                           device=DeviceConfig(kernels=kernels))  # fmt: skip
        return greedy_logits(ModelRunner(cfg, SINGLE), [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 88], steps=1)

    for got, want in zip(logits("triton"), logits(W8A8Reference.registered())):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
