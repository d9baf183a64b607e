"""`moeserve configure --calibrate`: the host-cost fit, and (marked slow) a whole calibration
whose profile loads and drives the model."""
from __future__ import annotations

import json

import numpy as np
import pytest

from moeserve.capacity.calibrate import _nonnegative_fit, profile_from
from moeserve.capacity.cli import main
from moeserve.capacity.efficiency import DEFAULT


def test_nonnegative_fit_recovers_costs_and_drops_negative_ones():
    a = np.array([[1.0, b, min(16.0, 2.0 * b)] for b in (1, 2, 4, 16, 32)])
    truth = np.array([5e-3, 3e-4, 2e-4])
    assert np.allclose(_nonnegative_fit(a, a @ truth), truth)
    fitted = _nonnegative_fit(a, a @ np.array([5e-3, -1e-4, 2e-4]))  # a negative cost is not a cost
    assert (fitted >= 0).all() and fitted[1] == 0


TIMINGS = {"where": "x86_64, 2 cores, 1 torch thread, test", "cpus": 2, "memory_gb": 24.0, "gemm_tflops": 0.1,
           "copy_gbs": 10.0, "layer_s": 1e-3, "steps": {1: 0.010, 2: 0.012, 4: 0.018, 16: 0.030, 32: 0.039}}


def test_a_measured_bf16_gemm_becomes_the_profiles_bf16_peak_and_bf16_weights_plan_with_it(tmp_path, capsys):
    import yaml

    assert "bf16" not in profile_from(TIMINGS)["tflops"]  # timings recorded before bf16 was measured
    data = profile_from(dict(TIMINGS, gemm_bf16_tflops=0.27))
    assert data["tflops"]["bf16"]["value"] == pytest.approx(0.27 / DEFAULT.gemm, abs=1e-5) and "bf16 torch.mm at 270.0" in data["tflops"]["bf16"]["source"]
    out = tmp_path / "cpu-bf16.yaml"
    out.write_text(yaml.safe_dump(data))
    args = ["--hardware", str(out), "--phase", "prefill", "--batch", "256", "--isl", "256", "--json"]
    steps = {}
    for fmt in ("fp32", "bf16"):
        assert main(args + ["--weights", fmt]) == 0
        steps[fmt] = json.loads(capsys.readouterr().out)["step_ms"]
    assert steps["bf16"] < steps["fp32"]  # a prefill of 256 tokens is bound by the GEMMs: 2.7x the FLOP/s


def test_the_shipped_cpu_profile_plans_bf16_weights():
    assert main(["--hardware", "cpu", "--weights", "bf16", "--phase", "decode", "--batch", "4", "--json"]) == 0


def test_configure_help_renders(capsys):
    from moeserve.cli import main as moeserve_main

    with pytest.raises(SystemExit) as stop:
        moeserve_main(["configure", "--help"])
    assert stop.value.code == 0 and "--mtp-accept" in capsys.readouterr().out


@pytest.mark.slow
def test_calibration_writes_a_profile_the_model_uses(tmp_path, capsys):
    out = tmp_path / "cpu-here.yaml"
    assert main(["--calibrate", str(out)]) == 0
    assert main(["--hardware", str(out), "--phase", "decode", "--batch", "8", "--isl", "32", "--osl", "32", "--json"]) == 0
    assert '"output_tokens_per_s_per_gpu"' in capsys.readouterr().out


@pytest.mark.parametrize("where", ["dir", "", "missing/cpu.yaml"])
def test_calibrate_refuses_a_path_it_cannot_write_before_timing(tmp_path, capsys, monkeypatch, where):
    """--calibrate DIR timed the machine for a minute, then died with IsADirectoryError's traceback;
    --calibrate '' silently ran configure instead: each is one line, before any timing."""
    import moeserve.capacity.calibrate as calibrate

    monkeypatch.setattr(calibrate, "measure", lambda: pytest.fail("timed before checking the output path"))
    path = {"dir": str(tmp_path), "": "", "missing/cpu.yaml": str(tmp_path / "missing" / "cpu.yaml")}[where]
    assert main(["--calibrate", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--calibrate" in err, err
