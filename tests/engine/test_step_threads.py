"""The per-step choice between one intra-op thread with forks and all of the rank's cores without
(kernels/cpu/step_threads.py): how it probes and backs off, that it restores the process's threads, that
a bit mismatch pins it narrow, and that for every architecture either way gives the same bits."""

from __future__ import annotations

import logging

import pytest
import torch

from moeserve.config import CacheConfig, EngineConfig, ModelConfig
from moeserve.core.step_plan import GroupBatch, ScheduledSeq
from moeserve.engine import model_runner
from moeserve.engine.model_runner import ModelRunner
from moeserve.kernels.cpu import threads as cpu_threads
from moeserve.kernels.cpu.gemm import row_checks
from moeserve.kernels.cpu.kernel_set import CpuKernels
from moeserve.kernels.cpu.split_chooser import SplitChooser
from moeserve.kernels.cpu.step_threads import StepThreads, same_bits, sweep_rows
from moeserve.kernels.cpu.threads import step_threads
from moeserve.parallel_state import SINGLE, ParallelContext
from tiny_models import ALL_ARCHITECTURES, arch_params, make_any_checkpoint, make_checkpoint


def drive(chooser: StepThreads, tokens: int, steps: int, narrow_s: float, wide_s: float) -> list[bool]:
    """Feed `steps` steps of `tokens` tokens that take narrow_s / wide_s seconds; the ways used."""
    ways = []
    for _ in range(steps):
        wide = chooser.use_wide(tokens)
        chooser.record(tokens, wide, wide_s if wide else narrow_s)
        ways.append(wide)
    return ways


def test_probes_both_ways_then_runs_the_faster_and_probes_again_each_period():
    chooser = StepThreads(1, 2)
    ways = drive(chooser, 64, 2 * chooser.PERIOD, narrow_s=0.010, wide_s=0.008)
    probes = 2 * chooser.PROBES
    assert ways[:probes] == [False] * chooser.PROBES + [True] * chooser.PROBES
    assert all(ways[probes : chooser.PERIOD])  # wide is faster
    period = chooser.PERIOD
    assert ways[period : period + probes] == [False] * chooser.PROBES + [True] * chooser.PROBES
    assert all(ways[period + probes :])
    assert chooser.buckets[(64).bit_length()].period == chooser.PERIOD  # a close race: no back-off


def test_a_way_that_collapses_is_probed_ever_more_rarely():
    chooser = StepThreads(1, 2)
    steps = 4 * chooser.MAX_PERIOD
    ways = drive(chooser, 64, steps, narrow_s=0.010, wide_s=0.100)  # wide 10x slower: the other core is busy
    assert sum(ways) < 40  # 2 wide probes per round; periods 64, 128, ... capped at MAX_PERIOD
    assert chooser.buckets[(64).bit_length()].period == chooser.MAX_PERIOD
    # the other core frees up: the next probe round times both ways afresh and wide takes over
    drive(chooser, 64, chooser.MAX_PERIOD, narrow_s=0.010, wide_s=0.005)
    assert chooser.use_wide(64)
    # a close race again: back to the short period
    drive(chooser, 64, 2 * chooser.MAX_PERIOD, narrow_s=0.010, wide_s=0.009)
    assert chooser.buckets[(64).bit_length()].period == chooser.PERIOD


def test_one_probe_slowed_by_another_process_does_not_decide_the_round():
    chooser = StepThreads(1, 2)
    times = iter([0.010, 0.010, 0.100, 0.007])  # narrow, narrow, wide (a burst elsewhere), wide
    for _ in range(2 * chooser.PROBES):
        wide = chooser.use_wide(64)
        chooser.record(64, wide, next(times))
    assert chooser.use_wide(64)
    assert chooser.buckets[(64).bit_length()].period == chooser.PERIOD  # not lopsided: no back-off


def test_one_slow_step_of_the_way_in_use_starts_a_probe_round_instead_of_switching():
    """wide won (1.0 vs 1.7); one wide step is 4x slow: both ways are timed afresh and wide keeps
    the bucket, instead of narrow running until the next scheduled round."""
    chooser = StepThreads(1, 2)
    drive(chooser, 64, 2 * chooser.PROBES + 3, narrow_s=1.7, wide_s=1.0)
    assert chooser.use_wide(64)
    chooser.record(64, True, 4.0)
    ways = drive(chooser, 64, 40, narrow_s=1.7, wide_s=1.0)
    assert ways.count(False) == chooser.PROBES  # the fresh round's narrow probes, nothing more
    assert all(ways[2 * chooser.PROBES :])


