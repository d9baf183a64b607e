"""The scheduler of all attention groups: admission, routing, one `StepPlan` per step, updates.

    plan = scheduler.schedule()            # one GroupBatch per attention group
    result = executor.execute(plan)        # StepResult: sampled tokens
    reqs = scheduler.update(plan, result)  # requests that got a token; engine checks stop conditions

With `async_scheduling` (the host one step ahead, engine/engine_core.py) `schedule` is called again
before the previous plan's `update`: it advances every scheduled request past its tokens at once and
counts each token a step will sample as pending (Request.num_pending), so the next plan computes it
as a PENDING_TOKEN placeholder that the worker fills on the device; `update` then only appends the
sampled tokens (to preempted requests too: a token sampled is part of the sequence).
    scheduler.finish_request(rid, "stop")  # engine's decision; frees blocks, tells workers next plan
    failed = scheduler.take_failed()       # (request, message): ended by the scheduler with an error
    scheduler.observe_step(plan, seconds)  # the engine core's measured step time: the step-cost model
    scheduler.release_pin(rid) / expire_pins(now)  # prefill/decode split: blocks kept for a decoder
    scheduler.drop_output_tail(req, n)     # speculative decoding: tokens a verify accepted past a stop

A constrained request waits outside its group's queue while a compile of its grammar runs, so no step
waits for one: the engine core's own (`add_request(req, grammar_pending=True)`, when the server's
engine loop compiles on a worker thread; it says so with `grammar_compiled`), and, for a group in
`grammar_groups` (its sampling rank runs in another process), that rank's: the next plan asks it to
compile beside the steps (`StepPlan.grammars`) and it reports it done (`StepResult.grammars`). The two
run at once; the request joins the queue when both are done. Meanwhile the steps go on, empty if
nothing else runs (`grammars_in_flight`), to hear of a rank's.

Per-group policy lives in `GroupScheduler`; this class owns the request table, routes each new
request to a group (the least-loaded, unless another holds more of its prompt in its prefix cache
than it carries in extra load), validates limits users can hit (RequestError / QueueFullError),
and turns step results into request state. It never runs a model, never decides stop conditions
and never touches a block pool except through the group schedulers and `BlockManager` verbs.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from moeserve.config import CacheConfig, SchedulerConfig
from moeserve.core.block_manager import BlockManager
from moeserve.core.group_scheduler import GroupScheduler
from moeserve.core.kv_pins import KvPins, Pin
from moeserve.core.prefix_cache import PrefixCacheStats, extend_block_hashes
from moeserve.core.request import Request, RequestStatus
from moeserve.core.spec_scheduling import SpecScheduling
from moeserve.core.step_cost import StepCostModel
from moeserve.core.step_plan import GrammarCompile, GroupBatch, NewRequest, StepPlan, StepResult
from moeserve.errors import QueueFullError, RequestError, context_length_error
from moeserve.kv_transfer.params import PARAM, prompt_digest

log = logging.getLogger("moeserve.core")


@dataclass
class _GrammarWait:
    """A constrained request held outside its group's queue until each compile it waits for is done."""
    req: Request
    engine: bool  # the engine core's compile (its refusal is the request's 400)
    rank: bool  # its group's sampling rank's, in another process (announced in a plan)
    rank_error: str | None = None  # the rank's failure, held until the engine's compile says whose fault it is


@dataclass(frozen=True)
class BlockUsage:
    total: int
    free: int
    cached: int
    in_use: int


