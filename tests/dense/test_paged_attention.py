"""The batched paged-attention path vs a per-sequence, per-head reference, over mixed steps."""

from __future__ import annotations

import pytest
import torch

from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.dense.attention import write_kv
from moeserve.kernels.reference.attention import paged_attention, paged_attention_reference
from moeserve.dense.attention_metadata import build_attention_metadata

BS, NB, HQ, HK, D = 4, 16, 4, 2, 8


def run_step(batch, k_cache, v_cache, window, sinks=None):
    meta = build_attention_metadata(batch, BS)
    N = meta.num_tokens
    q, k, v = torch.randn(N, HQ, D), torch.randn(N, HK, D), torch.randn(N, HK, D)
    write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    out = paged_attention(q, k_cache, v_cache, meta, D**-0.5, window, sinks)
    ref = paged_attention_reference(q, k_cache, v_cache, meta, D**-0.5, window, sinks)
    return out, ref


def test_reference_sinks_are_gpt_oss_eager_attention():
    """The per-head reference with sinks is transformers' gpt-oss eager attention (sink logit
    concatenated to each row's scores, softmax, sink column dropped) on a dense causal context."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    torch.manual_seed(3)
    L, window, sinks = 9, 4, torch.tensor([1.5, -0.5, 3.0, 0.0])
    k_cache, v_cache = torch.zeros(NB, BS, HK, D), torch.zeros(NB, BS, HK, D)
    meta = build_attention_metadata(GroupBatch(0, [ScheduledSeq("a", list(range(L)), 0, [5, 2, 9], True)]), BS)
    q, k, v = torch.randn(L, HQ, D), torch.randn(L, HK, D), torch.randn(L, HK, D)
    write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
    pos = torch.arange(L)
    visible = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    mask = torch.zeros(L, L).masked_fill(~visible, float("-inf"))[None, None]
    module = torch.nn.Module()
    module.num_key_value_groups, module.sinks, module.training = HQ // HK, sinks, False
    want, _ = eager_attention_forward(module, q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                      v.transpose(0, 1)[None], mask, D**-0.5)
    got = paged_attention_reference(q, k_cache, v_cache, meta, D**-0.5, window, sinks)
    torch.testing.assert_close(got, want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window,sinks", [(None, None), (3, None), (None, "sinks"), (3, "sinks")])
def test_mixed_prefill_chunk_and_decode_steps(window, sinks):
    sinks = torch.tensor([2.0, -1.0, 0.5, 4.0]) if sinks else None
    torch.manual_seed(0)
    k_cache, v_cache = torch.zeros(NB, BS, HK, D), torch.zeros(NB, BS, HK, D)
    tables = {"a": [3, 7, 1], "b": [2, 9], "c": [5, 4, 6, 8]}
    steps = [
        [("a", 0, 6), ("b", 0, 3)],  # two prefills
        [("a", 6, 7), ("b", 3, 6), ("c", 0, 2)],  # decode, prefill chunk, new prefill
        [("a", 7, 8), ("b", 6, 7), ("c", 2, 10)],
        [("a", 8, 9), ("b", 7, 8), ("c", 10, 11)],  # decode only: the Q == 1 fast path
    ]
    for step in steps:
        seqs = [ScheduledSeq(r, list(range(e - s)), s, tables[r], True) for r, s, e in step]
        out, ref = run_step(GroupBatch(0, seqs), k_cache, v_cache, window, sinks)
        assert out.shape == ref.shape
        assert torch.allclose(out, ref, atol=1e-5)


def test_cache_write_lands_in_block_table_slots():
    k_cache, v_cache = torch.zeros(NB, BS, HK, D), torch.zeros(NB, BS, HK, D)
    meta = build_attention_metadata(GroupBatch(0, [ScheduledSeq("a", [1] * 5, 0, [6, 2], True)]), BS)
    k = torch.arange(5.0)[:, None, None].expand(5, HK, D).contiguous()
    write_kv(k_cache, v_cache, k, k, meta.slot_mapping)
    assert k_cache[6, :, 0, 0].tolist() == [0, 1, 2, 3]
    assert k_cache[2, 0, 0, 0] == 4 and k_cache[2, 1:].abs().sum() == 0


def test_decode_groups_split_short_and_long_contexts():
    """A decode step whose contexts differ a lot attends in two length groups; same result."""
    from moeserve.dense.attention_metadata import split_by_blocks
    import numpy as np

    assert [(i.tolist(), c) for i, c in split_by_blocks(np.array([1, 3, 1, 1]))] == [([0, 2, 3], 1), ([1], 3)]
    assert len(split_by_blocks(np.array([3, 2, 3]))) == 1  # saves < 25%: one group
    torch.manual_seed(0)
    k_cache, v_cache = torch.zeros(NB, BS, HK, D), torch.zeros(NB, BS, HK, D)
    tables = {"a": [3], "b": [2, 9, 10], "c": [5], "d": [4]}
    prefill = [ScheduledSeq(r, list(range(n)), 0, tables[r], True) for r, n in (("a", 2), ("b", 11), ("c", 1), ("d", 3))]
    run_step(GroupBatch(0, prefill), k_cache, v_cache, None)
    for window, sinks in ((None, None), (3, None), (3, torch.tensor([2.0, -1.0, 0.5, 4.0]))):
        decode = [ScheduledSeq(r, [7], n, tables[r], True) for r, n in (("a", 2), ("b", 11), ("c", 1), ("d", 3))]
        batch = GroupBatch(0, decode)
        assert len(build_attention_metadata(batch, BS).decode_groups) == 2
        out, ref = run_step(batch, k_cache, v_cache, window, sinks)
        assert torch.allclose(out, ref, atol=1e-5)


def test_query_heads_must_be_a_multiple_of_kv_heads():
    from moeserve.dense.attention import AttentionSpec

    with pytest.raises(ValueError, match="not a multiple of num_key_value_heads"):
        AttentionSpec(hidden_size=96, num_heads=6, num_kv_heads=4, head_dim=16)
    AttentionSpec(hidden_size=96, num_heads=6, num_kv_heads=3, head_dim=16)
