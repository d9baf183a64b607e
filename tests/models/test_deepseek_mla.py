"""MLA attention (both paths) and YaRN rope against transformers' DeepseekV2/V3 attention modules."""

from __future__ import annotations

import pytest
import torch

from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention_metadata import build_attention_metadata, empty_metadata
from moeserve.dense.mla import MlaDims, MultiHeadLatentAttention, seq_slices
from moeserve.dense.yarn import MlaRotaryEmbedding, inv_freq_and_attention_factor, rope_config_from_hf, softmax_scale
from moeserve.parallel_state import SINGLE
from test_deepseek_model import YARN


class DictReader:
    """A checkpoint reader over an in-memory state dict (the ShardReader protocol)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def has(self, name: str) -> bool:
        return name in self.tensors

    def read(self, name, shard_dim=None, start=0, end=None):
        t = self.tensors[name]
        return t if shard_dim is None else t.narrow(shard_dim, start, (end or t.shape[shard_dim]) - start)


def _hf_config(version: int, q_lora_rank, rope_scaling, rope_interleave=True):
    from transformers import DeepseekV2Config, DeepseekV3Config

    kw = dict(
        hidden_size=40,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=12,
        qk_nope_head_dim=10,
        qk_rope_head_dim=6,
        v_head_dim=7,
        max_position_embeddings=128,
        rope_scaling=rope_scaling,
    )
    if version == 3:
        return DeepseekV3Config(rope_interleave=rope_interleave, **kw)
    return DeepseekV2Config(**kw)


def _hf_attention(cfg, version):
    if version == 3:
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

        attn, rope = m.DeepseekV3Attention(cfg, 0), m.DeepseekV3RotaryEmbedding(cfg)
    else:
        from transformers.models.deepseek_v2 import modeling_deepseek_v2 as m

        attn, rope = m.DeepseekV2Attention(cfg, 0), m.DeepseekV2RotaryEmbedding(cfg)
    for p in attn.parameters():
        p.data.normal_(0, 0.15)
    for name, p in attn.named_parameters():
        if "layernorm" in name:
            p.data.uniform_(0.5, 1.5)
    return attn.eval(), rope


def _hf_forward(attn, rope, x):
    """x [T, H] one sequence -> [T, H] causal attention output."""
    T = x.shape[0]
    pos = torch.arange(T)[None]
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
    out, _ = attn(x[None], position_embeddings=rope(x[None], pos), attention_mask=mask)
    return out[0]


def _ours(cfg, version, attn, path):
    dims = MlaDims.from_hf(cfg)
    rope_cfg = rope_config_from_hf(cfg, cfg.qk_rope_head_dim)
    layout = "interleaved" if version == 2 or cfg.rope_interleave else "half"
    mla = MultiHeadLatentAttention(
        dims,
        MlaRotaryEmbedding(rope_cfg, layout),
        softmax_scale(rope_cfg, dims.qk_head_dim),
        SINGLE,
        torch.float32,
        path=path,
    )
    mla.load(DictReader({f"attn.{k}": v for k, v in attn.state_dict().items()}), "attn")
    return mla


@pytest.mark.parametrize("rope_scaling", [None, YARN])
def test_yarn_frequencies_match_transformers(rope_scaling):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding, yarn_apply_mscale

    cfg = _hf_config(3, 16, rope_scaling)
    hf = DeepseekV3RotaryEmbedding(cfg)
    rope_cfg = rope_config_from_hf(cfg, cfg.qk_rope_head_dim)
    inv_freq, factor = inv_freq_and_attention_factor(rope_cfg)
    torch.testing.assert_close(inv_freq, hf.inv_freq, rtol=0, atol=0)
    assert factor == pytest.approx(hf.attention_scaling, rel=1e-12)
    expected = yarn_apply_mscale(cfg.rope_parameters, cfg.qk_head_dim**-0.5)
    assert softmax_scale(rope_cfg, cfg.qk_head_dim) == pytest.approx(expected, rel=1e-12)
    if rope_scaling:
        assert factor != 1.0 and softmax_scale(rope_cfg, cfg.qk_head_dim) != cfg.qk_head_dim**-0.5


@pytest.mark.parametrize("path", ["expand", "absorb"])
@pytest.mark.parametrize(
    "version,q_lora_rank,rope_scaling,interleave",
    [(2, None, None, True), (2, 16, YARN, True), (3, 16, YARN, True), (3, None, YARN, False)],
)
def test_mla_matches_transformers_chunked(path, version, q_lora_rank, rope_scaling, interleave):
    torch.manual_seed(7)
    cfg = _hf_config(version, q_lora_rank, rope_scaling, interleave)
    attn, rope = _hf_attention(cfg, version)
    mla = _ours(cfg, version, attn, path)
    lens = [9, 3, 14]
    xs = [torch.randn(n, cfg.hidden_size) for n in lens]
    with torch.no_grad():
        want = [_hf_forward(attn, rope, x) for x in xs]
        block_size, blocks_per_seq = 4, 4
        cache = torch.zeros(len(lens) * blocks_per_seq, block_size, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
        tables = [list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq))[::-1] for i in range(len(lens))]
        # step 1: first chunks (5, all 3, 6 tokens); step 2: the rest, one sequence decoding
        splits = [5, 3, 6]
        got = [[] for _ in lens]
        for step in range(2):
            seqs, owners = [], []
            for i, (x, s) in enumerate(zip(xs, splits)):
                lo, hi = (0, s) if step == 0 else (s, lens[i])
                if hi > lo:
                    seqs.append(ScheduledSeq(str(i), [0] * (hi - lo), lo, tables[i], True))
                    owners.append((i, x[lo:hi]))
            meta = build_attention_metadata(GroupBatch(0, seqs), block_size)
            out = mla(torch.cat([x for _, x in owners]), meta, [cache])
            for (i, _), piece in zip(owners, out.split([len(x) for _, x in owners])):
                got[i].append(piece)
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.cat(g), w, rtol=1e-4, atol=1e-5)


def test_paths_agree_on_mixed_batch():
    torch.manual_seed(3)
    cfg = _hf_config(3, 16, YARN)
    attn, _ = _hf_attention(cfg, 3)
    expand, absorb, auto = (_ours(cfg, 3, attn, p) for p in ("expand", "absorb", "auto"))
    cache = torch.randn(12, 4, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    seqs = [
        ScheduledSeq("a", [0], 10, [0, 1, 2], True),
        ScheduledSeq("p", [0] * 6, 3, [7, 8, 9], True),
        ScheduledSeq("b", [0], 5, [5, 3], True),
    ]
    meta = build_attention_metadata(GroupBatch(0, seqs), 4)
    x = torch.randn(8, cfg.hidden_size)
    with torch.no_grad():
        a = expand(x, meta, [cache.clone()])
        b = absorb(x, meta, [cache.clone()])
        c = auto(x, meta, [cache.clone()])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)
    decode, chunk = seq_slices(meta)  # one new token a sequence; six (the decode kernel's shape too, as a verify)
    assert decode.tokens.tolist() == [0, 7] and chunk.tokens.tolist() == list(range(1, 7))
    assert decode.decode and chunk.decode and chunk.query_index.shape == (1, 6)
    assert auto._use_absorb(decode)  # one new token per sequence: decode is cheaper absorbed


def test_verify_steps_attend_through_the_decode_kernel_with_several_queries():
    """Speculative verify steps (k + 1 new tokens a sequence past a long context, k differing between
    sequences) go through kernels.mla_decode with [b, Q, h, R] queries, one call per Q, and give what
    the expanded form gives; a long prefill chunk does not."""
    torch.manual_seed(4)
    cfg = _hf_config(3, 16, YARN)
    attn, _ = _hf_attention(cfg, 3)
    expand, auto = _ours(cfg, 3, attn, "expand"), _ours(cfg, 3, attn, "auto")
    calls = []
    decode = auto.kernels.mla_decode
    auto.kernels.mla_decode = lambda q, *a: calls.append(tuple(q.shape[:2]) if q.dim() == 4 else (q.shape[0], 1)) or decode(q, *a)
    cache = torch.randn(40, 4, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    seqs = [
        ScheduledSeq("v3", [0] * 3, 21, list(range(0, 7)), True, num_drafts=2),
        ScheduledSeq("d", [0], 9, [8, 9, 10], True),
        ScheduledSeq("v4", [0] * 4, 26, list(range(11, 19)), True, num_drafts=3),
        ScheduledSeq("w3", [0] * 3, 17, list(range(19, 24)), True, num_drafts=2),
        ScheduledSeq("p", [0] * 20, 0, list(range(24, 29)), True),
    ]
    meta = build_attention_metadata(GroupBatch(0, seqs), 4)
    x = torch.randn(31, cfg.hidden_size)
    with torch.no_grad():
        want = expand(x, meta, [cache.clone()])
        got = auto(x, meta, [cache.clone()])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert sorted(calls) == [(1, 1), (1, 4), (2, 3)]  # the decode, the verify of 3 drafts, the two of 2


def test_empty_batch_returns_no_rows():
    cfg = _hf_config(3, 16, None)
    attn, _ = _hf_attention(cfg, 3)
    mla = _ours(cfg, 3, attn, "auto")
    z = torch.zeros(0, dtype=torch.int64)
    meta = empty_metadata(4)
    cache = torch.zeros(2, 4, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    assert mla(torch.zeros(0, cfg.hidden_size), meta, [cache]).shape == (0, cfg.hidden_size)