class Scheduler:
    def __init__(
        self, sched_cfg: SchedulerConfig, cache_cfg: CacheConfig, num_groups: int, num_blocks: int, max_model_len: int,
        kv_expiry_s: float = 120.0, kv_max_pinned_blocks: int = 0, spec: SpecScheduling | None = None,
        grammar_groups: frozenset[int] = frozenset(),
    ):
        """kv_max_pinned_blocks: the most blocks per group kept for remote decoders (0: half the group's).
        spec: speculative decoding's drafts and counters (core/spec_scheduling.py); None: off.
        grammar_groups: the groups whose sampling rank compiles a request's grammar before it is
        scheduled (see the module's docstring)."""
        assert num_groups >= 1 and num_blocks >= 1 and max_model_len >= 1
        self.cfg = sched_cfg
        self.async_scheduling = bool(sched_cfg.async_scheduling)
        if spec is not None and self.async_scheduling:  # engine_core.resolve_async_scheduling turns it off
            raise ValueError("speculative decoding runs with the host in step: async scheduling must be off")
        self.block_size = cache_cfg.block_size
        self.num_blocks = num_blocks
        self.max_model_len = max_model_len
        self.step_cost = StepCostModel()  # what a step costs, for splitting prefill bursts
        self.spec = spec
        self.groups = [
            GroupScheduler(
                g, BlockManager(num_blocks, cache_cfg.block_size, cache_cfg.enable_prefix_caching), sched_cfg, self.step_cost,
                max_model_len, spec,
            )
            for g in range(num_groups)
        ]
        self.requests: dict[str, Request] = {}
        self._finished_ids: list[str] = []
        self._failed: list[Request] = []
        self._step = 0
        # blocks of finished prefills kept for remote decoders, at most half of a group's by default
        self.pins = KvPins(kv_expiry_s, kv_max_pinned_blocks or max(1, num_blocks // 2))
        self._evicted_pins: list[Pin] = []  # pins newer ones displaced, for the engine to withdraw
        self.num_prompt_tokens_computed = 0  # prompt positions whose KV a step computed here
        self.num_kv_pull_failures = 0
        # (group, blocks) of requests that ended while their KV read ran: a one-sided read may still
        # write into the blocks, so they go back to the pool only once every rank reports it done
        self._orphaned_pulls: dict[str, tuple[int, list[int]]] = {}
        self.grammar_groups = frozenset(grammar_groups)
        self._compiling: dict[str, _GrammarWait] = {}  # routed, waiting for their grammars' compiles
        self._grammars_to_announce: list[GrammarCompile] = []
        # request id -> [group, blocks, ranks, since (time.monotonic())]: a failed read still running on
        # `ranks` ranks may still write into the blocks; they stay held (in use, never published) until
        # each of them ends
        self._quarantine: dict[str, list] = {}
        self.num_kv_quarantines = 0  # failed reads whose blocks were held so

    # ---- requests in ------------------------------------------------------------------------
    def add_request(self, req: Request, grammar_pending: bool = False) -> None:
        """Validate and enqueue `req` on an attention group (`_route`). grammar_pending: the engine core
        is still compiling its grammar; it is not scheduled before `grammar_compiled`."""
        self._validate(req)
        if self.num_waiting >= self.cfg.max_queued_requests:
            raise QueueFullError(
                f"the waiting queue holds {self.num_waiting} requests (--max-queued-requests): retry later",
                code="queue_full",
            )
        group = self._route(req)
        max_tokens = req.sampling.max_tokens
        req.max_output_tokens = max_tokens if max_tokens is not None else self.max_model_len - req.num_prompt_tokens
        req.group = group.group
        req.status = RequestStatus.WAITING
        self.requests[req.request_id] = req
        group.load_tokens += req.num_tokens
        spec = req.sampling.structured_outputs
        wait = _GrammarWait(req, engine=spec is not None and grammar_pending,
                            rank=spec is not None and group.group in self.grammar_groups)
        if wait.rank:
            self._grammars_to_announce.append(GrammarCompile(req.request_id, group.group, spec))
        if wait.engine or wait.rank:
            self._compiling[req.request_id] = wait
        else:
            group.waiting.append(req)

    def grammar_compiled(self, request_id: str) -> None:
        """The engine core has compiled `request_id`'s grammar (add_request's grammar_pending). Its
        failure is no call here: the engine aborts the request, which was never announced to a client."""
        wait = self._compiling.get(request_id)
        if wait is not None and wait.engine:
            wait.engine = False
            self._release(wait)

    def _route(self, req: Request) -> GroupScheduler:
        """The group that serves `req`: the least-loaded (fewest live tokens, then requests), unless
        another group's prefix cache holds more of the prompt than that group's extra load. A cached
        token is prefill not recomputed; a token of load is KV read by every step of a running
        request or prefill still queued, so the trade is counted in tokens, one for one. With one
        group, or prefix caching off, there is nothing to weigh."""
        least = min(self.groups, key=lambda g: (g.load_tokens, g.num_requests, g.group))
        if len(self.groups) == 1 or not least.blocks.enable_prefix_caching:
            return least
        best, best_gain = least, 0
        for g in self.groups:
            gain = g.cached_prefix_tokens(req) - (g.load_tokens - least.load_tokens)
            if gain > best_gain:
                best, best_gain = g, gain
        return best

    def _validate(self, req: Request) -> None:
        if req.request_id in self.requests:
            raise RequestError(f"request id {req.request_id!r} is already in use", code="duplicate_request_id")
        n = req.num_prompt_tokens
        if n == 0:
            raise RequestError("the prompt is empty", param="prompt")
        too_long = context_length_error(self.max_model_len, n, req.sampling.max_tokens)
        if too_long is None and req.sampling.max_tokens is None:  # the context left is max_tokens: min_tokens must fit
            too_long = context_length_error(self.max_model_len, n, req.sampling.min_tokens or None, param="min_tokens")
        if too_long is not None:
            raise too_long
        need = -(-n // self.block_size)
        if need > self.num_blocks:
            raise RequestError(
                f"KV cache has {self.num_blocks} blocks, the prompt needs {need}: raise --kv-cache-blocks "
                f"or send a shorter prompt",
                param="prompt",
                code="context_length_exceeded",
            )
        if req.remote_decode and need > self.pins.max_blocks:
            raise RequestError(
                f"{PARAM}: the prompt fills {need} KV blocks and this prefill server keeps at most "
                f"{self.pins.max_blocks} per attention group for remote decoders (--kv-max-pinned-blocks): send a "
                f"shorter prompt or serve it colocated", param=PARAM, code="context_length_exceeded")
        if req.remote_prefill is not None:
            remote = len(req.remote_prefill.block_ids)
            if remote != need:
                raise RequestError(
                    f"{PARAM}: remote_block_ids names {remote} blocks, a prompt of {n} tokens fills {need} blocks of "
                    f"{self.block_size}: send the prompt the prefill server computed, and run both with the same "
                    f"--block-size", param=PARAM, code="invalid_kv_transfer_params")
            if req.sampling.prompt_logprobs is not None:
                raise RequestError(f"prompt logprobs need the prompt computed here: drop {PARAM} or prompt_logprobs",
                                   param=PARAM)

    # ---- one step ---------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        batches: list[GroupBatch] = []
        new_requests: list[NewRequest] = []
        pulls = []
        for group in self.groups:
            step = group.schedule()
            batches.append(GroupBatch(group.group, step.seqs))
            new_requests.extend(step.new_requests)
            pulls.extend(step.kv_pulls)
            for req in step.failed:
                self._finish(req, "error")
                self._failed.append(req)
        finished, self._finished_ids = self._finished_ids, []
        grammars, self._grammars_to_announce = self._grammars_to_announce, []
        plan = StepPlan(self._step, batches, new_requests, finished, kv_pulls=pulls, grammars=grammars)
        self._step += 1
        if self.async_scheduling:
            self._advance(plan)
        return plan

    def _advance(self, plan: StepPlan) -> None:
        """Async scheduling: every scheduled request past its tokens now, the tokens the plan samples
        pending, so the next `schedule` (before this plan's `update`) sees where each will stand. Full
        blocks of known tokens are published now too: any step that hits them is queued after this one,
        on every rank, so it reads their KV once written (waiting for `update` would miss a prompt that
        shares a prefix with one admitted a step before)."""
        for batch in plan.groups:
            group = self.groups[batch.group]
            for seq in batch.seqs:
                req = self.requests[seq.request_id]
                self._computed(req, seq)
                if seq.sample:
                    req.num_pending += 1
                self._publish_full_blocks(req, group.blocks)

    def _computed(self, req: Request, seq, num_sampled: int = 0) -> None:
        """req past seq's tokens; a verify (drafts) past its newest token and the accepted drafts only
        (num_sampled: the tokens it gave, accepted drafts + one)."""
        req.num_computed_tokens = seq.start_pos + (num_sampled if seq.num_drafts else len(seq.token_ids))
        self.num_prompt_tokens_computed += max(0, min(req.num_computed_tokens, req.num_prompt_tokens) - seq.start_pos)

    def update(self, plan: StepPlan, result: StepResult) -> list[Request]:
        """Advance every scheduled request past its tokens; append sampled tokens. Returns the
        requests that got a new token, in plan order. Requests finished since `schedule` are skipped."""
        for done in result.kv_pulls:
            if done.lingering < 0:
                self._read_ended(done.request_id, -done.lingering)
            else:
                self._pull_done(done.request_id, done.error, done.lingering)
        for compiled in result.grammars:
            self._grammar_done(compiled.request_id, compiled.error)
        sampled: dict[str, list[int]] = {}
        for s in result.sampled:  # a verify gives a request its accepted drafts and one more token, in order
            sampled.setdefault(s.request_id, []).append(s.token_id)
        got_token: list[Request] = []
        for batch in plan.groups:
            group = self.groups[batch.group]
            for seq in batch.seqs:
                req = self.requests.get(seq.request_id)
                if req is None:
                    continue
                if self.async_scheduling:  # advanced when scheduled; preempted since: the token is still its
                    if seq.sample and req.status is not RequestStatus.RUNNING:
                        self._append(req, seq, sampled, plan, result, group, got_token)
                        continue
                elif req.status is not RequestStatus.RUNNING:
                    continue
                else:
                    # a verify computed the newest token and the accepted drafts; the rest of its KV is past
                    # num_computed_tokens: never read, never published, overwritten next step
                    self._computed(req, seq, len(sampled.get(seq.request_id, ())))
                if seq.sample:
                    self._append(req, seq, sampled, plan, result, group, got_token)
                if req.status is RequestStatus.RUNNING:
                    self._publish_full_blocks(req, group.blocks)
        return got_token

    def _append(self, req: Request, seq, sampled: dict[str, list[int]], plan: StepPlan, result: StepResult,
                group: GroupScheduler, got_token: list[Request]) -> None:
        tokens = sampled.get(seq.request_id)
        if not tokens:
            raise RuntimeError(f"step {plan.step}: no sampled token for {seq.request_id}")
        if len(tokens) > seq.num_drafts + 1:
            raise RuntimeError(f"step {plan.step}: {len(tokens)} tokens for {seq.request_id}, which verified "
                               f"{seq.num_drafts} drafts")
        for token in tokens:
            req.append_output_token(token)
        group.load_tokens += len(tokens)
        if self.spec is not None:
            self.spec.after_step(req, seq.num_drafts, len(tokens) - 1, result.drafts.get(seq.request_id))
        got_token.append(req)

    def drop_output_tail(self, req: Request, n: int) -> None:
        """Forget `req`'s last n output tokens: a verify accepted them past a stop condition, and the
        engine finishes the request at the stop (call before finish_request)."""
        if n > 0:
            req.drop_output_tail(n)
            self.groups[req.group].load_tokens -= n

    def _pull_done(self, request_id: str, error: str | None, lingering: int = 0) -> None:
        """Every rank has finished reading `request_id`'s prompt KV (error: some rank failed). Read:
        the request runs from its last prompt token on. Failed: it ends with an error (HTTP 503, the
        prefill engine is unavailable); its blocks, never published, go back to the free list, unless
        `lingering` ranks' reads failed still running: then they stay held until those end
        (`_read_ended`). Ended meanwhile (aborted): its blocks go back now, or as they would on failure."""
        orphan = self._orphaned_pulls.pop(request_id, None)
        if orphan is not None:
            self._free_or_hold(request_id, orphan[0], orphan[1], lingering)
            return
        req = self.requests.get(request_id)
        if req is None or req.status is not RequestStatus.PULLING:
            return
        if error is None:
            self.groups[req.group].pull_landed(req)
            return
        self.num_kv_pull_failures += 1
        self._free_or_hold(request_id, req.group, self.groups[req.group].detach(req), lingering)
        req.error = f"the prompt's KV cache could not be read from the prefill server: {error}"
        req.error_status = 503
        self._finish(req, "error")
        self._failed.append(req)

    def _grammar_done(self, request_id: str, error: str | None) -> None:
        """`request_id`'s sampling rank has compiled its grammar (ended meanwhile: nothing to do)."""
        wait = self._compiling.get(request_id)
        if wait is not None and wait.rank:
            wait.rank, wait.rank_error = False, error
            self._release(wait)

    def _release(self, wait: _GrammarWait) -> None:
        """Once no compile is pending: the request joins its group's queue, or, if its rank failed where
        the engine core compiled the same grammar (so the rank is at fault, not the request), it alone
        ends with an error. While the engine's compile runs a rank's failure waits: a grammar that
        cannot be compiled is the engine's 400, and the request is dropped before anyone hears of it."""
        if wait.engine or wait.rank:
            return
        req = self._compiling.pop(wait.req.request_id).req
        if wait.rank_error is None:
            self.groups[req.group].waiting.append(req)
            return
        req.error = f"the sampling rank could not compile the request's grammar: {wait.rank_error}"
        req.error_status = 500
        self._finish(req, "error")
        self._failed.append(req)

    def _free_or_hold(self, request_id: str, group: int, blocks: list[int], lingering: int) -> None:
        """Give a failed or orphaned pull's blocks back, or quarantine them while `lingering` ranks' reads
        may still write into them: held, they are neither free nor cached, so nobody gets them."""
        if lingering <= 0:
            self.groups[group].blocks.free(blocks)
            return
        self._quarantine[request_id] = [group, blocks, lingering, time.monotonic()]
        self.num_kv_quarantines += 1
        log.warning("KV blocks of %s held: the failed read of %d rank(s) is still running and may still write "
                    "into them (%d blocks held in all)", request_id, lingering, self.num_blocks_quarantined)

    def _read_ended(self, request_id: str, ranks: int) -> None:
        """`ranks` of the lingering reads of a quarantined pull have ended: its blocks come back after the last."""
        held = self._quarantine.get(request_id)
        if held is None:
            return
        held[2] -= ranks
        if held[2] <= 0:
            del self._quarantine[request_id]
            self.groups[held[0]].blocks.free(held[1])
            log.info("KV blocks of %s released: its failed read has ended", request_id)

    @property
    def num_blocks_quarantined(self) -> int:
        """Blocks held because a failed KV read still running may write into them."""
        return sum(len(held[1]) for held in self._quarantine.values())

    def quarantine_stats(self, now: float | None = None) -> dict[str, int | float]:
        """Blocks held, failed reads still running (one per rank), and the oldest one's age in seconds."""
        now = time.monotonic() if now is None else now
        held = self._quarantine.values()
        return {"kv_blocks_quarantined": self.num_blocks_quarantined,
                "kv_reads_quarantined": sum(h[2] for h in held),
                "kv_quarantine_oldest_s": max((now - h[3] for h in held), default=0.0)}

    def observe_step(self, plan: StepPlan, seconds: float) -> None:
        """How long `plan` took to execute. The groups run side by side, so the step's size is its
        largest group's."""
        self.step_cost.observe(plan.max_group_tokens, seconds)

    def _publish_full_blocks(self, req: Request, blocks: BlockManager) -> None:
        # a block holding a pending token (computed, not yet read back) waits for the next update
        full = min(req.num_computed_tokens, len(req.all_token_ids)) // self.block_size
        if full <= req.num_published_blocks or not blocks.enable_prefix_caching:
            return
        extend_block_hashes(req.block_hashes, req.all_token_ids, full, self.block_size)
        for i in range(req.num_published_blocks, full):
            blocks.publish(req.block_ids[i], req.block_hashes[i])
        req.num_published_blocks = full

    # ---- requests out -----------------------------------------------------------------------
    def finish_request(self, request_id: str, reason: str) -> Request | None:
        """End a live request (reason: "stop", "length", "abort", "error"). Its full blocks stay in
        the prefix cache; workers hear about it in the next plan. Unknown ids are ignored."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        group = self.groups[req.group]
        if self._compiling.pop(request_id, None) is not None:  # in no queue yet; the rank drops its compile
            self._grammars_to_announce = [g for g in self._grammars_to_announce if g.request_id != request_id]
        elif req.remote_decode and reason in ("stop", "length"):
            blocks = group.detach(req)
            prompt_blocks = -(-req.num_prompt_tokens // self.block_size)
            if len(blocks) > prompt_blocks:  # tokens generated past the prompt (max_tokens > 1): a decoder reads
                group.blocks.free(blocks[prompt_blocks:])  # the prompt's KV only, and the cap counts it alone
                blocks = blocks[:prompt_blocks]
            for old in self.pins.make_room(req.group, len(blocks)):  # the oldest unread pins give way
                group.blocks.free(old.block_ids)
                self._evicted_pins.append(old)
            self.pins.pin(request_id, req.group, blocks, prompt_digest(req.prompt_token_ids), time.monotonic())
        elif req.status is RequestStatus.PULLING:  # its read may still write the blocks: freed when done
            self._orphaned_pulls[request_id] = (req.group, group.detach(req))
        else:
            group.remove(req)
        self._finish(req, reason)
        return req

    def release_pin(self, request_id: str) -> Pin | None:
        """The remote decoder has read `request_id`'s blocks (or gave up): free them. None: unknown."""
        pin = self.pins.release(request_id)
        if pin is not None:
            self.groups[pin.group].blocks.free(pin.block_ids)
        return pin

    def take_evicted_pins(self) -> list[Pin]:
        """Pins newer ones displaced (their blocks already free) since the last call: the engine
        withdraws them from its side channel before the next schedule() can reuse the blocks."""
        evicted, self._evicted_pins = self._evicted_pins, []
        return evicted

    def expire_pins(self, now: float) -> list[Pin]:
        """Free the blocks of pins no decoder released in time (it died, or never came)."""
        expired = self.pins.expire(now)
        for pin in expired:
            self.groups[pin.group].blocks.free(pin.block_ids)
        return expired

    def abort_request(self, request_id: str) -> Request | None:
        return self.finish_request(request_id, "abort")

    def take_failed(self) -> list[tuple[Request, str]]:
        """(request, message) for requests the scheduler ended with finish_reason "error" since the
        last call (they can never fit in the KV pool). The engine reports them to their clients."""
        failed, self._failed = self._failed, []
        return [(req, req.error or "request failed") for req in failed]

    def _finish(self, req: Request, reason: str) -> None:
        """Bookkeeping for a request already out of its group's queues."""
        del self.requests[req.request_id]
        self.groups[req.group].load_tokens -= len(req.all_token_ids)
        if self.spec is not None:
            self.spec.forget(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        self._finished_ids.append(req.request_id)

    # ---- stats --------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return sum(len(g.running) for g in self.groups)

    @property
    def num_waiting(self) -> int:
        return sum(len(g.waiting) for g in self.groups) + len(self._compiling)

    @property
    def num_preemptions(self) -> int:
        return sum(g.num_preemptions for g in self.groups)

    def stats(self) -> dict[str, int | float | list[int]]:
        """Flat numbers for metrics: queue sizes, KV blocks (total and per group), prefix cache, and
        speculative decoding's counters when it runs (one list: accepted drafts per position)."""
        total = self.total_block_usage()
        prefix = self.prefix_cache_stats()
        out: dict[str, int | float | list[int]] = {
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
            "num_preemptions": self.num_preemptions,
            "kv_blocks_total": total.total,
            "kv_blocks_free": total.free,
            "kv_blocks_cached": total.cached,
            "kv_blocks_in_use": total.in_use,
            "kv_usage": total.in_use / total.total,
            "prefix_cache_queries": prefix.queries,
            "prefix_cache_query_tokens": prefix.query_tokens,
            "prefix_cache_hit_tokens": prefix.hit_tokens,
            "kv_blocks_pinned_remote": self.pins.num_blocks,
            "kv_pins_evicted": self.pins.num_evicted,
            **self.quarantine_stats(),
            "kv_quarantines": self.num_kv_quarantines,
            "prompt_tokens_computed": self.num_prompt_tokens_computed,
        }
        if self.spec is not None:
            out.update(self.spec.stats.as_stats())
        for g, usage in enumerate(self.block_usage()):
            out[f"kv_blocks_in_use_group{g}"] = usage.in_use
            out[f"kv_blocks_cached_group{g}"] = usage.cached
        return out

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    @property
    def pulls_in_flight(self) -> bool:
        """Some request's KV read has not been reported done by every rank: steps must go on, even
        empty, to hear of it (the blocks of an ended request's read come back then too). Quarantined
        blocks come back the same way, but only a waiting request needs them soon: an idle engine
        does not step for them alone (a read that never ends would keep it stepping forever)."""
        return (bool(self._orphaned_pulls) or any(g.pulling for g in self.groups)
                or (bool(self._quarantine) and self.num_waiting > 0))

    @property
    def grammars_in_flight(self) -> bool:
        """Some request waits for its sampling rank's grammar (or is still to be announced): steps must
        go on, even empty, to hear of it. (One waiting for the engine core's compile alone needs none.)"""
        return any(wait.rank for wait in self._compiling.values())

    def block_usage(self) -> list[BlockUsage]:
        """Per attention group; `total_block_usage` sums them."""
        return [BlockUsage(g.blocks.num_blocks, g.blocks.num_free, g.blocks.num_cached, g.blocks.num_in_use) for g in self.groups]

    def total_block_usage(self) -> BlockUsage:
        per = self.block_usage()
        return BlockUsage(*(sum(getattr(u, f) for u in per) for f in ("total", "free", "cached", "in_use")))

    def prefix_cache_stats(self) -> PrefixCacheStats:
        total = PrefixCacheStats()
        for g in self.groups:
            total.queries += g.blocks.stats.queries
            total.query_tokens += g.blocks.stats.query_tokens
            total.hit_tokens += g.blocks.stats.hit_tokens
        return total

    def check_invariants(self) -> None:
        """Every pool consistent, and every block's reference count equals the number of live
        requests holding it. O(blocks + tokens): for tests and debugging."""
        for g in self.groups:
            g.blocks.check_invariants()
            holders = [0] * g.blocks.num_blocks
            for pin in self.pins.by_group(g.group):
                for b in pin.block_ids:
                    holders[b] += 1
            for req in g.running + g.pulling:
                for b in req.block_ids:
                    holders[b] += 1
            for group, blocks, *_ in [*self._orphaned_pulls.values(), *self._quarantine.values()]:
                for b in blocks if group == g.group else ():
                    holders[b] += 1
            for req in g.waiting:
                if req.block_ids:
                    raise AssertionError(f"waiting request {req.request_id} holds blocks")
            for b, n in enumerate(holders):
                if n != g.blocks.ref_count(b):
                    raise AssertionError(f"group {g.group} block {b}: {n} holders, ref count {g.blocks.ref_count(b)}")
