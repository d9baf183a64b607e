"""`configure --num-prompts`: a benchmark run replayed step by step (moeserve/capacity/bench_run.py)."""
from __future__ import annotations

import json
import math

import pytest

from moeserve.capacity import bench_run, validation, validation_runs
from moeserve.capacity.cli import main
from moeserve.capacity.hardware import load_hardware
from moeserve.capacity.layout import Layout, Precision
from moeserve.capacity.model_spec import load_model
from moeserve.capacity.predict import Options, Predictor, Workload


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor(load_model("mixtral-8x7b"), load_hardware("h100"), Precision())


LAY = Layout(8, 1, 0)  # one attention group of 8 GPUs
W = Workload(512, 64)


def test_lengths_keep_the_mean_and_exponential_has_its_tail():
    assert bench_run.lengths(5, 100, "fixed") == [100] * 5
    uni = bench_run.lengths(1000, 100, "uniform:0.5")
    assert min(uni) == 50 and max(uni) == 150 and abs(sum(uni) / 1000 - 100) < 0.5
    exp = bench_run.lengths(1000, 200, "exponential")
    assert abs(sum(exp) / 1000 - 200) < 2  # quantiles of an exponential of mean 200
    assert max(exp) == round(-200 * math.log(0.5 / 1000))  # the longest of 1,000: 7.6 means
    ins = [i for i, _ in bench_run.requests(1000, W, "exponential")]
    assert ins != sorted(ins), "arrival order must not be length order"
    for bad in ("gamma", "uniform", "uniform:1", "uniform:x", "fixed:3"):
        with pytest.raises(ValueError):
            bench_run.parse_distribution(bad)


def test_one_request_is_its_prefill_then_its_decode_steps(pred):
    o = Options()
    r = bench_run.simulate(pred, LAY, W, o, 1)
    steps = bench_run._Steps(pred, LAY, W, o)
    want = steps.prefill(512) + 63 * steps.decode(1)[0]  # the prompt's step yields token 1, then 63 decode steps
    assert r.seconds == pytest.approx(want, rel=1e-9)
    assert r.mean_ttft_ms == pytest.approx(steps.prefill(512) * 1e3, rel=1e-9)
    assert r.mean_tpot_ms == pytest.approx(steps.decode(1)[0] * 1e3, rel=1e-9)
    assert r.output_tokens_per_s_per_gpu == pytest.approx(64 / want / 8, rel=1e-9)


def test_one_sequence_at_a_time_serialises_the_run(pred):
    one = bench_run.simulate(pred, LAY, W, Options(), 1)
    four = bench_run.simulate(pred, LAY, W, Options(), 4, max_seqs=1)
    assert four.seconds == pytest.approx(4 * one.seconds, rel=1e-9) and four.peak_running == 1
    # sent slower than they finish, each request runs alone: the last arrives at 3 / rate
    spaced = bench_run.simulate(pred, LAY, W, Options(), 4, request_rate=1 / (2 * one.seconds))
    assert spaced.seconds == pytest.approx(6 * one.seconds + one.seconds, rel=1e-6)
    assert spaced.mean_ttft_ms == pytest.approx(one.mean_ttft_ms, rel=1e-6)
    # one in flight (a closed loop of 1): the same serial run, each TTFT counted from its send
    loop = bench_run.simulate(pred, LAY, W, Options(), 4, max_concurrency=1)
    assert loop.seconds == pytest.approx(4 * one.seconds, rel=1e-9)
    assert loop.mean_ttft_ms == pytest.approx(one.mean_ttft_ms, rel=1e-9) and loop.peak_running == 1
    # a cap of 8 on 64 prompts never has more than 8 decoding
    assert bench_run.simulate(pred, LAY, W, Options(), 64, "exponential", max_concurrency=8).peak_running == 8


def test_a_long_tail_drains_at_a_small_batch(pred):
    o = Options()
    fixed = bench_run.simulate(pred, LAY, W, o, 500, "fixed")
    tail = bench_run.simulate(pred, LAY, W, o, 500, "exponential")
    assert tail.output_tokens_per_s_per_gpu < 0.8 * fixed.output_tokens_per_s_per_gpu
    longest = max(out for _, out in bench_run.requests(500, W, "exponential"))
    assert tail.seconds > (longest - 1) * bench_run._Steps(pred, LAY, W, o).decode(1)[0]


def test_kv_is_taken_on_demand_and_a_full_cache_preempts(pred):
    o = Options()
    # a cache of 10 whole requests (prompt + output): 11 prompts and their next tokens fit at first, and as
    # they grow the newest are preempted and prefilled again later; every request still finishes
    capped = bench_run.simulate(pred, LAY, W, o, 50, kv_tokens=10 * (512 + 64))
    assert capped.peak_running == 11 and capped.preemptions > 0
    roomy = bench_run.simulate(pred, LAY, W, o, 50, kv_tokens=10**9)
    assert roomy.preemptions == 0 and roomy.peak_running == 50 and roomy.seconds < capped.seconds
    # long outputs: reserving whole outputs would hold 4 at once; on demand many more start
    long = Workload(100, 2000)
    r = bench_run.simulate(pred, LAY, long, o, 64, kv_tokens=4 * 2100)
    assert r.peak_running > 4 * 2100 // (100 + 2000) * 4


def test_prefill_modes_differ_as_the_engines_schedule(pred):
    mixed = bench_run.simulate(pred, LAY, W, Options(prefill="mixed"), 300, "exponential")
    stalled = bench_run.simulate(pred, LAY, W, Options(prefill="stalled"), 300, "exponential")
    assert mixed.seconds != stalled.seconds and mixed.steps != stalled.steps


def test_configure_reports_the_run(capsys):
    argv = ["--model", "mixtral-8x7b", "--hardware", "h100", "--phase", "colocated", "--tp", "8", "--batch", "32",
            "--isl", "512", "--osl", "64"]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"] is None
    assert main([*argv, "--num-prompts", "200", "--length-dist", "uniform:0.5", "--request-rate", "50",
                 "--max-concurrency", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    run = out["run"]
    assert run["prompts"] == 200 and run["seconds"] > 200 / 50 * 0.99 and run["output_tokens_per_s_per_gpu"] > 0
    assert any(n.startswith("a run of 200 prompts sent at 50 a second, at most 64 in flight") for n in out["notes"])
    assert main([*argv[:5], "prefill", *argv[6:], "--num-prompts", "10", "--json"]) == 0  # no run for a prefill side
    out = json.loads(capsys.readouterr().out)
    assert out["run"] is None and any("--num-prompts: the first row is a prefill" in n for n in out["notes"])
    with pytest.raises(SystemExit) as e:  # argparse's own refusal
        main([*argv, "--length-dist", "zipf"])
    assert e.value.code == 2
    for bad in (["--num-prompts", "0"], ["--request-rate", "0", "--num-prompts", "5"], ["--max-num-seqs", "0"],
                ["--max-concurrency", "0"]):
        assert main([*argv, *bad]) == 2
    assert "out of range" in capsys.readouterr().err


def test_every_replayed_case_exists_and_is_a_run():
    names = {c.name for c in validation.CASES if c.run}
    recorded_as_runs = {c.name for c in validation.RECORDED_CASES if c.run}  # a part's own runs (blind 26's waves)
    assert recorded_as_runs and not recorded_as_runs & set(validation_runs.RUNS)
    assert names == set(validation_runs.RUNS) | recorded_as_runs
    with pytest.raises(ValueError, match="names no case"):
        validation_runs.as_runs([])
