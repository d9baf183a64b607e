"""Scheduling policy of one attention group: which of its requests run this step, and how much.

One step, under a token budget (`max_num_batched_tokens`) and `max_num_seqs`:
  1. decodes: every running request with one uncomputed token gets it, in admission order;
  2. partial prefills: running requests still computing prompt (or recompute) tokens get the
     next chunk, in admission order;
  3. admission: waiting requests, FIFO, take prefix-cache hits and a first chunk, unless this step
     preempted someone (admitting then would only thrash). Samples of one prompt wait for one of
     them to compute it, passed over in place (`core/siblings.py`). With `split_prefill_bursts` and a known
     step cost, a burst of waiting prompts may be spread over a few steps, cut between prompts, so
     its first prompts get their first token sooner (`core/prefill_split.py`).
A request whose prompt a prefill engine computed (prefill/decode split) is admitted with blocks for
its whole prompt and a KvPull of the blocks its prefix cache lacks, then waits in `pulling` (it holds
a seat and its blocks, is never preempted, and is not scheduled) while the read runs beside the
steps; once every rank reports the read done (`pull_landed`) it runs like any other request, from its
last prompt token.
A request that cannot get a block preempts the most recently admitted request not yet scheduled
this step (itself, if it is the newest): its blocks are freed and it goes back to the front of
the queue to recompute its tokens later. A request that holds the whole pool alone and still
needs more can never fit: it fails with an error instead of looping.
Requests, not sequences, share the group fairly (`core/fair_share.py`): before the three passes,
sequences of a client request above its fair share of seats or blocks are preempted for a waiting
request below its own, admission serves owners with fewer seats first, and a block is taken first
from the owner furthest above its block share.

Mutates its queues, the requests it schedules (status, blocks, num_computed_tokens) and its
block pool. Never advances num_computed_tokens (that happens in `Scheduler.update` once the step
ran) and never decides stop conditions.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from moeserve.config import SchedulerConfig
from moeserve.core import fair_share
from moeserve.core.block_manager import BlockManager
from moeserve.core.prefill_split import burst_steps
from moeserve.core.prefix_cache import extend_block_hashes, max_cacheable_blocks
from moeserve.core.request import Request, RequestStatus
from moeserve.core.siblings import SiblingHolds
from moeserve.core.spec_scheduling import SpecScheduling
from moeserve.core.step_cost import StepCostModel
from moeserve.core.step_plan import PENDING_TOKEN, KvPull, NewRequest, ScheduledSeq


@dataclass
class GroupStep:
    """What one group's scheduling produced; `tokens_left` is the remaining token budget."""

    tokens_left: int
    seqs: list[ScheduledSeq] = field(default_factory=list)
    new_requests: list[NewRequest] = field(default_factory=list)
    failed: list[Request] = field(default_factory=list)  # removed from the group; caller finishes them
    scheduled: set[str] = field(default_factory=set)
    preempted: bool = False
    kv_pulls: list[KvPull] = field(default_factory=list)


def _num_blocks(req: Request) -> int:
    return len(req.block_ids)


def _wants_prompt_logprobs(req: Request) -> bool:
    """Asked for prompt logprobs and has not got them yet: they are complete in the step that
    samples the first output token, so a request recomputed after that uses the cache as usual."""
    return req.sampling.prompt_logprobs is not None and not req.output_token_ids


