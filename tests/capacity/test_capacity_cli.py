"""`moeserve configure`: the JSON schema, fixed layouts, traces and plans, and mistakes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeserve.capacity.balance import assumed_balancedness, balancedness_from
from moeserve.capacity.cli import main

REPO = Path(__file__).resolve().parents[2]
TRACE = str(REPO / "traces" / "mixtral_excerpt.npz")
NUMBER_KEYS = ("input_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu", "memory_per_gpu_gb", "step_ms",
               "goodput_tokens_per_s_per_gpu", "balancedness", "batch_per_gpu")


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def check_row(row: dict) -> None:
    for key in NUMBER_KEYS:
        assert isinstance(row[key], (int, float)) and row[key] >= 0, key
    for key in ("ttft_ms", "tpot_ms"):
        assert row[key] is None or row[key] > 0, key
    assert isinstance(row["fits"], bool) and isinstance(row["meets_slo"], bool)
    assert row["phase"] in ("prefill", "decode", "colocated", "disaggregated")
    for key in ("tp", "ep", "attention_dp", "redundant_experts"):
        assert isinstance(row[key], int) and row[key] >= 0
    mem = row["memory"].get("decode", row["memory"])
    assert {"weights_gb", "kv_gb", "kv_bytes_per_token", "activations_gb", "dispatch_buffers_gb", "total_gb"} <= set(mem)


def test_ranked_json_schema(capsys):
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                   "--ttft-slo-ms", "3000", "--tpot-slo-ms", "80", "--top", "5")
    assert out["model"] == "deepseek-v3" and out["hardware"] == "h200"
    assert 1 <= len(out["deployments"]) <= 5
    for row in out["deployments"]:
        check_row(row)
    goodputs = [r["goodput_tokens_per_s_per_gpu"] for r in out["deployments"]]
    assert goodputs == sorted(goodputs, reverse=True) and goodputs[0] > 0
    check_row(out)  # the winner's fields also at the top level


@pytest.mark.parametrize("phase", ["prefill", "decode", "colocated"])
def test_fixed_layout_json(capsys, phase):
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h800", "--phase", phase, "--tp", "1", "--ep", "32",
                   "--redundant", "32", "--batch", "4096" if phase == "prefill" else "64", "--isl", "1024", "--osl", "256")
    check_row(out)
    assert out["phase"] == phase and out["ep"] == 32 and out["attention_dp"] == 32 and out["fits"]
    if phase == "prefill":
        assert out["input_tokens_per_s_per_gpu"] > 0 and out["ttft_ms"] > 0
    else:
        assert out["output_tokens_per_s_per_gpu"] > 0 and out["tpot_ms"] > 0


def test_options_move_predictions_the_right_way(capsys):
    base = ["--model", "deepseek-v3", "--hardware", "h100", "--phase", "decode", "--ep", "72", "--redundant", "32",
            "--batch", "128", "--isl", "2000", "--osl", "200"]
    plain = run_json(capsys, *base)
    tbo = run_json(capsys, *base, "--tbo")
    eager = run_json(capsys, *base, "--no-cuda-graphs")
    # MTP pays where steps are bound by reading weights (small batches), not where they are bound by compute
    small, small_mtp = (run_json(capsys, *base[:-6], "--batch", "8", *base[-4:], *extra) for extra in ([], ["--mtp-accept", "1.8"]))
    assert small_mtp["output_tokens_per_s_per_gpu"] > 1.3 * small["output_tokens_per_s_per_gpu"]
    assert small_mtp["tpot_ms"] < small["tpot_ms"]
    assert tbo["step_ms"] < plain["step_ms"]  # 9 nodes of dispatch hidden behind the other micro-batch
    assert eager["step_ms"] >= plain["step_ms"] - 1e-9


def test_a_model_that_does_not_fit_says_so(capsys):
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100", "--phase", "decode", "--tp", "8", "--batch", "8")
    assert out["fits"] is False and out["memory"]["weights_gb"] > 80


def test_trace_and_plan_set_the_balancedness(capsys, tmp_path):
    from moeserve.placement.plan import PlacementPlan

    base = ["--model", "mixtral-8x7b", "--hardware", "h100", "--phase", "decode", "--ep", "4", "--batch", "64"]
    assumed = run_json(capsys, *base)
    traced = run_json(capsys, *base, "--trace", TRACE)
    assert assumed["balancedness"] == assumed_balancedness(4, 0)
    assert traced["balancedness"] == pytest.approx(balancedness_from([TRACE], None, 4))
    plan = tmp_path / "plan.json"
    PlacementPlan.contiguous(32, 8, 4).save(str(plan))
    planned = run_json(capsys, *base, "--trace", TRACE, "--plan", str(plan))
    assert planned["balancedness"] == pytest.approx(0.8032, abs=1e-3)  # moeserve place --eval's figure, folded
    assert planned["balancedness"] <= traced["balancedness"] + 1e-9  # the optimizer beats contiguous


@pytest.mark.parametrize("argv, needle", [
    (["--hardware", "tpu9"], "not a profile file nor a known name"),
    (["--hardware", "h100", "--tp", "4", "--ep", "6"], "not a multiple of --tp 4"),
    (["--hardware", "h100", "--model", "nowhere"], "shipped"),
    (["--hardware", "h100", "--mtp-accept", "0.5"], "--mtp-accept"),
    (["--hardware", "h100", "--plan", "p.json"], "--trace"),
    (["--isl", "10"], "pass --hardware"),
])
def test_mistakes_exit_2_with_a_message(capsys, argv, needle):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_subcommand_is_registered(capsys):
    from moeserve.cli import main as moeserve_main

    assert moeserve_main(["configure", "--hardware", "cpu", "--gpus", "1", "--isl", "16", "--osl", "16", "--top", "1"]) == 0
    assert "moeserve-tiny-moe on cpu" in capsys.readouterr().out
