"""A model-free stand-in for the engine loop, for scheduler tests.

`FakeEngine` schedules, "runs" the plan by writing each token id into a fake KV store at the slots
the block tables give (so a wrong block table or a prefix hit on the wrong block is caught as wrong
context), answers with deterministic fake tokens, and finishes requests at max_output_tokens like
the engine would. `ahead=True` runs it as the engine with async scheduling does: each step schedules
and "runs" plan N+1 (its PENDING_TOKEN placeholders filled with the token the fake device sampled)
before step N's update.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeserve.config import CacheConfig, SchedulerConfig
from moeserve.core.request import Request
from moeserve.core.scheduler import Scheduler
from moeserve.core.step_plan import PENDING_TOKEN, SampledToken, StepPlan, StepResult
from moeserve.sampling_params import SamplingParams


def make_scheduler(
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 8,
    num_groups: int = 1,
    max_model_len: int = 4096,
    max_queued_requests: int = 1000,
    prefix_caching: bool = True,
    kv_max_pinned_blocks: int = 0,
    ahead: bool = False,
) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_queued_requests, async_scheduling=ahead),
        CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching),
        num_groups=num_groups,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
        kv_max_pinned_blocks=kv_max_pinned_blocks,
    )


def make_request(rid: str, prompt: list[int], max_tokens: int = 4) -> Request:
    return Request(request_id=rid, prompt_token_ids=prompt, sampling=SamplingParams(max_tokens=max_tokens))


def fake_token(request_id: str, position: int) -> int:
    return (sum(map(ord, request_id)) * 31 + position * 7) % 997


@dataclass
class FakeEngine:
    scheduler: Scheduler
    kv: dict[tuple[int, int], int] = field(default_factory=dict)  # (group, slot) -> token id written there
    plans: list[StepPlan] = field(default_factory=list)
    finished: dict[str, Request] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    held: tuple[StepPlan, list[SampledToken]] | None = None  # ahead: the step run, not yet updated

    @property
    def ahead(self) -> bool:
        return self.scheduler.async_scheduling

    def step(self) -> StepPlan:
        s = self.scheduler
        plan = s.schedule()
        self.plans.append(plan)
        for req, message in s.take_failed():
            self.failed[req.request_id] = message
            self.finished[req.request_id] = req
        sampled = []
        for batch in plan.groups:
            assert batch.num_tokens <= s.cfg.max_num_batched_tokens
            assert len(batch.seqs) <= s.cfg.max_num_seqs
            for seq in batch.seqs:
                self._run_seq(batch.group, seq)
                if seq.sample:
                    sampled.append(SampledToken(seq.request_id, fake_token(seq.request_id, seq.start_pos + seq.num_tokens)))
        if self.ahead:
            previous, self.held = self.held, (plan, sampled)
            if previous is not None:
                self._update(*previous)
        else:
            self._update(plan, sampled)
        s.check_invariants()
        return plan

    def drain(self) -> None:
        """ahead: update the step run last."""
        if self.held is not None:
            previous, self.held = self.held, None
            self._update(*previous)

    def _update(self, plan: StepPlan, sampled: list[SampledToken]) -> None:
        s = self.scheduler
        for req in s.update(plan, StepResult(plan.step, sampled)):
            if req.request_id in s.requests and req.num_output_tokens >= req.max_output_tokens:
                self.finished[req.request_id] = s.finish_request(req.request_id, "length")

    def _run_seq(self, group: int, seq) -> None:
        """Write the new tokens' KV, then check the whole context reads back as the request's tokens
        (a pending token is the one the fake device sampled at its position)."""
        bs = self.scheduler.block_size
        req = self.scheduler.requests[seq.request_id]
        end = seq.start_pos + seq.num_tokens
        known = len(req.all_token_ids)

        def token_at(pos: int) -> int:
            return req.all_token_ids[pos] if pos < known else fake_token(seq.request_id, pos)

        filled = [token_at(seq.start_pos + i) if t == PENDING_TOKEN else t for i, t in enumerate(seq.token_ids)]
        assert all(t == PENDING_TOKEN for t in seq.token_ids[max(0, known - seq.start_pos):]), "a known token left pending"
        assert filled == [token_at(p) for p in range(seq.start_pos, end)]
        if self.ahead:  # advanced when scheduled: its sampled token is pending
            assert end == req.num_computed_tokens and seq.sample == (end == req.num_tokens - int(seq.sample))
        else:
            assert seq.start_pos == req.num_computed_tokens and seq.sample == (end == req.num_tokens)
        assert len(seq.block_table) * bs >= end
        for pos, tok in zip(range(seq.start_pos, end), filled):
            self.kv[group, seq.block_table[pos // bs] * bs + pos % bs] = tok
        context = [self.kv.get((group, seq.block_table[p // bs] * bs + p % bs)) for p in range(end)]
        assert context == [token_at(p) for p in range(end)], f"{seq.request_id}: KV context differs from its tokens"

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_unfinished():
                self.drain()
                if not self.scheduler.has_unfinished():
                    return
            self.step()
        raise AssertionError(f"requests still unfinished after {max_steps} steps")
