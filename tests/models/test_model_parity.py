"""Each architecture served through ModelRunner matches transformers' logits (fp32, rel err <= 1e-4):
batched prefill, chunked prefill, decode, mixed steps, and both on-disk expert layouts."""

from __future__ import annotations

import pytest
import torch

from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine.model_runner import ModelRunner
from moeserve.parallel_state import SINGLE
from tiny_models import ARCHITECTURES, arch_params, make_hf_model, save_checkpoint

BLOCK = 4
TOL = 1e-4


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def hf_logits(model, tokens: list[int]) -> torch.Tensor:
    """[len(tokens), V] logits of a full-sequence forward."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def runner_for(path, num_blocks: int = 64) -> ModelRunner:
    cfg = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=BLOCK, num_blocks=num_blocks))
    return ModelRunner(cfg, SINGLE)


class Seqs:
    """Hands out disjoint block tables, like a block manager would."""

    def __init__(self):
        self.next_block = 1  # block 0 stays unused so stray writes to slot 0 would show up
        self.tables: dict[str, list[int]] = {}

    def chunk(self, rid: str, tokens: list[int], start: int, end: int, sample: bool = True) -> ScheduledSeq:
        table = self.tables.setdefault(rid, [])
        while len(table) * BLOCK < end:
            table.append(self.next_block)
            self.next_block += 1
        return ScheduledSeq(rid, tokens[start:end], start, list(table), sample)


@pytest.fixture(scope="module", params=arch_params(ARCHITECTURES))
def arch_setup(request, tmp_path_factory):
    arch = request.param
    model = make_hf_model(arch)
    path = save_checkpoint(model, tmp_path_factory.mktemp(arch))
    return arch, model, path


def test_prefill_batch_matches_transformers(arch_setup):
    arch, model, path = arch_setup
    runner = runner_for(path)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 96, (n,), generator=gen).tolist() for n in (5, 9, 17)]
    seqs = Seqs()
    batch = GroupBatch(0, [seqs.chunk(f"r{i}", p, 0, len(p)) for i, p in enumerate(prompts)])
    logits = runner.execute(batch)
    assert logits.shape == (3, 96) and logits.dtype == torch.float32
    for i, p in enumerate(prompts):
        assert rel_err(logits[i], hf_logits(model, p)[-1]) <= TOL, (arch, i)


def test_chunked_prefill_and_decode_in_mixed_steps(arch_setup):
    arch, model, path = arch_setup
    runner = runner_for(path)
    gen = torch.Generator().manual_seed(2)
    # A: 11-token prompt in chunks 4/4/3 then decodes; B: 6-token prompt then decodes; C joins late.
    full = {rid: torch.randint(0, 96, (n,), generator=gen).tolist() for rid, n in (("A", 14), ("B", 9), ("C", 8))}
    steps = [
        [("A", 0, 4), ("B", 0, 6)],
        [("A", 4, 8), ("B", 6, 7)],
        [("A", 8, 11), ("B", 7, 8), ("C", 0, 7)],
        [("A", 11, 12), ("B", 8, 9), ("C", 7, 8)],
        [("A", 12, 13)],
        [("A", 13, 14)],
    ]
    expected = {rid: hf_logits(model, toks) for rid, toks in full.items()}
    seqs = Seqs()
    for step in steps:
        batch = GroupBatch(0, [seqs.chunk(rid, full[rid], s, e) for rid, s, e in step])
        logits = runner.execute(batch)
        for row, (rid, _, e) in enumerate(step):
            assert rel_err(logits[row], expected[rid][e - 1]) <= TOL, (arch, rid, e)


def test_only_sampled_rows_and_empty_batch(arch_setup):
    _, model, path = arch_setup
    runner = runner_for(path)
    toks = list(range(3, 12))
    seqs = Seqs()
    part = runner.execute(GroupBatch(0, [seqs.chunk("x", toks, 0, 5, sample=False)]))
    assert part.shape == (0, 96)
    assert runner.execute(GroupBatch(0, [])).shape == (0, 96)
    last = runner.execute(GroupBatch(0, [seqs.chunk("x", toks, 5, 9)]))
    assert rel_err(last[0], hf_logits(model, toks)[-1]) <= TOL


@pytest.mark.parametrize("layout", ["fused", "fused_t"])
def test_fused_expert_layouts_load(arch_setup, layout, tmp_path):
    arch, model, _ = arch_setup
    path = save_checkpoint(model, tmp_path / layout, layout)
    runner = runner_for(path, num_blocks=8)
    toks = [7, 3, 50, 21, 9, 11]
    logits = runner.execute(GroupBatch(0, [Seqs().chunk("x", toks, 0, len(toks))]))
    assert rel_err(logits[0], hf_logits(model, toks)[-1]) <= TOL


FLAG_VARIANTS = [
    ("qwen3_moe", dict(attention_bias=True, decoder_sparse_step=2, num_hidden_layers=4, norm_topk_prob=False)),
    ("qwen2_moe", dict(use_sliding_window=True, sliding_window=4, max_window_layers=2, norm_topk_prob=True)),
    ("olmoe", dict(norm_topk_prob=True, attention_bias=True, clip_qkv=None)),
    ("mixtral", dict(head_dim=24, rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0})),
    # shared_expert_intermediate_size 0: transformers writes zero-size shared-expert tensors and a gate
    ("qwen2_moe", dict(shared_expert_intermediate_size=0)),
    # YaRN outside DeepSeek: Qwen3-MoE's long-context setting, and Mixtral with other betas
    ("qwen3_moe", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                        "original_max_position_embeddings": 64})),
    ("mixtral", dict(head_dim=16, rope_parameters={"rope_type": "yarn", "rope_theta": 1000.0, "factor": 8.0,
                                                   "beta_fast": 16, "original_max_position_embeddings": 32})),
    # gpt-oss: odd KV heads (6 over 3), a window of 3 on both layers (shorter than every chunk), 32
    # experts top-4, a SwiGLU clamp that bites; then 5 query heads on one KV head, the window on layer 1
    ("gpt_oss", dict(num_attention_heads=6, num_key_value_heads=3, sliding_window=3, num_local_experts=32,
                     num_experts_per_tok=4, swiglu_limit=0.3, layer_types=["sliding_attention"] * 2)),
    ("gpt_oss", dict(num_attention_heads=5, num_key_value_heads=1, sliding_window=2, num_hidden_layers=3,
                     layer_types=["full_attention", "sliding_attention", "full_attention"])),
    # GLM-4.5: 6 heads over 3 KV heads, a quarter of each head rotated, 32 experts in 4 groups (top-6 from
    # 2 groups), 2 dense layers, 2 shared experts, no qk-norm or bias, no weight normalisation
    ("glm4_moe", dict(num_attention_heads=6, num_key_value_heads=3, head_dim=16, partial_rotary_factor=0.25,
                      n_routed_experts=32, num_experts_per_tok=6, n_group=4, topk_group=2, first_k_dense_replace=2,
                      num_hidden_layers=4, n_shared_experts=2, use_qk_norm=False, attention_bias=False,
                      norm_topk_prob=False)),
    # MiniMax-M2: 6 heads over 2 KV heads, 4 of 16 dims rotated, 32 experts top-6
    ("minimax_m2", dict(num_attention_heads=6, num_key_value_heads=2, rotary_dim=4, num_local_experts=32,
                        num_experts_per_tok=6)),
]


@pytest.mark.parametrize("arch,flags", FLAG_VARIANTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(FLAG_VARIANTS)])
def test_config_flag_variants(arch, flags, tmp_path):
    model = make_hf_model(arch, **flags)
    runner = runner_for(save_checkpoint(model, tmp_path), num_blocks=16)
    toks = [4, 80, 13, 13, 2, 57, 31, 9, 66, 1, 23]
    expected = hf_logits(model, toks)
    seqs = Seqs()
    for start, end in [(0, 7), (7, 9), (9, 10), (10, 11)]:
        logits = runner.execute(GroupBatch(0, [seqs.chunk("x", toks, start, end)]))
        assert rel_err(logits[0], expected[end - 1]) <= TOL, (arch, end)
