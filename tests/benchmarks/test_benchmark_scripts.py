"""The side-by-side benchmark scripts still run end to end (without a vLLM peer, tiny loads): their
numbers go into the README, so a script that rots must fail here, not on the day it is needed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, timeout: float = 600) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), *args, "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1] if name == "offline_throughput.py" else proc.stdout)


@pytest.mark.slow
def test_offline_benchmark_runs_every_spec_and_checks_tokens():
    result = run_script("offline_throughput.py", "--prompts", "4", "--new-tokens", "4", "--repeats", "2",
                        "--hf-prompts", "2", "--runs", "1:1", "1:2", "1:1:nopanel:noattn")
    assert result["rounds"] == 2 and len(result["1:2_tok_s_runs"]) == 2
    assert result["1:1_identical_to_transformers"] == "2/2"
    assert result["1:2_identical_to_1:1"] == "4/4"  # splitting the experts never changes a token
    assert result["1:1:nopanel:noattn_identical_to_1:1"] == "4/4"  # nor does torch's path in place of the kernels
    assert result["1:1_tok_s_best"] > 0


@pytest.mark.slow
def test_serving_benchmark_runs_rounds_against_each_server():
    result = run_script("serve_vs_vllm.py", "--num-requests", "4", "--concurrency", "2", "--input-len", "8",
                        "--output-len", "4", "--rounds", "2", "--runs", "1:1", "1:1:nosplit:h11")
    for name in ("moeserve[1:1]", "moeserve[1:1:nosplit:h11]"):
        runs = result["rounds"][name]
        assert len(runs) == 2
        assert all(r["completed"] == 4 and r["output_throughput"] > 0 for r in runs)
        assert all(r["cpu_s"]["engine"] > 0 for r in runs)
        pool = result["pooled"][name]  # every request of both rounds
        assert pool["num_requests"] == 8 and pool["ttft_ms"]["max"] >= pool["ttft_ms"]["p99"] >= pool["ttft_ms"]["p50"] > 0
    # the greedy completions compared across servers (against vLLM's when it runs)
    ids = result["greedy_token_ids"]
    assert [len(t) for t in ids["moeserve[1:1]"]] == [4] * 4 and ids["moeserve[1:1]"] == ids["moeserve[1:1:nosplit:h11]"]


def test_run_specs_name_their_kernel_switches():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import thread_specs
    finally:
        sys.path.pop(0)
    assert thread_specs.parse_run("auto:2:noattn") == (None, 2)
    assert thread_specs.server_env("1:1:nopanel:noattn", {"A": "1"}) == {
        "A": "1", "MOESERVE_PANEL_GEMM": "0", "MOESERVE_DECODE_ATTENTION": "0"}
    assert thread_specs.uses_panels("1:1:noattn") and not thread_specs.uses_panels("1:1:nopanel")
    assert thread_specs.server_env("auto:auto:h11", {}) == {"MOESERVE_FAST_HTTP": "0"}
    assert thread_specs.cli_flags("auto:auto:reserved0:nosplit") == ["--no-split-prefill-bursts", "--reserved-cores", "0"]
    assert thread_specs.cli_flags("auto:auto:budget96:nosplit") == ["--max-num-batched-tokens", "96", "--no-split-prefill-bursts"]
    assert thread_specs.server_env("auto:auto:budget96:nosplit:nobind", {}) == {"MOESERVE_CPU_BIND": "0"}
    for bad in ("1", "1:1:fast", "x:1", "1:1:budget0", "1:1:budgetx"):
        try:
            thread_specs.parse_run(bad)
        except SystemExit as exc:
            assert "bad run spec" in str(exc)
        else:
            raise AssertionError(bad)


@pytest.mark.slow
def test_speculative_decoding_benchmark_runs_both_servers(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("said he, and she said, and he said, and she said,\none, two, three, one, two, three, one,\n")
    out = tmp_path / "spec.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "spec_decode.py"), "--prompts", str(prompts),
                           "--output-len", "12", "--rounds", "2", "--json", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["greedy_identical"] and len(result["speedups"]) == 4 and result["spec_tok_s"] > 0  # 2 rounds x 2 prompts
    assert result["mean_acceptance_length"] > 1.0 and len(result["per_position_acceptance_rate"]) == 3


@pytest.mark.slow
def test_n_shared_prefill_counts_one_prefill_for_n_samples():
    result = run_script("n_shared_prefill.py", "--n", "3", "--prompt-len", "40", "--budgets", "256")
    shared, separate = result["cases"]["256/prefix caching"], result["cases"]["256/no prefix caching"]
    assert shared["cached_per_sample"] == [0, 32, 32] and separate["cached_per_sample"] == [0, 0, 0]
    assert (shared["prompt_tokens_computed"], separate["prompt_tokens_computed"]) == (40 + 2 * 8, 3 * 40)
    assert shared["tokens_equal"]