def test_the_way_in_use_follows_its_own_steps_between_probes():
    """wide won the probes, then slows down (load arrives): its running mean, not a probe, hands
    the steps back to narrow."""
    chooser = StepThreads(1, 2)
    drive(chooser, 64, 2 * chooser.PROBES, narrow_s=0.010, wide_s=0.008)
    ways = drive(chooser, 64, 10, narrow_s=0.010, wide_s=0.030)
    assert ways[0] and not ways[-1]


def test_each_step_size_bucket_decides_alone():
    chooser = StepThreads(1, 2)
    drive(chooser, 8, 20, narrow_s=0.002, wide_s=0.004)
    drive(chooser, 100, 20, narrow_s=0.03, wide_s=0.02)
    assert not chooser.use_wide(9) and chooser.use_wide(90)


def test_steps_above_the_token_limit_always_run_narrow_and_untimed():
    torch.set_num_threads(1)
    chooser = StepThreads(1, 2, max_tokens=16)
    assert not any(chooser.use_wide(17) for _ in range(10))
    with chooser.step(500):
        assert torch.get_num_threads() == 1 and SplitChooser.forks_enabled
    assert chooser.buckets == {}


def test_a_step_that_raised_leaves_no_half_known_choice():
    chooser = StepThreads(1, 2)
    for _ in range(2 * chooser.PROBES):
        chooser.use_wide(64)  # no timings recorded: every probe raised
    assert chooser.use_wide(64) is False


def test_the_wide_setting_is_undone_even_when_the_step_raises():
    torch.set_num_threads(1)
    chooser = StepThreads(1, 2)
    with pytest.raises(RuntimeError):
        with chooser.setting(True):
            assert torch.get_num_threads() == 2 and SplitChooser.forks_enabled is False
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 1 and SplitChooser.forks_enabled is True


def test_the_wide_setting_restores_what_was_there_not_what_it_assumes():
    torch.set_num_threads(3)  # changed after start-up, by the user or another engine in the process
    try:
        outer, inner = StepThreads(1, 2), StepThreads(1, 4)
        with outer.setting(True):
            with inner.setting(True):
                assert torch.get_num_threads() == 4
            assert torch.get_num_threads() == 2 and SplitChooser.forks_enabled is False
        assert torch.get_num_threads() == 3 and SplitChooser.forks_enabled is True
    finally:
        torch.set_num_threads(1)


def test_no_forks_while_wide():
    calls = []
    split_chooser = SplitChooser()
    SplitChooser.forks_enabled = False
    try:
        out = split_chooser.timed(8, lambda: calls.append("serial") or 1, lambda: calls.append("split") or 2)
    finally:
        SplitChooser.forks_enabled = True
    assert out == 1 and calls == ["serial"] and split_chooser.stats == {}


def test_a_bit_mismatch_pins_the_narrow_way(caplog):
    chooser = StepThreads(1, 2)
    differs = lambda: torch.tensor([float(torch.get_num_threads())])  # noqa: E731
    with caplog.at_level(logging.WARNING):
        assert chooser.verify([lambda: torch.ones(3), differs]) is False
    assert "change the bits" in caplog.text
    assert not chooser.use_wide(64)
    with chooser.step(64):
        assert torch.get_num_threads() == 1
    assert chooser.buckets == {}


def test_a_check_that_fails_pins_the_narrow_way_instead_of_failing_start_up(caplog):
    def fails() -> torch.Tensor:
        raise MemoryError("no room for the check")

    chooser = StepThreads(1, 2)
    with caplog.at_level(logging.WARNING):
        assert chooser.verify([fails]) is False
    assert "could not be checked (MemoryError" in caplog.text and not chooser.enabled


def test_bits_are_compared_as_bits():
    nan = torch.tensor([float("nan"), 1.0])
    assert same_bits(nan, nan.clone())  # torch.equal would call these different
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))  # torch.equal would call these equal
    assert not same_bits(torch.ones(2), torch.ones(3))


