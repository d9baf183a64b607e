"""agrs's two collectives under the names each torch release has: torch 2.13's all_gather_single /
reduce_scatter_single, or, before it (torch 2.11 on the GPU images), all_gather_into_tensor /
reduce_scatter_tensor."""
from __future__ import annotations

import torch
import torch.distributed as dist

from moeserve.dispatch import agrs


def test_agrs_falls_back_to_the_older_collective_names(monkeypatch):
    calls = []
    names = (("all_gather_single", "all_gather_into_tensor"), ("reduce_scatter_single", "reduce_scatter_tensor"))
    for new, old in names:
        monkeypatch.delattr(dist, new, raising=False)
        monkeypatch.setattr(dist, old, lambda out, inp, group=None, name=old: calls.append(name))
    agrs._all_gather_single(torch.empty(4), torch.empty(2), group=None)
    agrs._reduce_scatter_single(torch.empty(2), torch.empty(4), group=None)
    assert calls == ["all_gather_into_tensor", "reduce_scatter_tensor"]


def test_agrs_calls_the_newer_names_where_torch_has_them(monkeypatch):
    calls = []
    for new in ("all_gather_single", "reduce_scatter_single"):
        monkeypatch.setattr(dist, new, lambda out, inp, group=None, name=new: calls.append(name), raising=False)
    agrs._all_gather_single(torch.empty(4), torch.empty(2), group=None)
    agrs._reduce_scatter_single(torch.empty(2), torch.empty(4), group=None)
    assert calls == ["all_gather_single", "reduce_scatter_single"]
