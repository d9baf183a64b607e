"""The engine core of a decode server while KV reads run beside its steps (an executor double whose
reads end a few steps after they start): an engine with only an aborted request's read left keeps
stepping until the read ends, so its blocks come back without waiting for the next request."""
from __future__ import annotations

from moeserve.config import CacheConfig, EngineConfig, KvTransferConfig, ModelConfig
from moeserve.core.step_plan import KvPullDone, SampledToken, StepResult
from moeserve.kv_transfer.params import KvTransfer, RemotePrefill
from moeserve.sampling_params import SamplingParams
from tiny_models import make_checkpoint


class ReadingExecutor:
    """Every KvPull ends `delay` steps after the step that started it; every sampled seq gets token 5."""

    num_blocks, max_model_len, num_groups = 32, 128, 1

    def __init__(self, vocab_size: int, delay: int):
        self.vocab_size, self.delay = vocab_size, delay
        self.steps, self.reading = 0, []

    def execute(self, plan) -> StepResult:
        self.steps += 1
        self.reading += [(self.steps + self.delay, pull) for pull in plan.kv_pulls]
        done = [KvPullDone(p.request_id, 64) for due, p in self.reading if due <= self.steps]
        self.reading = [(due, p) for due, p in self.reading if due > self.steps]
        sampled = [SampledToken(s.request_id, 5) for g in plan.groups for s in g.seqs if s.sample]
        return StepResult(plan.step, sampled, kv_pulls=done)

    def kv_layouts(self) -> list[dict]:
        return [{"group": 0, "head_start": 0, "block_bytes": [64]}]

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


def _engine(tmp_path, delay: int):
    from moeserve.engine.engine_core import EngineCore

    hf, path = make_checkpoint("mixtral", tmp_path)
    config = EngineConfig(model=ModelConfig(model=str(path)), cache=CacheConfig(block_size=4, num_blocks=32),
                          kv_transfer=KvTransferConfig(role="decode"))
    executor = ReadingExecutor(hf.vocab_size, delay)
    return EngineCore(config, executor=executor), executor


def _remote(rid: str, n_prompt: int) -> KvTransfer:
    blocks = list(range(-(-n_prompt // 4)))
    return KvTransfer(remote_prefill=RemotePrefill("engine-p", rid, blocks, "127.0.0.1", 9))


def test_a_request_aborted_mid_read_gets_its_blocks_back_without_another_request(tmp_path):
    engine, executor = _engine(tmp_path, delay=4)
    try:
        prompt = list(range(3, 20))
        engine.add_request("d", prompt, SamplingParams(max_tokens=3), kv_transfer=_remote("p", len(prompt)))
        engine.step()  # admitted; its read starts
        assert executor.reading and engine.scheduler.total_block_usage().in_use == 5
        engine.abort_request("d")
        outputs = []
        while engine.has_unfinished_requests():  # what the engine loop asks before each step
            outputs += engine.step()
        assert [o.finish_reason for o in outputs] == ["abort"]
        assert not executor.reading and engine.scheduler.total_block_usage().in_use == 0
    finally:
        engine.shutdown()


def test_a_read_request_runs_from_its_last_prompt_token_once_the_read_ends(tmp_path):
    engine, executor = _engine(tmp_path, delay=3)
    try:
        prompt = list(range(3, 20))
        engine.add_request("d", prompt, SamplingParams(max_tokens=3, ignore_eos=True),
                           kv_transfer=_remote("p", len(prompt)))
        outputs = []
        while engine.has_unfinished_requests():
            outputs += engine.step()
        assert outputs[-1].token_ids == [5, 5, 5] and outputs[-1].finish_reason == "length"
        assert engine.scheduler.num_prompt_tokens_computed == 1
        assert engine.stats()["kv_transfer_bytes_pulled"] == 64
    finally:
        engine.shutdown()