def test_the_gemm_check_runs_every_decode_row_count_and_a_spread_of_prefill_ones():
    assert sweep_rows(5) == [1, 2, 3, 4, 5]
    rows = sweep_rows(2048)
    assert rows[:128] == list(range(1, 129)) and rows[-1] == 2048
    assert {191, 255, 256, 1023, 1024, 1535, 2047} <= set(rows) and len(rows) < 160
    assert sweep_rows(300)[-1] == 300


def test_the_lm_head_is_checked_only_up_to_the_rows_it_sees_in_a_step(tmp_path):
    torch.set_num_threads(1)
    runner = runner_for(make_checkpoint("mixtral", tmp_path)[1])
    head = runner.model.lm_head.kernel_state.packed
    checks = row_checks(runner.model, [1, 5, 9], {id(head): 5})
    shapes = {tuple(check().shape) for check in checks}
    assert (2, 3) in shapes and (3, 3) in shapes  # the LM head: rows 1 and 5; the others: 1, 5, 9


def test_the_largest_wide_step_is_the_largest_forward_checked(tmp_path):
    torch.set_num_threads(1)
    runner = runner_for(make_checkpoint("mixtral", tmp_path)[1], num_blocks=8)  # 8 blocks of 4: 32 slots
    runner.kernels.step_threads = StepThreads(1, 2, 2048)
    runner.kernels.thread_checks(runner.sample_forwards)
    assert runner.kernels.step_threads.max_tokens == 31  # one slot stays for the decode token of the check
    assert not runner.kernels.step_threads.use_wide(32)


def test_who_gets_a_chooser(monkeypatch, tmp_path):
    torch.set_num_threads(1)
    monkeypatch.delenv("MOESERVE_NUM_THREADS", raising=False)
    model = runner_for(make_checkpoint("mixtral", tmp_path)[1]).model
    assert step_threads(2, None, SINGLE, model).wide == 2
    assert step_threads(2, 1, SINGLE, model) is None  # --num-threads pins the count
    assert step_threads(1, None, SINGLE, model) is None  # no second core
    assert step_threads(2, None, ParallelContext(ep_size=2), model) is None  # ranks time their own steps
    unpacked = runner_for(make_checkpoint("mixtral", tmp_path / "bf16")[1], dtype="bfloat16").model
    assert step_threads(2, None, SINGLE, unpacked) is None  # no fp32 packed GEMMs: nothing the check sweeps
    monkeypatch.setenv("MOESERVE_NUM_THREADS", "1")
    assert step_threads(2, None, SINGLE, model) is None


def test_a_mismatch_at_start_up_leaves_the_engine_narrow(monkeypatch, tmp_path):
    torch.set_num_threads(1)
    monkeypatch.setattr(cpu_threads, "cores_per_rank", lambda ranks_per_node, reserved=0: 2)
    monkeypatch.setattr(
        CpuKernels, "thread_checks", lambda self, forwards: [lambda: torch.tensor([float(torch.get_num_threads())])]
    )
    runner = runner_for(make_checkpoint("mixtral", tmp_path)[1])
    assert runner.kernels.step_threads is not None and not runner.kernels.step_threads.enabled


def test_sampling_and_prompt_logprobs_run_outside_the_wide_region(monkeypatch, tmp_path):
    """Every step forced wide: the sampler and the prompt-logprob reduction still see one thread."""
    from moeserve import LLM, SamplingParams
    from moeserve.engine import sampler

    torch.set_num_threads(1)
    monkeypatch.setattr(cpu_threads, "cores_per_rank", lambda ranks_per_node, reserved=0: 2)
    monkeypatch.setattr(StepThreads, "use_wide", lambda self, tokens: True)
    seen = []
    sample, prompt = sampler.Sampler.launch, model_runner.prompt_logprobs  # the worker launches the sampler

    def spy(fn):
        def wrapped(*args, **kwargs):
            seen.append((fn.__name__, torch.get_num_threads(), SplitChooser.forks_enabled))
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(sampler.Sampler, "launch", spy(sample))
    monkeypatch.setattr(model_runner, "prompt_logprobs", spy(prompt))
    llm = LLM(model=str(make_checkpoint("mixtral", tmp_path)[1]))
    llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=3, temperature=0.8, seed=1, prompt_logprobs=1))
    assert {name for name, _, _ in seen} == {"launch", "prompt_logprobs"}
    assert all(threads == 1 and forks for _, threads, forks in seen), seen


