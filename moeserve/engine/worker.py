"""One rank's share of a step: its attention group's batch through the model, sampling on TP-rank 0."""
from __future__ import annotations

from moeserve.config import EngineConfig
from moeserve.core.step_plan import SampledToken, StepPlan
from moeserve.dispatch.registry import make_dispatcher
from moeserve.engine.model_runner import ModelRunner
from moeserve.engine.sampler import Sampler
from moeserve.parallel_state import ParallelContext


class Worker:
    """Owns the model runner (weights + KV cache of this rank) and, on a group's TP-rank 0, the sampler.

    execute() is called with the same plan on every rank, in the same order; it runs the MoE layers
    even when this rank's group has no tokens, so every collective lines up across ranks.
    """

    def __init__(self, config: EngineConfig, ctx: ParallelContext, group: int = 0, dispatcher=None):
        self.group = group
        self.runner = ModelRunner(config, ctx, dispatcher)
        if ctx.ep_size > 1 and dispatcher is None:
            self.runner.model.set_dispatcher(make_dispatcher(config.parallel.dispatch, self._num_slots(), ctx))
        self.sampler = Sampler(seed=config.seed) if ctx.tp_rank == 0 else None

    def _num_slots(self) -> int:
        slots = {layer.num_slots for layer in self.runner.model.moe_layers().values()}
        assert len(slots) == 1, "every MoE layer must have the same number of physical slots"
        return slots.pop()

    def execute(self, plan: StepPlan) -> list[SampledToken]:
        if self.sampler is not None:
            for request_id in plan.finished_request_ids:
                self.sampler.remove(request_id)
            for new in plan.new_requests:
                self.sampler.add(new)
        batch = plan.groups[self.group]
        logits = self.runner.execute(batch)
        if self.sampler is None:
            return []
        request_ids = [s.request_id for s in batch.seqs if s.sample]
        return self.sampler.sample(logits, request_ids) if request_ids else []
