"""`moeserve configure --calibrate`: the host-cost fit, and (marked slow) a whole calibration
whose profile loads and drives the model."""
from __future__ import annotations

import numpy as np
import pytest

from moeserve.capacity.calibrate import _nonnegative_fit
from moeserve.capacity.cli import main


def test_nonnegative_fit_recovers_costs_and_drops_negative_ones():
    a = np.array([[1.0, b, min(16.0, 2.0 * b)] for b in (1, 2, 4, 16, 32)])
    truth = np.array([5e-3, 3e-4, 2e-4])
    assert np.allclose(_nonnegative_fit(a, a @ truth), truth)
    fitted = _nonnegative_fit(a, a @ np.array([5e-3, -1e-4, 2e-4]))  # a negative cost is not a cost
    assert (fitted >= 0).all() and fitted[1] == 0


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