@pytest.fixture(scope="module", params=arch_params(ALL_ARCHITECTURES + ["mixtral-mha", "mixtral-gqa3"]))
def checkpoint(request, tmp_path_factory):
    """Every architecture, plus query heads per KV head of 1 and 3 (flash attention's thread-sensitive
    row counts, kernels/cpu/attention.py `thread_invariant_sdpa`)."""
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "mixtral-mha":
        return make_checkpoint("mixtral", path, num_key_value_heads=4)[1]
    if request.param == "mixtral-gqa3":
        return make_checkpoint("mixtral", path, num_attention_heads=6, num_key_value_heads=2, head_dim=16)[1]
    return make_any_checkpoint(request.param, path)[1]


def runner_for(path, num_blocks: int = 32, dtype: str = "float32") -> ModelRunner:
    cfg = EngineConfig(
        model=ModelConfig(model=str(path), dtype=dtype), cache=CacheConfig(block_size=4, num_blocks=num_blocks)
    )
    return ModelRunner(cfg, SINGLE)


def test_either_way_at_any_step_gives_the_same_bits(checkpoint, monkeypatch):
    """Three requests through prefill, a mixed step and decodes, once all narrow and once switching
    way at every step (wide, narrow, wide, ...): every logit bit is the same."""
    torch.set_num_threads(1)
    runner = runner_for(checkpoint)
    runner.kernels.step_threads = StepThreads(1, 2, 2048)
    assert runner.kernels.step_threads.verify(runner.kernels.thread_checks(runner.sample_forwards))
    gen = torch.Generator().manual_seed(3)
    prompts = {rid: torch.randint(0, 96, (n,), generator=gen).tolist() for rid, n in (("a", 13), ("b", 6), ("c", 9))}
    steps = [[("a", 0, 8), ("b", 0, 6)], [("a", 8, 13), ("b", 6, 7), ("c", 0, 9)]] + [
        [("a", e, e + 1), ("b", e - 6, e - 5), ("c", e - 4, e - 3)] for e in range(13, 18)
    ]

    def run(choose) -> list[torch.Tensor]:
        monkeypatch.setattr(runner.kernels.step_threads, "use_wide", choose)
        tokens = {rid: list(p) + [7, 11, 13, 17, 19] for rid, p in prompts.items()}
        tables = {rid: list(range(i * 8, i * 8 + 8)) for i, rid in enumerate(prompts)}
        out = []
        for step in steps:
            batch = GroupBatch(0, [ScheduledSeq(r, tokens[r][s:e], s, tables[r], True) for r, s, e in step])
            out.append(runner.execute(batch))
        return out

    assert runner.kernels.step_threads.enabled  # the start-up check found both ways equal
    narrow = run(lambda tokens: False)
    flips = iter(range(100))
    switching = run(lambda tokens: next(flips) % 2 == 0)
    assert torch.get_num_threads() == 1
    for a, b in zip(narrow, switching):
        assert torch.equal(a, b)


def test_the_start_up_checks_fit_a_tiny_kv_pool(tmp_path):
    """One 4-slot block: the check forward shrinks its sequences to what fits instead of failing."""
    torch.set_num_threads(1)
    runner = runner_for(make_checkpoint("mixtral", tmp_path)[1], num_blocks=1)
    runner.kernels.step_threads = StepThreads(1, 2, 2048)
    checks = runner.kernels.thread_checks(runner.sample_forwards)
    assert len(checks) >= 3  # a prefill and a decode of what fits, and the GEMM sweeps
    assert runner.kernels.step_threads.verify(checks)


def test_reserved_cores_leave_the_rank_a_smaller_share(monkeypatch):
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: set(range(8)))
    assert cpu_threads.cores_per_rank(1) == 8
    assert cpu_threads.cores_per_rank(1, 1) == 7
    assert cpu_threads.cores_per_rank(2, 1) == 3
    assert cpu_threads.cores_per_rank(16, 1) == 1
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1})
    assert cpu_threads.cores_per_rank(1, 1) == 1 and cpu_threads.cores_per_rank(1, 5) == 1
