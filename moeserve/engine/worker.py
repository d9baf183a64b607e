"""One rank's share of a step: its attention group's batch through the model, sampling on TP-rank 0."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from moeserve.config import EngineConfig
from moeserve.core.step_plan import (PENDING_TOKEN, GrammarDone, GroupBatch, KvPullDone, PromptLogprobs, SampledToken,
                                     StepPlan, StepResult)
from moeserve.engine.grammar_book import GrammarBook
from moeserve.engine.host_copy import to_device
from moeserve.engine.model_runner import ModelRunner, TokenFill, resolve_model_dir
from moeserve.engine.rebalance import RankPlacement
from moeserve.engine.sampler import SampledBatch, Sampler
from moeserve.engine.spec_sampling import sample_drafted
from moeserve.parallel_state import ParallelContext

# an empty step (the engine waits for KV reads and has nothing to compute) waits this long for a read
# to end before it reports back, so an idle decode engine does not spin through empty steps
PULL_POLL_S = 0.002
# likewise for a grammar a sampling rank compiles beside the steps (engine/grammar_book.py)
GRAMMAR_POLL_S = 0.02


@dataclass
class PendingStep:
    """A launched step: `result()` reads its sampled ids back (waiting for them alone)."""

    step: int
    sampled: SampledBatch | list[SampledToken] | None = None  # a list: read back already (a verify step)
    prompt_logprobs: list[PromptLogprobs] = field(default_factory=list)
    kv_pulls: list[KvPullDone] = field(default_factory=list)
    drafts: dict[str, list[int]] = field(default_factory=dict)  # the MTP layer's, for the next step
    grammars: list[GrammarDone] = field(default_factory=list)  # compiled beside the steps since the last one

    def result(self) -> StepResult:
        sampled = self.sampled
        tokens = sampled.result() if isinstance(sampled, SampledBatch) else sampled or []
        return StepResult(self.step, tokens, prompt_logprobs=self.prompt_logprobs, kv_pulls=self.kv_pulls,
                          drafts=self.drafts, grammars=self.grammars)


class Worker:
    """Owns the model runner (weights + KV cache of this rank) and, on a group's TP-rank 0, the sampler.

    execute() (or launch(), then the PendingStep's result()) is called with the same plan on every
    rank, in the same order; it runs the MoE layers even when this rank's group has no tokens, so every
    collective lines up across ranks.
    """

    def __init__(self, config: EngineConfig, ctx: ParallelContext, group: int = 0, dispatcher=None):
        self.group, self.ctx = group, ctx
        self.async_scheduling = bool(config.scheduler.async_scheduling)
        self._last: tuple[dict[str, int], torch.Tensor | None] = ({}, None)  # the last step's sampled ids
        self.runner = ModelRunner(config, ctx, dispatcher)  # builds the --dispatch backend itself
        inputs = self.runner.inputs
        self.placement = RankPlacement(list(self.runner.model.moe_layers().values()), ctx,
                                       None if inputs is None else inputs.token_valid)
        # each attention group samples its unseeded requests from its own stream: with one seed for
        # all, two groups drew the same noise and returned the same "random" samples
        self.sampler = Sampler(seed=group_seed(config.seed, group)) if ctx.tp_rank == 0 else None
        # structured outputs' matchers live where their tokens are sampled (engine/grammar_book.py)
        self.grammars = None
        if self.sampler is not None:
            self.grammars = GrammarBook(str(resolve_model_dir(config)), self.runner.hf_config.vocab_size)
        self.drafter = None  # speculative decoding with the checkpoint's MTP layer (engine/mtp_drafter.py)
        if config.speculative.is_mtp:
            from moeserve.engine.mtp_drafter import MtpDrafter
            from moeserve.spec_decode.model_check import mtp_layer_count

            k = config.speculative.num_drafts(mtp_layer_count(self.runner.hf_config))
            self.drafter = MtpDrafter(self.runner, ctx, k)
        self.kv_agent = None  # prefill/decode split: this rank's cache registered with NIXL
        if config.kv_transfer.enabled:
            from moeserve.kv_transfer.head_slices import HeadRange
            from moeserve.kv_transfer.rank_agent import RankKvAgent
            from moeserve.kv_transfer.trust import key_for

            heads = HeadRange(*self.runner.model.kv_cache_heads())
            kv = config.kv_transfer
            self.kv_agent = RankKvAgent(self.runner.kv_caches, key_for(kv.secret), self.runner.block_size, heads, group,
                                        ctx.tp_rank, bind_host=kv.side_channel_host)
        self.runner.capture_graphs()  # after the placement's routing counters hooked the MoE layers

    def execute(self, plan: StepPlan) -> StepResult:
        """This rank's share of the step's result: sampled tokens and prompt logprobs on a group's
        TP-rank 0, nothing elsewhere."""
        return self.launch(plan).result()

    def launch(self, plan: StepPlan) -> PendingStep:
        """Queue the step on the device and return without reading anything back: the sampled ids stay
        on the device (where the next plan's pending tokens are filled from) and their host copy is
        on its way (`PendingStep.result` waits for it). Steps must be launched in plan order."""
        compiled: list[GrammarDone] = []
        if self.sampler is not None:
            for request_id in plan.finished_request_ids:
                self.sampler.remove(request_id)
                self.grammars.remove(request_id)
            for new in plan.new_requests:
                self.sampler.add(new)
                self.grammars.add(new)
            self.grammars.prepare([g for g in plan.grammars if g.group == self.group])
            idle = plan.num_tokens == 0 and self.grammars.compiling
            compiled = self.grammars.take_compiled(wait_s=GRAMMAR_POLL_S if idle else 0.0)
        if plan.rebalance is not None:  # every rank switches placement before this step's forward
            self.placement.apply(plan.rebalance)
            self.runner.capture_graphs()  # the graphs hold the old slot maps
        batch = plan.groups[self.group]
        pulled = []
        if self.kv_agent is not None:  # reads run beside the steps; each step reports those that ended
            self.kv_agent.start([p for p in plan.kv_pulls if p.group == self.group])
            pulled = self.kv_agent.finished(wait_s=PULL_POLL_S if plan.num_tokens == 0 else 0.0)
        else:
            assert not plan.kv_pulls, "a KvPull for an engine without --kv-transfer"
        if plan.num_tokens == 0 and plan.collect_routing:  # a control step: no forward at all, on any rank
            self.placement.collect()
            return PendingStep(plan.step, kv_pulls=pulled, grammars=compiled)
        if plan.num_tokens == 0:  # nothing to compute on any rank (the plan is the same everywhere)
            return PendingStep(plan.step, kv_pulls=pulled, grammars=compiled)
        # the global max group size is decided on rank 0 and identical everywhere (dispatch may use it)
        top_n = self.sampler.prompt_top_n if self.sampler is not None else None
        logits, prompt_logprobs = self.runner.execute_step(batch, plan.max_group_tokens, top_n, plan.is_decode,
                                                           self._pending_tokens(batch))
        if plan.collect_routing:
            self.placement.collect()
        seqs = [s for s in batch.seqs if s.sample]
        request_ids = [s.request_id for s in seqs]
        sampled = None
        if self.sampler is not None and request_ids:
            sampled = self._sample(logits, seqs)
        self._remember(request_ids, sampled, logits)
        drafts = {}
        if self.drafter is not None:  # speculation runs with the host in step (engine_core.py): read back now
            if isinstance(sampled, SampledBatch):
                sampled = sampled.result()
            drafts = self._draft(plan, batch, sampled or [])
        if self.sampler is None:  # every rank reports its own reads: the executor merges them
            return PendingStep(plan.step, kv_pulls=pulled)
        return PendingStep(plan.step, sampled, prompt_logprobs, pulled, drafts, compiled)

    def _remember(self, request_ids: list[str], sampled: SampledBatch | list[SampledToken] | None,
                  logits: torch.Tensor) -> None:
        """Keep this step's sampled ids on the device for the next plan's pending tokens (async
        scheduling): on every TP rank of the group, through a broadcast from its TP-rank 0."""
        if not self.async_scheduling:
            return
        assert not isinstance(sampled, list), "speculative decoding runs without async scheduling"
        tokens = sampled.tokens if sampled is not None else None
        if self.ctx.tp_size > 1 and request_ids:
            if tokens is None:
                tokens = torch.empty(len(request_ids), dtype=torch.int64, device=logits.device)
            dist.broadcast(tokens, src=dist.get_global_rank(self.ctx.tp_group, 0), group=self.ctx.tp_group)
        self._last = ({r: i for i, r in enumerate(request_ids)}, tokens)

    def _pending_tokens(self, batch: GroupBatch) -> TokenFill | None:
        """Where the batch holds PENDING_TOKEN placeholders, and the last step's sampled ids that fill
        them (async scheduling: the host scheduled this step before reading those ids)."""
        positions, rows, row = [], [], 0
        for seq in batch.seqs:
            if seq.token_ids[-1] == PENDING_TOKEN:
                rows_of, _ = self._last
                if seq.request_id not in rows_of:
                    raise RuntimeError(f"request {seq.request_id} has a pending token the last step did not sample")
                positions.append(row + len(seq.token_ids) - 1)
                rows.append(rows_of[seq.request_id])
            row += len(seq.token_ids)
        if not positions:
            return None
        tokens = self._last[1]
        return TokenFill(positions, tokens[to_device(rows, torch.int64, tokens.device)])

    def _sample(self, logits: torch.Tensor, seqs: list) -> SampledBatch | list[SampledToken]:
        """The sampler over logits [S, V] of the batch's sampled sequences `seqs`, under the grammars'
        bitmask: filled on the host while the device may still run the forward (launched above),
        copied to the device as one more input. The mask needs the last step's tokens accepted first:
        with the host a step ahead, they are read back there (waiting for that step's copy alone), and
        only when a constrained request sampled. A step with drafts (a verify: each drafted sequence
        owns k + 1 rows) gets its accepted drafts and one more token each, read back here
        (engine/spec_sampling.py); structured outputs carry no drafts."""
        request_ids = [s.request_id for s in seqs]
        plain = [s.request_id for s in seqs if not s.num_drafts]
        allowed = self.grammars.bitmask(plain) if plain else None
        if allowed is not None and logits.device.type == "cuda":
            allowed = allowed.pin_memory().to(logits.device, non_blocking=True)
        if len(plain) == len(seqs):
            sampled = self.sampler.launch(logits, request_ids, allowed=allowed)
            if len(self.grammars):  # accepted when the next step's mask is filled (grammar_book.py)
                self.grammars.accept_later(request_ids, sampled.token_ids)
            return sampled
        sampled = sample_drafted(self.sampler, logits, request_ids, [s.draft_token_ids for s in seqs], allowed)
        if len(self.grammars):
            last = {s.request_id: s.token_id for s in sampled}
            self.grammars.accept_later(plain, [last[r] for r in plain])
        return sampled

    def _draft(self, plan: StepPlan, batch: GroupBatch, sampled: list[SampledToken]) -> dict[str, list[int]]:
        """The MTP layer's drafts for the sampled sequences' next step (every rank runs it)."""
        outcomes = None
        if self.sampler is not None:
            tokens: dict[str, list[int]] = {}
            for s in sampled:
                tokens.setdefault(s.request_id, []).append(s.token_id)
            outcomes = [(len(tokens[s.request_id]) - 1, tokens[s.request_id][-1]) for s in batch.seqs if s.sample]
        hidden, meta = self.runner.last_forward
        return self.drafter.propose(plan, batch, hidden, meta, outcomes)

    def close(self) -> None:
        """Deregister from NIXL before the interpreter exits (NIXL crashed at exit without it), then let
        the KV cache go: on a GPU it is most of the card, which the next engine of this process needs."""
        if self.kv_agent is not None:
            self.kv_agent.close()
            self.kv_agent = None
        if self.grammars is not None:
            self.grammars.close()
        self.runner.kv_caches = []
        if self.runner.device.type == "cuda":
            torch.cuda.empty_cache()


def group_seed(seed: int, group: int) -> int:
    """The shared-generator seed of attention group `group`: group 0 keeps `seed` (one group behaves
    as before), the others get distinct, well-separated seeds."""
    return seed if group == 0 else (seed * 1_000_003 + group * 7_919 + 1) % (2**63 - 1)
