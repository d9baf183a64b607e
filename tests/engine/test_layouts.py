"""No parallel layout or dispatch backend may change the output: greedy tokens identical and
per-token logprobs (log-softmax of the logits) within 1e-4 of the single-rank engine, for every
architecture. Ranks are real processes on gloo; every test is bounded by a timeout."""
from __future__ import annotations

import random

import pytest

from moeserve import LLM, SamplingParams
from tiny_models import make_any_checkpoint, make_checkpoint

PARAMS = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=3)
ARCHS = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "gpt_oss-mxfp4", "glm4_moe",
         "minimax_m2"]
# (ep, tp): every architecture at the richest layout, the two ends on the cheapest models
LAYOUTS = {arch: [(4, 2), (1, 2)] for arch in ARCHS}
# gpt-oss as released (MXFP4 experts): --tp 2 cuts its down projection inside a 32-column group.
# GLM-4.5 at the richest layout only; MiniMax-M2 at --tp 2 (its q/k norm spans the split heads)
LAYOUTS["glm4_moe"] = [(4, 2)]
LAYOUTS["minimax_m2"] = [(1, 2)]
# pure EP, pure TP, attention DP over TP groups, and one TP group over every rank (tp 4 > Mixtral's 2 KV
# heads: replicated; MLA's heads split 4 ways); ep == tp == 2 adds nothing the last one misses
LAYOUTS["mixtral"] = [(2, 1), (1, 2), (4, 2), (4, 4)]
LAYOUTS["deepseek_v3"] = [(2, 1), (4, 2), (4, 4)]


def _run(path, prompts, **kw):
    llm = LLM(model=str(path), block_size=4, max_num_batched_tokens=32, **kw)
    try:
        return llm.generate(prompts, PARAMS)
    finally:
        llm.shutdown()


@pytest.fixture(scope="module", params=ARCHS)
def reference(request, tmp_path_factory):
    hf, path = make_any_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    rng = random.Random(1)
    prompts = [[rng.randrange(3, hf.config.vocab_size) for _ in range(n)] for n in (2, 7, 13, 21, 30)]
    return request.param, path, prompts, _run(path, prompts)


def _assert_same(got, want):
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        for (lp_g, _), (lp_w, _) in zip(g.logprobs, w.logprobs):
            assert abs(lp_g - lp_w) <= 1e-4 * max(1.0, abs(lp_w))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_layouts_do_not_change_outputs(reference):
    arch, path, prompts, want = reference
    for ep, tp in LAYOUTS[arch]:
        _assert_same(_run(path, prompts, ep=ep, tp=tp), want)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["a2a", "agrs", "a2a_ll"])
def test_dispatch_backends_do_not_change_outputs(backend, tmp_path):
    _, path = make_checkpoint("qwen3_moe", tmp_path)
    rng = random.Random(2)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (3, 11, 19)]
    _assert_same(_run(path, prompts, ep=4, tp=1, dispatch=backend), _run(path, prompts))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("ep,tp", [(2, 1), (1, 2)])
def test_expert_threads_inside_ranks_do_not_change_outputs(ep, tp, tmp_path):
    # each rank forks its own expert chunks and column blocks (2 ranks on 2 cores leave the default at 1)
    _, path = make_checkpoint("mixtral", tmp_path)
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 96) for _ in range(n)] for n in (4, 9, 23)]
    want = _run(path, prompts, expert_threads=1)
    _assert_same(_run(path, prompts, ep=ep, tp=tp, expert_threads=2), want)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_unseeded_samples_differ_across_attention_groups(tmp_path):
    """Two attention groups must not share one noise stream: identical prompts sampled without a seed
    at ep=2 (two groups) came back as identical pairs before each group's sampler got its own seed."""
    _, path = make_checkpoint("mixtral", tmp_path)
    llm = LLM(model=str(path), ep=2, tp=1)
    try:
        outs = llm.generate([[5, 6, 7]] * 4, SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True))
    finally:
        llm.shutdown()
    samples = [tuple(o.token_ids) for o in outs]
    assert len(set(samples)) == 4, samples


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_engine_that_failed_to_start_leaves_the_process_able_to_start_another(tmp_path):
    # the failed start must leave torch.distributed's default group torn down, not initialized
    _, bad = make_checkpoint("mixtral", tmp_path / "bad")
    # every rank fails to load a tensor the start-up checks (config.json sizes) do not look at
    from safetensors.torch import load_file, save_file

    for shard in bad.glob("*.safetensors"):
        tensors = load_file(shard)
        tensors.pop("model.layers.1.post_attention_layernorm.weight", None)
        save_file(tensors, shard, metadata={"format": "pt"})
    with pytest.raises(Exception, match="has no tensor 'model.layers.1.post_attention_layernorm"):
        LLM(model=str(bad), ep=4)
    _, good = make_checkpoint("mixtral", tmp_path / "good")
    prompts = [[5, 6, 7], [9, 10]]
    _assert_same(_run(good, prompts, ep=2), _run(good, prompts))
