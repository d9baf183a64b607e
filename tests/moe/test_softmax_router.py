from __future__ import annotations

import pytest
import torch

from moeserve.moe.router import SoftmaxTopKRouter, softmax_topk_reference


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_topk_matches_reference(renormalize, dtype):
    torch.manual_seed(0)
    logits = torch.randn(17, 8).to(dtype)
    ids, w = SoftmaxTopKRouter(3, renormalize)(logits)
    ref_ids, ref_w = softmax_topk_reference(logits, 3, renormalize)
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    assert torch.equal(ids, ref_ids)
    assert torch.allclose(w, ref_w, atol=1e-6)
    if renormalize:
        assert torch.allclose(w.sum(-1), torch.ones(17))


def test_zero_tokens():
    ids, w = SoftmaxTopKRouter(2, True)(torch.zeros(0, 8))
    assert ids.shape == (0, 2) and w.shape == (0, 2)
