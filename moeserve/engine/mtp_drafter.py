"""The MTP layer as the draft model: after each step's forward and sampling, propose k drafts per
sampled sequence for its next step (models/mtp.py has the layer; core/spec_scheduling.py the rest).

Shape legend: N tokens of the step, S sampled sequences of this group, H hidden, V vocabulary.

One step, on every rank of the world:
  1. first pass, over all N tokens with the step's own attention metadata: position i gets the
     token after it (the next token of the chunk, `ScheduledSeq.next_token_id` past its end) and the
     main model's hidden state h_i. A sampled sequence's last accepted position instead gets the token
     just sampled, and its output there gives draft 1. Positions past it (rejected drafts) write KV
     past the sequence's computed tokens, which the next step's first pass overwrites before anything
     reads it. So the MTP cache always holds, below num_computed_tokens, what a pass over the
     accepted sequence would write.
  2. chain, k - 1 decode steps of one token per sampled sequence: position P0 + j gets (the layer's
     output at P0 + j - 1, draft j) and gives draft j + 1 (P0 the last accepted position). A sequence
     whose block table ends first stops early (fewer drafts).
The sampler runs on each group's TP-rank 0; the other TP ranks of the group get its outcome (drafts
accepted and the new token, per sampled sequence) by one broadcast. Drafts are each row's argmax of
logits gathered over the vocabulary on every TP rank, so they agree without another collective.
Every rank calls the layer 1 + (k - 1) times when any group sampled (the plan says so on every rank),
with zero tokens where its group has nothing: its MoE layer's dispatch spans the world.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from moeserve.core.step_plan import GroupBatch, ScheduledSeq, StepPlan
from moeserve.dense.attention_metadata import AttentionMetadata, build_attention_metadata
from moeserve.engine.model_runner import ModelRunner, empty_metadata
from moeserve.parallel_state import ParallelContext


class MtpDrafter:
    """Mutates only the MTP layer's KV cache (the runner's last cache layer)."""

    def __init__(self, runner: ModelRunner, ctx: ParallelContext, num_drafts: int):
        assert runner.model.mtp is not None and num_drafts >= 1
        self.runner, self.ctx, self.k = runner, ctx, num_drafts

    @staticmethod
    def chain_runs(plan: StepPlan) -> bool:
        """Whether this step drafts at all: some group sampled (the same answer on every rank)."""
        return any(s.sample for g in plan.groups for s in g.seqs)

    @torch.inference_mode()
    def propose(self, plan: StepPlan, batch: GroupBatch, hidden: torch.Tensor, meta: AttentionMetadata,
                outcomes: list[tuple[int, int]] | None) -> dict[str, list[int]]:
        """hidden [N, H] and meta: this group's step. outcomes (TP-rank 0, None elsewhere): per sampled
        sequence in batch order, (drafts accepted, the token sampled after them). -> drafts per request."""
        model = self.runner.model
        sampled = [s for s in batch.seqs if s.sample]
        outcomes = self._share(outcomes, len(sampled))
        ids, rows, last = self._first_pass_inputs(batch, outcomes)
        g = model.mtp_forward(torch.tensor(ids, dtype=torch.int64, device=hidden.device), hidden, meta,
                              self.runner.kv_caches, plan.max_group_tokens)
        if not self.chain_runs(plan):
            return {}
        g = g[torch.tensor(rows, dtype=torch.int64, device=hidden.device)]  # [S, H]
        drafts = [[t] for t in model.mtp_logits(g).argmax(dim=-1).tolist()] if rows else []
        width = max(sum(s.sample for s in grp.seqs) for grp in plan.groups)  # the chain's largest group
        alive = list(range(len(sampled)))
        for j in range(1, self.k):
            # position last[b] + j gets (output at last[b] + j - 1, draft j); stop where the table ends
            alive = [b for b in alive if last[b] + j < len(sampled[b].block_table) * self.runner.block_size]
            chain = GroupBatch(batch.group, [ScheduledSeq(sampled[b].request_id, [drafts[b][-1]], last[b] + j,
                                                          sampled[b].block_table, True) for b in alive])
            step_meta = self._metadata(chain)
            token_ids = torch.tensor([drafts[b][-1] for b in alive], dtype=torch.int64, device=hidden.device)
            where = torch.tensor(alive, dtype=torch.int64, device=hidden.device)
            out = model.mtp_forward(token_ids, g[where], step_meta, self.runner.kv_caches, width)
            if alive:  # the same on every TP rank of the group (the outcomes are shared)
                g = g.index_copy(0, where, out)
                for b, t in zip(alive, model.mtp_logits(out).argmax(dim=-1).tolist()):
                    drafts[b].append(t)
        return {s.request_id: d for s, d in zip(sampled, drafts)}

    def _share(self, outcomes: list[tuple[int, int]] | None, count: int) -> list[tuple[int, int]]:
        """The sampler's outcomes from the group's TP-rank 0 to its other ranks (one broadcast)."""
        if self.ctx.tp_size == 1:
            assert outcomes is not None
            return outcomes
        t = torch.tensor(outcomes if outcomes is not None else [[0, 0]] * count, dtype=torch.int64,
                         device=self.runner.device).view(count, 2)
        if count:
            dist.broadcast(t, group=self.ctx.tp_group, group_src=0)
        return [tuple(row) for row in t.tolist()]

    @staticmethod
    def _first_pass_inputs(batch: GroupBatch, outcomes: list[tuple[int, int]]
                           ) -> tuple[list[int], list[int], list[int]]:
        """(token after each of the step's N positions, the row of each sampled sequence's last accepted
        position, that position)."""
        ids: list[int] = []
        rows: list[int] = []
        last: list[int] = []
        b = 0
        for s in batch.seqs:
            n = len(s.token_ids)
            ahead = s.token_ids[1:] + [s.next_token_id if s.next_token_id >= 0 else 0]
            if s.sample:
                accepted, token = outcomes[b]
                b += 1
                local = n - 1 - s.num_drafts + accepted
                ahead[local] = token
                rows.append(len(ids) + local)
                last.append(s.start_pos + local)
            ids.extend(ahead)
        return ids, rows, last

    def _metadata(self, batch: GroupBatch) -> AttentionMetadata:
        if not batch.seqs:
            return empty_metadata(self.runner.block_size, self.runner.device)
        return build_attention_metadata(batch, self.runner.block_size).to(self.runner.device)
