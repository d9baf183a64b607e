"""`moeserve configure`: the JSON schema, fixed layouts, traces and plans, and mistakes."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from moeserve.capacity.balance import assumed_balancedness, balancedness_from
from moeserve.capacity.cli import main
from moeserve.placement.importers import load_trace
from moeserve.placement.trace import merge_traces

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
def test_phase_alone_ranks_that_phase_over_the_gpus(capsys, phase):
    """--phase without a layout axis or a batch ranks that phase's layouts over --gpus (it predicted one rank
    at tp 1, ep 1, which does not fit DeepSeek-V3); each row is what the same layout fixed predicts."""
    base = ["--model", "deepseek-v3", "--hardware", "h200", "--phase", phase, "--isl", "2000", "--osl", "400"]
    out = run_json(capsys, *base, "--gpus", "16", "--top", "4")
    rows = out["deployments"]
    assert 2 <= len(rows) <= 4
    for row in rows:
        check_row(row)
        assert row["phase"] == phase and row["fits"] and 16 % row["world"] == 0
    key = "input_tokens_per_s_per_gpu" if phase == "prefill" else "goodput_tokens_per_s_per_gpu"
    assert [r[key] for r in rows] == sorted((r[key] for r in rows), reverse=True) and rows[0][key] > 0
    best = rows[0]
    one = run_json(capsys, *base, "--tp", str(best["tp"]), "--ep", str(best["ep"]),
                   "--redundant", str(best["redundant_experts"]), "--batch", str(best["batch_per_gpu"]))
    assert one["phase"] == phase and one[key] == pytest.approx(best[key])


def test_phase_alone_ranks_prefill_sides_missing_the_ttft_objective_at_their_shortest_ttft(capsys):
    """No prefill side of DeepSeek-V3 on 8 H200s reaches a first token in 100 ms: the table says so (it said
    "no prefill layout fits") and shows each layout at its batch of the shortest TTFT."""
    base = ["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--phase", "prefill"]
    out = run_json(capsys, *base, "--ttft-slo-ms", "100", "--top", "3")
    assert any("no deployment here meets the SLOs (goodput 0): ranked by input tokens/s" in n for n in out["notes"])
    for row in out["deployments"]:
        assert row["phase"] == "prefill" and row["fits"] and row["goodput_tokens_per_s_per_gpu"] == 0
        assert row["ttft_ms"] > 100
        shortest = min(run_json(capsys, *base, "--tp", str(row["tp"]), "--ep", str(row["ep"]), "--redundant",
                                str(row["redundant_experts"]), "--batch", str(b))["ttft_ms"] for b in (512, 1024, 2048))
        assert row["ttft_ms"] == pytest.approx(shortest)


def test_phase_alone_says_when_no_layout_of_it_fits(capsys):
    argv = ["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "2", "--phase", "decode"]
    assert main(argv) == 2
    assert "no decode layout fits: deepseek-v3 on 2 x h200" in capsys.readouterr().err


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
    # SGLang's own prefill passes of the few prompts that arrived cost more than shared 8,192-token chunks
    colo = ["--model", "deepseek-r1", "--hardware", "b200", "--phase", "colocated", "--tp", "8", "--batch", "11.5",
            "--isl", "500", "--osl", "500"]
    chunked, separate = run_json(capsys, *colo), run_json(capsys, *colo, "--colocated-prefill", "separate")
    assert separate["output_tokens_per_s_per_gpu"] < chunked["output_tokens_per_s_per_gpu"]
    assert separate["tpot_ms"] > chunked["tpot_ms"]
    # decodes that wait out each chunk (SGLang without mixed chunks) yield fewer tokens than ones riding in it
    waiting = run_json(capsys, *colo, "--colocated-prefill", "stalled")
    assert waiting["output_tokens_per_s_per_gpu"] < chunked["output_tokens_per_s_per_gpu"]
    assert run_json(capsys, *colo, "--colocated-prefill", "mixed") == chunked  # the default
    # the same passes compiled (ROCm ATOM) lose the eager layer's host time: between the chunks and the eager passes
    compiled = run_json(capsys, *colo, "--colocated-prefill", "separate-compiled")
    assert separate["tpot_ms"] > compiled["tpot_ms"] and compiled["step_ms"] == separate["step_ms"]


def test_engine_plans_colocated_prefill_as_its_default_scheduler_runs_it(capsys):
    """--engine sglang plans colocated prefill as SGLang's default scheduler runs it (separate eager passes) and
    says so; --colocated-prefill overrides the engine; vLLM and TensorRT-LLM mix prompt chunks into the decode
    steps, the default without --engine."""
    colo = ["--model", "deepseek-r1", "--hardware", "b200", "--phase", "colocated", "--tp", "8", "--batch", "11.5",
            "--isl", "500", "--osl", "500"]
    figures = ("tpot_ms", "ttft_ms", "output_tokens_per_s_per_gpu", "step_ms")
    plain, separate = run_json(capsys, *colo), run_json(capsys, *colo, "--colocated-prefill", "separate")
    sglang = run_json(capsys, *colo, "--engine", "sglang")
    assert [sglang[k] for k in figures] == [separate[k] for k in figures] != [plain[k] for k in figures]
    assert "colocated prefill: separate, SGLang's default scheduler (--colocated-prefill sets another)" in sglang["notes"]
    told = run_json(capsys, *colo, "--engine", "sglang", "--colocated-prefill", "mixed")
    assert [told[k] for k in figures] == [plain[k] for k in figures]
    assert not any(n.startswith("colocated prefill:") for n in told["notes"] + plain["notes"])
    for engine, name in (("vllm", "vLLM"), ("trtllm", "TensorRT-LLM")):
        mixed = run_json(capsys, *colo, "--engine", engine)
        assert [mixed[k] for k in figures] == [plain[k] for k in figures]
        assert f"colocated prefill: mixed, {name}'s default scheduler (--colocated-prefill sets another)" in mixed["notes"]
    # ATOM's server (AMD cards) prefills in compiled passes of their own
    amd = ["--model", "qwen3-235b-a22b", "--hardware", "mi355x", "--phase", "colocated", "--tp", "8", "--ep", "8",
           "--batch", "32", "--isl", "1000", "--osl", "1000"]
    atom, compiled = run_json(capsys, *amd, "--engine", "atom"), run_json(capsys, *amd, "--colocated-prefill", "separate-compiled")
    assert [atom[k] for k in figures] == [compiled[k] for k in figures]
    assert "colocated prefill: separate-compiled, ATOM's default scheduler (--colocated-prefill sets another)" in atom["notes"]


def test_colocated_prefill_old_flags_are_deprecated_aliases(capsys):
    """--separate-prefill and --no-mixed-steps still work, say what replaces them, and match it exactly."""
    colo = ["--model", "deepseek-r1", "--hardware", "b200", "--phase", "colocated", "--tp", "8", "--batch", "11.5",
            "--isl", "500", "--osl", "500", "--json"]
    for old, mode in (("--separate-prefill", "separate"), ("--no-mixed-steps", "stalled")):
        assert main([*colo, "--colocated-prefill", mode]) == 0
        new = capsys.readouterr()
        assert main([*colo, old]) == 0 and main([*colo, old, "--colocated-prefill", mode]) == 0
        aliased = capsys.readouterr()
        assert aliased.out == new.out * 2 and new.err == ""
        assert aliased.err.splitlines() == [f"moeserve configure: warning: {old} is deprecated: use "
                                            f"--colocated-prefill {mode}"] * 2


@pytest.mark.parametrize("argv, needle", [
    (["--colocated-prefill", "chunked"], "argument --colocated-prefill: invalid choice: 'chunked' (choose from 'mixed', 'stalled', 'separate', 'separate-compiled')"),
    (["--separate-prefill", "--no-mixed-steps"],
     "--no-mixed-steps (--colocated-prefill stalled) contradicts --separate-prefill (--colocated-prefill separate)"),
    (["--colocated-prefill", "stalled", "--separate-prefill"],
     "--separate-prefill (--colocated-prefill separate) contradicts --colocated-prefill stalled"),
    (["--no-mixed-steps", "--colocated-prefill", "mixed"],
     "--colocated-prefill mixed contradicts --no-mixed-steps (--colocated-prefill stalled)"),
    (["--colocated-prefill", "mixed", "--colocated-prefill", "separate"],
     "--colocated-prefill separate contradicts --colocated-prefill mixed"),
])
def test_colocated_prefill_unknown_or_contradicting_exits_2_with_one_line(capsys, argv, needle):
    assert exit_code(["--model", "deepseek-r1", "--hardware", "b200", "--phase", "colocated", "--tp", "8", *argv]) == 2
    captured = capsys.readouterr()
    tail = "" if "invalid choice" in needle else ": give one --colocated-prefill"
    assert captured.out == "" and captured.err.splitlines() == [f"moeserve configure: error: {needle}{tail}"], captured.err


def test_a_model_that_does_not_fit_says_so(capsys):
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100", "--phase", "decode", "--tp", "8", "--batch", "8")
    assert out["fits"] is False and out["memory"]["weights_gb"] > 80


def test_trace_and_plan_set_the_balancedness(capsys, tmp_path):
    from moeserve.placement.plan import PlacementPlan

    base = ["--model", "mixtral-8x7b", "--hardware", "h100", "--phase", "decode", "--ep", "4", "--batch", "64"]
    assumed = run_json(capsys, *base)
    traced = run_json(capsys, *base, "--trace", TRACE)
    assert assumed["balancedness"] == assumed_balancedness(4, 0)
    assert traced["balancedness"] == pytest.approx(balancedness_from(merge_traces([load_trace(TRACE)]), None, 4))
    plan = tmp_path / "plan.json"
    PlacementPlan.contiguous(32, 8, 4).save(str(plan))
    planned = run_json(capsys, *base, "--trace", TRACE, "--plan", str(plan))
    assert planned["balancedness"] == pytest.approx(0.8032, abs=1e-3)  # moeserve place --eval's figure, folded
    assert planned["balancedness"] <= traced["balancedness"] + 1e-9  # the optimizer beats contiguous


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own checks (types, choices)
        return stop.code


@pytest.mark.parametrize("argv, needle", [
    (["--hardware", "tpu9"], "not a profile file nor a known name"),
    (["--hardware", "h100", "--tp", "4", "--ep", "6"], "not a multiple of --tp 4"),
    (["--hardware", "h100", "--model", "nowhere"], "shipped"),
    (["--hardware", "h100", "--mtp-accept", "0.5"], "--mtp-accept"),
    (["--hardware", "h100", "--plan", "p.json"], "--trace"),
    (["--isl", "10"], "pass --hardware"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--ep", "32", "--redundant", "5"], "--redundant auto"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--phase", "decode", "--ep", "8", "--offload-weights"], "prefill only"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--mtp-accept", "2.5", "--mtp-draft", "1"], "--mtp-draft 1"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--weights", "fp4", "--emit", "x.yaml"], "runs no FP4 weights"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--gemm-min-tile", "48"], "power of two"),
    (["--hardware", "h20", "--model", "deepseek-v3", "--tbo", "--sbo"], "give one"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--weights", "bf16", "--mtp-weights", "fp8", "--emit", "x.yaml"],
     "moeserve serve runs"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--gpus", "12", "--pp", "8"], "not a multiple of --pp 8"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--phase", "decode", "--tp", "8", "--pp", "62"], "61 layers"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--gpus", "124", "--pp", "62"], "61 layers"),
    (["--hardware", "h100", "--model", "deepseek-v3", "--phase", "decode", "--tp", "8", "--pp", "2", "--gpus", "8"],
     "not a multiple of the layout's 16 ranks (8 a stage x --pp 2)"),
])
def test_mistakes_exit_2_with_a_message(capsys, argv, needle):
    assert exit_code(argv) == 2
    assert needle in capsys.readouterr().err


# issue 46: nonsense numbers are refused at once (exit 2, one line), none runs a search
NONSENSE = [["--gpus", "1000000000"], ["--gpus", "0"], ["--tp", "0"], ["--batch", "0"], ["--memory-fraction", "5"],
            ["--redundant", "-100"], ["--mtp-accept", "7"], ["--top", "-1"], ["--tpot-slo-ms", "nan"], ["--isl-cv", "inf"],
            ["--ttft-slo-ms", "-1"], ["--ttft-slo-ms", "inf"], ["--isl", "0"], ["--osl", "-5"], ["--cache-hit", "1"],
            ["--cache-hit", "nan"], ["--balancedness", "0"], ["--balancedness", "1.5"], ["--ep", "0"], ["--moe-tp", "0"],
            ["--mtp-draft", "-1"], ["--mtp-draft", "99"], ["--gemm-min-tile", "0"], ["--batch", "inf"], ["--batch", "-3"],
            ["--tp", "4096"], ["--memory-fraction", "0"], ["--isl", "1e3"], ["--gpus", "many"], ["--redundant", "some"],
            ["--balancedness", "1e-300", "--phase", "decode", "--ep", "8"],  # printed Infinity into --json
            ["--pp", "0"], ["--pp", "5000"], ["--pp", "2.5"]]


@pytest.mark.parametrize("bad", NONSENSE, ids=[" ".join(a) for a in NONSENSE])
def test_nonsense_arguments_exit_2_with_one_line(capsys, bad):
    assert exit_code(["--model", "deepseek-v3", "--hardware", "h100", *bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moeserve configure: error:") and bad[0] in lines[0], captured.err


_DEEPSEEK = json.loads((Path(__file__).resolve().parents[2] / "moeserve/capacity/models/deepseek-v3.json").read_text())
_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
_H100 = (Path(__file__).resolve().parents[2] / "moeserve/capacity/hardware/h100.yaml").read_text()


@pytest.mark.parametrize("text, needle", [
    (json.dumps(_DEEPSEEK | {"num_hidden_layers": 10**12}), "num_hidden_layers must be a whole number in [1, 4096]"),
    (json.dumps(_DEEPSEEK | {"num_attention_heads": 0}), "num_attention_heads must be a whole number"),
    (json.dumps(_DEEPSEEK | {"num_hidden_layers": "61"}), "got '61'"),
    (json.dumps(_DEEPSEEK | {"num_hidden_layers": 61.5}), "got 61.5"),
    (json.dumps(_DEEPSEEK | {"n_routed_experts": -256}), "n_routed_experts must be a whole number"),
    (json.dumps(_DEEPSEEK | {"mlp_only_layers": 5}), "mlp_only_layers must be a list"),
    ("[]", "must hold a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "nests too deep"),
])
def test_a_config_json_configure_cannot_use_exits_2_with_one_line(capsys, tmp_path, text, needle):
    """Before: num_hidden_layers 10**12 looped without end; the others ended in ZeroDivisionError,
    TypeError, OverflowError, AttributeError or RecursionError tracebacks."""
    (tmp_path / "config.json").write_text(text)
    assert exit_code(["--hardware", "h100", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("text, needle", [
    (_BOMB + _H100.replace("name: h100", "name: *i"), "YAML aliases (*name) are not allowed"),
    (re.sub(r"memory_bandwidth_gbs: \{value: [\d.]+", "memory_bandwidth_gbs: {value: 0", _H100),
     "memory_bandwidth_gbs must be more than 0"),
    (re.sub(r"scaleout_gbs: \{value: [\d.]+", "scaleout_gbs: {value: 0", _H100), "scaleout_gbs must be more than 0"),
    ("[" * 100_000 + "]" * 100_000, "nests too deep"),
])
def test_a_hardware_profile_configure_cannot_use_exits_2_with_one_line(capsys, tmp_path, text, needle):
    """Before: nine nested YAML aliases made str() of a field expand to 9**9 items (ran until killed);
    a bandwidth of 0 divided by zero; deep nesting raised RecursionError."""
    (tmp_path / "hw.yaml").write_text(text)
    assert exit_code(["--hardware", str(tmp_path / "hw.yaml"), "--model", "deepseek-v3"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_a_file_too_large_for_a_config_is_refused_unread(capsys, tmp_path):
    """--model /dev/zero read until MemoryError."""
    big = tmp_path / "config.json"
    with open(big, "wb") as f:
        f.truncate((16 << 20) + 1)  # sparse: no disk
    assert exit_code(["--hardware", "h100", "--model", str(big)]) == 2
    assert "larger than 16777216 bytes" in capsys.readouterr().err


def test_subcommand_is_registered(capsys):
    from moeserve.cli import main as moeserve_main

    assert moeserve_main(["configure", "--hardware", "cpu", "--gpus", "1", "--isl", "16", "--osl", "16", "--top", "1"]) == 0
    assert "moeserve-tiny-moe on cpu" in capsys.readouterr().out


def test_per_module_formats_reach_the_prediction(capsys):
    base = ["--model", "deepseek-v3", "--hardware", "gb200", "--phase", "decode", "--ep", "48", "--batch", "512",
            "--isl", "2000", "--osl", "100"]
    fp8 = run_json(capsys, *base)
    low = run_json(capsys, *base, "--moe-weights", "fp4", "--kv-dtype", "fp8", "--dispatch-dtype", "fp4")
    assert low["precision"] == {"attention_weights": "fp8", "moe_weights": "fp4", "dense_weights": "fp8", "kv": "fp8",
                                "dispatch": "fp4", "combine": "bf16", "activations": "bf16", "mtp_weights": "fp4"}
    assert low["memory"]["weights_gb"] < fp8["memory"]["weights_gb"] and low["memory"]["kv_bytes_per_token"] < fp8["memory"]["kv_bytes_per_token"]
    assert low["output_tokens_per_s_per_gpu"] > fp8["output_tokens_per_s_per_gpu"]
    everything = run_json(capsys, *base, "--weights", "fp4", "--attn-weights", "bf16")
    assert (everything["precision"]["attention_weights"], everything["precision"]["dense_weights"]) == ("bf16", "fp4")


def test_sbo_and_mtp_formats_reach_the_prediction(capsys):
    base = ["--model", "deepseek-v3", "--hardware", "h20", "--phase", "decode", "--ep", "16", "--batch", "32",
            "--isl", "4096", "--osl", "1536", "--kv-dtype", "fp8", "--mtp-accept", "1.85"]
    plain, sbo = run_json(capsys, *base), run_json(capsys, *base, "--sbo")
    assert sbo["breakdown_ms"]["communication"] < plain["breakdown_ms"]["communication"]
    assert sbo["output_tokens_per_s_per_gpu"] > plain["output_tokens_per_s_per_gpu"]
    assert plain["breakdown_ms"]["mtp_draft"] > 0
    bf16_mtp = run_json(capsys, *base, "--mtp-weights", "bf16")
    assert bf16_mtp["precision"]["mtp_weights"] == "bf16" and plain["precision"]["mtp_weights"] == "fp8"
    assert bf16_mtp["breakdown_ms"]["mtp_draft"] > plain["breakdown_ms"]["mtp_draft"]


def test_moe_tp_layout_and_auto_redundant(capsys):
    # TensorRT-LLM's min-latency layout: attention TP 8, experts TP 4 x EP 2, one sequence
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "b200", "--phase", "decode", "--tp", "8", "--ep", "2",
                   "--moe-tp", "4", "--batch", "0.125", "--weights", "fp4", "--attn-weights", "bf16")
    assert (out["tp"], out["ep"], out["moe_tp"], out["world"], out["attention_dp"]) == (8, 2, 4, 8, 1)
    assert out["tpot_ms"] > 0 and out["fits"]
    # the README's fixed layout: 256 experts over --ep 72 need 32 redundant slots, chosen and said
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100", "--phase", "decode", "--ep", "72", "--batch", "256")
    assert out["redundant_experts"] == 32 and any("--redundant auto: 32" in n for n in out["notes"])
    assert run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100", "--phase", "decode", "--ep", "32",
                    "--redundant", "0", "--batch", "64")["redundant_experts"] == 0


def test_prefill_offload_to_host_memory(capsys):
    base = ["--model", "deepseek-v3", "--hardware", "gb200", "--phase", "prefill", "--ep", "2", "--batch", "16384",
            "--moe-weights", "fp4"]
    assert run_json(capsys, *base)["fits"] is False  # 2 GPUs cannot hold DeepSeek-V3's experts
    out = run_json(capsys, *base, "--offload-weights")
    assert out["fits"] and out["offload_weights"]
    layers = out["memory"]["offloaded_moe_layers"]  # the fewest that make the rest fit, not every MoE layer
    assert 2 < layers < 58
    assert out["memory"]["host_weights_gb"] == pytest.approx(layers * 128 * 44_040_192 * (0.5 + 1 / 16) / 1e9)
    assert out["breakdown_ms"].get("offload", 0) >= 0


def test_ranked_table_shows_every_column_that_differs(capsys):
    assert main(["--model", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--isl", "2000", "--osl", "400",
                 "--ttft-slo-ms", "3000", "--tpot-slo-ms", "80", "--top", "12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#  deployment"))
    rows = [line.split(None, 1)[1] for line in lines[header + 1:] if line[:1].isdigit()]
    assert len(rows) >= 5 and len(set(rows)) == len(rows)  # no two printed rows alike
    assert "p.red" in lines[header] or "p.tp" in lines[header]  # the P/D rows differ in their prefill side


def test_the_readme_configure_commands_run_as_written(tmp_path):
    readme = (REPO / "README.md").read_text()
    lines = [line.strip() for line in readme.splitlines() if line.startswith("    moeserve configure")]
    fragments = re.findall(r"`(--phase [^`]*)`", readme)
    assert lines
    for line in lines:
        argv = shlex.split(line.split("  #")[0])[2:]
        proc = subprocess.run([sys.executable, "-m", "moeserve.cli", "configure", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert proc.returncode == 0, proc.stderr
        for path in re.findall(r"--emit (\S+)", line):  # every file it writes is named
            assert f"wrote {path}" in proc.stdout and (tmp_path / path).is_file()
    for fragment in fragments:  # "... --phase decode --ep 72 --batch 256 --json predicts one layout"
        argv = ["--model", "deepseek-v3", "--hardware", "h200", *shlex.split(fragment)]
        assert main(argv) == 0, fragment


def test_pipeline_parallel_layout(capsys):
    """--pp: a fixed TP 8 x PP 2 layout holds half of the layers a GPU (Kimi K2 fits on 16 H800 where TP 8 does
    not), a sequence runs both stages one after the other, and the ranked table and JSON say pp."""
    base = ["--model", "kimi-k2", "--hardware", "h800", "--phase", "decode", "--tp", "8", "--isl", "1000", "--osl", "512",
            "--kv-dtype", "fp8"]
    tp8 = run_json(capsys, *base, "--batch", "0.125")
    pp2 = run_json(capsys, *base, "--pp", "2", "--batch", "0.0625")
    assert not tp8["fits"] and pp2["fits"] and pp2["pp"] == 2 and tp8["pp"] == 1
    assert pp2["memory"]["weights_gb"] < 0.55 * tp8["memory"]["weights_gb"]
    assert tp8["tpot_ms"] < pp2["tpot_ms"] < tp8["tpot_ms"] + 0.1  # the same pass plus one hand-off between nodes
    assert main(["--model", "deepseek-v3", "--hardware", "h100", "--gpus", "16", "--pp", "2", "--isl", "2000",
                 "--osl", "400", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("#  deployment"))
    assert " pp " in header
    out = run_json(capsys, "--model", "deepseek-v3", "--hardware", "h100", "--gpus", "16", "--pp", "2", "--isl", "2000",
                   "--osl", "400", "--top", "3")
    assert all(r["pp"] == 2 and 16 % (r["world"] * 2) == 0 for r in out["deployments"])
