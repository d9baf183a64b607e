"""Executors run a StepPlan on every rank and gather the sampled tokens. The engine core sees only
`execute(plan) -> StepResult` plus a few facts about the model (blocks, max length, vocab)."""
from __future__ import annotations

from typing import Protocol

from moeserve.config import EngineConfig
from moeserve.core.step_plan import StepPlan, StepResult
from moeserve.parallel_state import SINGLE


class StepFuture(Protocol):
    def result(self) -> StepResult:
        """The step's sampled tokens, read back (waits for them alone)."""
        ...


class Executor(Protocol):
    num_blocks: int
    max_model_len: int
    vocab_size: int
    num_groups: int
    # attention groups whose sampling rank is another process than the engine core's: it compiles each
    # grammar again before the request is scheduled (core/scheduler.py)
    remote_sampling_groups: frozenset[int]

    def execute(self, plan: StepPlan) -> StepResult: ...

    def submit(self, plan: StepPlan, ahead: bool = True) -> StepFuture:
        """Queue the step on every rank and return before its tokens are read (async scheduling):
        the engine schedules the next plan meanwhile. Results are taken in submission order."""
        ...

    def check_health(self) -> None: ...

    def kv_layouts(self) -> list[dict]:
        """Each rank's NIXL CacheLayout (JSON), rank order; only with --kv-transfer nixl."""
        ...

    def shutdown(self) -> None: ...


class InProcessExecutor:
    """World of one: the worker lives in the engine's own process."""

    num_groups = 1
    remote_sampling_groups: frozenset[int] = frozenset()

    def __init__(self, config: EngineConfig):
        from moeserve.engine.worker import Worker

        self.worker = Worker(config, SINGLE)
        runner = self.worker.runner
        self.num_blocks = runner.num_blocks
        self.max_model_len = runner.max_model_len
        self.vocab_size = runner.hf_config.vocab_size

    def execute(self, plan: StepPlan) -> StepResult:
        return self.worker.execute(plan)

    def submit(self, plan: StepPlan, ahead: bool = True) -> StepFuture:
        return self.worker.launch(plan)

    def check_health(self) -> None:
        return None

    def kv_layouts(self) -> list[dict]:
        assert self.worker.kv_agent is not None
        return [self.worker.kv_agent.layout()]

    def shutdown(self) -> None:
        self.worker.close()


def make_executor(config: EngineConfig) -> Executor:
    if config.parallel.world_size == 1:
        return InProcessExecutor(config)
    from moeserve.engine.multiproc_executor import MultiprocExecutor

    return MultiprocExecutor(config)