class GroupScheduler:
    def __init__(self, group: int, blocks: BlockManager, cfg: SchedulerConfig, step_cost: StepCostModel | None = None,
                 max_model_len: int = 1 << 62, spec: SpecScheduling | None = None):
        self.group = group
        self.max_model_len = max_model_len
        self.blocks = blocks
        self.cfg = cfg
        self.step_cost = step_cost  # read for burst splitting; the engine core feeds it
        self.spec = spec  # speculative decoding: the drafts a decode carries (core/spec_scheduling.py)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the tail is preempted first
        self.pulling: list[Request] = []  # admitted, their prompts' KV still being read (never preempted)
        self.load_tokens = 0  # tokens of all live requests here, for routing new requests
        self.num_preemptions = 0
        # a burst being spread over steps: its requests still waiting, and the steps left to it
        self._burst_rest: set[str] = set()
        self._burst_steps_left = 0

    @property
    def num_requests(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.pulling)

    @property
    def num_seated(self) -> int:
        """Requests holding one of the max_num_seqs seats: running, or waiting for their KV reads."""
        return len(self.running) + len(self.pulling)

    def schedule(self) -> GroupStep:
        step = GroupStep(tokens_left=self.cfg.max_num_batched_tokens)
        self._rebalance(step)
        self._schedule_decodes(step)
        self._schedule_partial_prefills(step)
        if not step.preempted:
            self._admit_waiting(step)
        return step

    def remove(self, req: Request) -> None:
        """Take a request out of this group's queues and give back its blocks (finish or abort)."""
        self.blocks.free(self.detach(req))

    def detach(self, req: Request) -> list[int]:
        """Take a request out of this group's queues; its blocks, still referenced, go to the caller."""
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        elif req.status is RequestStatus.PULLING:
            self.pulling.remove(req)
        else:
            self.waiting.remove(req)
        block_ids, req.block_ids = req.block_ids, []
        return block_ids

    def pull_landed(self, req: Request) -> None:
        """Every rank has read `req`'s prompt KV: it runs from the next step (its last prompt token)."""
        self.pulling.remove(req)
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    # ---- fair shares (core/fair_share.py) -------------------------------------------------------
    def _rebalance(self, step: GroupStep) -> None:
        """Preempt sequences of owners above their fair share until the waiting sequences of owners
        below theirs have a seat and the blocks of a first chunk; then order the queue so that owners
        holding fewer seats are admitted first. Runs before anything is scheduled this step."""
        if not self.waiting or not self.running:
            return
        seats = fair_share.seats_by_owner(self.running)
        owners = set(seats) | {r.fair_owner for r in self.waiting}
        if len(owners) < 2 or len(owners) == len(self.running) + len(self.waiting):
            return  # one owner, or every sequence its own (FIFO is fair then): nothing to share out
        share = fair_share.shares(len(owners), self.cfg.max_num_seqs, self.blocks.num_blocks)
        held = fair_share.blocks_by_owner(self.running)
        free_seats = self.cfg.max_num_seqs - len(self.running)
        holds = SiblingHolds(self.running, self.blocks)
        for req in list(self.waiting):  # FIFO, passing over owners at or above a share
            owner = req.fair_owner
            if seats[owner] >= share.seats or held[owner] >= share.blocks:
                continue
            if holds.held(req):
                continue  # not admitted this step: no one makes room for it
            need = self.blocks.blocks_for(min(req.num_tokens, self.cfg.max_num_batched_tokens))
            while free_seats < 1 or self.blocks.num_available < need:
                if free_seats < 1:
                    victim = fair_share.pick_victim(self.running, seats, share.seats, seats)
                else:
                    victim = fair_share.pick_victim(self.running, held, share.blocks, seats, _num_blocks)
                if victim is None:
                    break
                seats[victim.fair_owner] -= 1
                held[victim.fair_owner] -= len(victim.block_ids)
                self._preempt(victim, step, for_fairness=True)
                free_seats += 1
            else:
                free_seats -= 1
                seats[owner] += 1
                held[owner] += need
                continue
            break  # no one above their share is left to make room
        self.waiting = deque(fair_share.fair_order(list(self.waiting), fair_share.seats_by_owner(self.running)))

    def _victim(self, step: GroupStep) -> Request:
        """Whom to preempt for a block: the newest sequence not scheduled this step of the owner
        furthest above its block share, if any owner is; else the newest sequence."""
        newest = self.running[-1]
        candidates = [r for r in self.running if r.request_id not in step.scheduled]
        owners = {r.fair_owner for r in self.running} | {r.fair_owner for r in self.waiting}
        if len(owners) < 2 or not candidates:
            return newest
        share = fair_share.shares(len(owners), self.cfg.max_num_seqs, self.blocks.num_blocks)
        victim = fair_share.pick_victim(candidates, fair_share.blocks_by_owner(self.running), share.blocks,
                                        fair_share.seats_by_owner(self.running), _num_blocks)
        return victim if victim is not None else newest

    # ---- the three passes ---------------------------------------------------------------------
    def _schedule_decodes(self, step: GroupStep) -> None:
        block_size = self.blocks.block_size
        for req in list(self.running):  # victims leave from the tail while we walk
            if req.status is not RequestStatus.RUNNING or req.num_uncomputed_tokens != 1:
                continue
            if req.num_pending and self._ends_with_pending(req):
                continue  # its pending token is its last: computing it would be a step for nothing
            if step.tokens_left == 0:
                break
            needs_block = req.num_computed_tokens >= len(req.block_ids) * block_size
            if needs_block and not self._make_room(req, step):
                continue
            drafts = self.spec.drafts_for(req, step.tokens_left) if self.spec is not None else []
            drafts = self._append_slots(req, req.num_computed_tokens + 1, True, drafts)
            self._emit(req, 1, step, drafts)

    def _ends_with_pending(self, req: Request) -> bool:
        """The request's pending token ends it by length (max_tokens or max_model_len), whatever it is."""
        outputs = req.num_output_tokens + req.num_pending
        return outputs >= req.max_output_tokens or req.num_tokens >= self.max_model_len

    def _schedule_partial_prefills(self, step: GroupStep) -> None:
        block_size = self.blocks.block_size
        for req in list(self.running):
            if req.status is not RequestStatus.RUNNING or req.num_uncomputed_tokens <= 1:
                continue
            if req.request_id in step.scheduled:
                continue
            if step.tokens_left == 0:
                break
            if not self._make_room(req, step):
                continue
            capacity = (len(req.block_ids) + self.blocks.num_available) * block_size - req.num_computed_tokens
            n = min(req.num_uncomputed_tokens, step.tokens_left, capacity)
            self._append_slots(req, req.num_computed_tokens + n, req.num_computed_tokens + n == req.num_tokens)
            self._emit(req, n, step)

    def _admit_waiting(self, step: GroupStep) -> None:
        """FIFO admission, passing over siblings that wait for another's prefill (`core/siblings.py`):
        they keep their places in the queue."""
        holds = SiblingHolds(self.running, self.blocks)
        passed: list[Request] = []
        try:
            self._admit_in_order(step, holds, passed)
        finally:
            self.waiting.extendleft(reversed(passed))

    def _admit_in_order(self, step: GroupStep, holds: SiblingHolds, passed: list[Request]) -> None:
        cap = self._burst_cap(step, holds)
        admitted = 0
        while self.waiting and step.tokens_left > 0 and self.num_seated < self.cfg.max_num_seqs:
            req = self.waiting[0]
            if holds.held(req):
                passed.append(self.waiting.popleft())
                continue
            if req.remote_prefill is not None:
                if not self._admit_remote(req, step):
                    return  # FIFO: later requests wait for its blocks
                admitted += 1
                continue
            hits = self._prefix_hits(req)
            cached = len(hits) * self.blocks.block_size
            n = min(req.num_tokens - cached, step.tokens_left)
            if cap is not None and admitted and admitted + n > cap:
                return  # the rest of the burst goes next step
            if not self.blocks.can_allocate(hits, cached + n):
                if self.running or self.blocks.num_in_use:
                    # FIFO: later requests wait for this one, and it for the blocks others hold (running
                    # requests, KV reads, pins for remote decoders: each gives its blocks back in time)
                    return
                # Alone, the pool is all ours: a resumed request may need more than one chunk fits.
                n = min(n, self.blocks.num_blocks * self.blocks.block_size - cached)
                if n < 1:
                    self.waiting.popleft()
                    self._fail(req, step)
                    continue
            self.waiting.popleft()
            self._admit(req, hits, cached, n, step)
            admitted += n

    def _burst_cap(self, step: GroupStep, holds: SiblingHolds) -> int | None:
        """Prompt tokens this step may admit (None: as many as the budget takes). The burst is the
        waiting prompts this step could take: FIFO, within the seat and token budgets, each counted
        by the tokens it must compute (a prefix already cached costs nothing), as admission counts.

        A burst's plan holds for its rest: its k steps share its tokens, and the rest is not cut
        again unless new arrivals make a fresh plan allow more. (Planned afresh each step, cut
        between prompts, 7 prompts went as 3, 2 and 2 where the rule said two steps: the rest of a
        first cut holds more than half the tokens, and so was cut again, one more overhead for the
        burst's last prompts; docs/core.md.) Arrivals behind the rest join its step when they fit
        under its cap, or when a fresh plan of all that waits says one step."""
        if not self.cfg.split_prefill_bursts or self.step_cost is None:
            return None
        fresh = self._plan_burst(step, holds)
        head = next((r for r in self.waiting if not holds.held(r)), None)
        if self._burst_steps_left > 1 and head is not None and head.request_id in self._burst_rest:
            self._burst_steps_left -= 1
            rest = [self._uncached_tokens(r) for r in self.waiting
                    if not holds.held(r) and r.request_id in self._burst_rest]  # asked in queue order
            planned = -(-sum(rest) // self._burst_steps_left)
            if fresh is not None and fresh[0] <= planned:
                return planned  # the plan holds (later arrivals may still fit under its cap)
        # a new burst, or one the latest arrivals make worth taking whole or cut afresh
        if fresh is None:
            self._burst_rest, self._burst_steps_left = set(), 0
            return None
        cap, self._burst_rest, self._burst_steps_left = fresh
        return cap

    def _plan_burst(self, step: GroupStep, holds: SiblingHolds) -> tuple[int, set[str], int] | None:
        """(token cap for this step, the burst's request ids, its steps) for the waiting prompts as
        they are now (siblings held for another's prefill are not), or None: one step takes them all
        (or nothing is known of the step cost)."""
        if len(self.waiting) < 2:
            return None
        cost = self.step_cost.estimate()
        if cost is None:  # nothing known of the step cost yet: no split, and no prefix lookups for it
            return None
        burst: list[tuple[str, int]] = []
        seats, tokens = self.cfg.max_num_seqs - len(self.running), step.tokens_left
        for req in self.waiting:
            if holds.held(req):
                continue
            if len(burst) == seats or tokens <= 0:
                break
            burst.append((req.request_id, min(self._uncached_tokens(req), tokens)))
            tokens -= burst[-1][1]
        if len(burst) < 2:
            return None
        total = sum(n for _, n in burst)
        k = burst_steps(total, len(burst), cost)
        if k == 1:
            return None
        return -(-total // k), {rid for rid, _ in burst}, k

    def _uncached_tokens(self, req: Request) -> int:
        return req.num_tokens - self.cached_prefix_tokens(req)

    # ---- helpers ------------------------------------------------------------------------------
    def _admit(self, req: Request, hits: list[int], cached: int, n: int, step: GroupStep) -> None:
        """Run `req` from its `cached` prefix, computing `n` tokens this step."""
        self._seat(req, hits, cached, cached + n, step)
        self._append_slots(req, cached + n, cached + n == req.num_tokens)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        self._emit(req, n, step)

    def _seat(self, req: Request, hits: list[int], computed: int, tokens: int, step: GroupStep) -> None:
        """Blocks for `tokens` tokens of `req` (its prefix-cache `hits` first); the first `computed`
        have their KV (cached, or read from a prefill engine); the workers hear of it if it is new."""
        cached = len(hits) * self.blocks.block_size
        req.block_ids = self.blocks.allocate(hits, tokens)
        req.num_computed_tokens = computed
        req.num_published_blocks = len(hits)
        self.blocks.record_prefix_lookup(req.num_tokens, cached)
        if not req.ever_scheduled:
            req.ever_scheduled = True
            req.num_cached_prompt_tokens = cached
            prompt = req.prompt_token_ids if req.sampling.repetition_penalty != 1.0 else None
            step.new_requests.append(NewRequest(req.request_id, req.sampling, prompt))

    def _admit_remote(self, req: Request, step: GroupStep) -> bool:
        """Admit a request whose prompt's KV a prefill engine holds: blocks for the whole prompt and a
        KvPull of the blocks our prefix cache lacks (all but the last prompt token, which a later
        step computes for the first token's logits); it waits in `pulling` until the read is done.
        False: no blocks yet."""
        remote = req.remote_prefill
        assert remote is not None and not req.output_token_ids
        hits = self._prefix_hits(req)
        n_prompt = req.num_prompt_tokens
        if not self.blocks.can_allocate(hits, n_prompt):
            if self.running or self.blocks.num_in_use:  # others hold blocks and give them back in time
                return False
            self.waiting.popleft()
            self._fail(req, step)
            return True
        self.waiting.popleft()
        cached = len(hits) * self.blocks.block_size
        self._seat(req, hits, n_prompt - 1, n_prompt, step)
        req.status = RequestStatus.PULLING
        self.pulling.append(req)
        fetch = range(len(hits), self.blocks.blocks_for(n_prompt - 1))
        # pulled even when empty (the prefix cache held every block): the engine then releases the pin
        step.kv_pulls.append(KvPull(req.request_id, self.group, remote.engine_id, remote.request_id, remote.host, remote.port,
                                    [remote.block_ids[i] for i in fetch], [req.block_ids[i] for i in fetch], remote.group,
                                    remote.release_token))
        req.remote_prefill = None  # taken: a preempted request recomputes its prompt like any other
        return True

    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens of `req` this group's prefix cache holds now (a pure lookup: for routing)."""
        return len(self._prefix_hits(req)) * self.blocks.block_size

    def _prefix_hits(self, req: Request) -> list[int]:
        if not self.blocks.enable_prefix_caching or _wants_prompt_logprobs(req):
            return []  # prompt logprobs need the logits of every prompt position: no cached prefix
        m = max_cacheable_blocks(req.num_tokens, self.blocks.block_size)
        extend_block_hashes(req.block_hashes, req.all_token_ids, m, self.blocks.block_size)
        hits = self.blocks.match_prefix(req.block_hashes[:m])
        return hits[:-1] if hits and self.spec is not None and self.spec.drops_last_cached_block else hits

    def _make_room(self, req: Request, step: GroupStep) -> bool:
        """Make sure `req` can get one more token's slot, preempting newer unscheduled requests.
        False when `req` cannot run this step (it may itself have been preempted or failed)."""
        target = req.num_computed_tokens + 1
        while not self.blocks.can_append_slots(req.block_ids, target):
            victim = self._victim(step)
            if victim.request_id in step.scheduled:
                return False  # the newest requests already run this step; wait for them
            if victim is not req:
                self._preempt(victim, step)
                continue
            if len(self.running) == 1:
                self._fail(req, step)  # holds the whole pool alone and needs more
            else:
                self._preempt(req, step)
            return False
        return True

    def _preempt(self, req: Request, step: GroupStep, for_fairness: bool = False) -> None:
        """Back to the queue's front to recompute later. A preemption for fairness makes room for a
        waiting request, so it does not stop this step's admission as one under block pressure does."""
        self.running.remove(req)
        self.blocks.free(req.block_ids)
        req.block_ids = []
        req.num_computed_tokens = 0
        req.num_published_blocks = 0
        req.status = RequestStatus.PREEMPTED
        req.draft_token_ids = []  # its recompute step samples a token and drafts afresh
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        step.preempted = step.preempted or not for_fairness

    def _fail(self, req: Request, step: GroupStep) -> None:
        pool = self.blocks.num_blocks
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        self.blocks.free(req.block_ids)
        req.block_ids = []
        req.error = (
            f"request needs more than the {pool} KV blocks ({pool * self.blocks.block_size} tokens) of attention "
            f"group {self.group}: raise --kv-cache-blocks or lower max_tokens"
        )
        step.failed.append(req)

    def _append_slots(self, req: Request, tokens: int, samples: bool, drafts: list[int] = ()) -> list[int]:
        """Grow req's blocks to hold `tokens` tokens (the caller made room), then, as far as free blocks
        allow without preempting anyone, its `drafts` and, when the step samples it, the KV slots the MTP
        layer writes past them (SpecScheduling.lookahead). Returns the drafts that fit."""
        self.blocks.append_slots(req.block_ids, tokens)
        if self.spec is None:
            return list(drafts)
        lookahead = self.spec.lookahead if samples else 0
        room = (len(req.block_ids) + self.blocks.num_available) * self.blocks.block_size - tokens
        drafts = list(drafts[: max(0, room)])
        want = tokens + len(drafts) + lookahead
        self.blocks.append_slots(req.block_ids, min(want, tokens + room, max(tokens + len(drafts), self.spec.max_model_len)))
        return drafts

    def _emit(self, req: Request, n: int, step: GroupStep, drafts: list[int] = ()) -> None:
        start = req.num_computed_tokens
        end = start + n
        tokens = req.all_token_ids[start:end]
        if len(tokens) < n:  # pending tokens (sampled last step, not yet read back): filled on the device
            tokens = tokens + [PENDING_TOKEN] * (n - len(tokens))
        seq = ScheduledSeq(req.request_id, tokens + list(drafts), start, req.block_ids.copy(), end == req.num_tokens,
                           num_drafts=len(drafts))
        if self.spec is not None and self.spec.config.is_mtp and end < req.num_tokens:
            seq.next_token_id = req.all_token_ids[end]  # the MTP layer's input at the chunk's last position
        if _wants_prompt_logprobs(req):
            last = min(end, req.num_prompt_tokens - 1)  # positions [start, last) score prompt tokens start+1 .. last
            if start < last:
                seq.prompt_targets = req.prompt_token_ids[start + 1 : last + 1]
        step.seqs.append(seq)
        step.tokens_left -= n + len(drafts)
        step.scheduled.add(req.request_id)
