"""`moeserve configure` misuse found by review: one line on stderr, status 2, no traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeserve.capacity.cli import main
from moeserve.capacity.model_spec import shipped_models

UNREADABLE = Path("/proc/self/mem")  # a file every user may open and none may read from offset 0


def refused(capsys, argv: list[str], needle: str) -> None:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.skipif(not UNREADABLE.is_file(), reason="needs Linux /proc")
def test_an_unreadable_hardware_profile_is_named(capsys):
    refused(capsys, ["--hardware", str(UNREADABLE)], f"--hardware {UNREADABLE}: cannot read it")  # was OSError's traceback


def test_more_experts_per_token_than_experts_is_refused(tmp_path, capsys):
    """It was planned (status 0) as if each token ran 100 of the 8 experts."""
    assert "mixtral-8x7b" in shipped_models()
    config = json.loads((Path(__file__).resolve().parents[2] / "moeserve" / "capacity" / "models" / "mixtral-8x7b.json").read_text())
    config["num_experts_per_tok"] = 100
    (tmp_path / "config.json").write_text(json.dumps(config))
    refused(capsys, ["--hardware", "h100", "--model", str(tmp_path)], "num_experts_per_tok 100 is more than its 8 routed experts")


@pytest.mark.parametrize("change, needle", [
    ({"host_link_gb": {"value": 900, "source": "typo"}}, "unknown fields ['host_link_gb']"),  # was ignored: 0 used
    ({"gpus_per_node": {"value": 0, "source": "x"}}, "gpus_per_node must be a whole number >= 1, got 0"),  # was 1
    ({"gpus_per_node": {"value": 7.5, "source": "x"}}, "gpus_per_node must be a whole number >= 1, got 7.5"),  # was 7
    ({"gemm_tile_rows": {"value": 0, "source": "x"}}, "gemm_tile_rows must be a whole number >= 1"),
])
def test_a_hardware_profile_with_an_unknown_field_or_a_broken_count_is_refused(tmp_path, capsys, change, needle):
    import yaml

    from moeserve.capacity import hardware

    profile = yaml.safe_load((Path(hardware.__file__).parent / "hardware" / "h100.yaml").read_text())
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump({**profile, **change}))
    refused(capsys, ["--hardware", str(path)], needle)


@pytest.mark.parametrize("argv", [["--tp", "3"], ["--model", "deepseek-v3", "--tp", "7", "--phase", "decode"]])
def test_a_fixed_tp_that_splits_attention_heads_is_refused(capsys, argv):
    """It was predicted, status 0 (deepseek-v3 at --tp 7: 128 / 7 heads a rank), a layout no engine runs."""
    refused(capsys, ["--hardware", "h100", *argv], "attention heads")


@pytest.mark.parametrize("model, trace", [("mixtral-8x7b", "builtin_model.npz"), (None, "mixtral_excerpt.npz")])
def test_a_trace_of_another_model_is_refused(capsys, model, trace):
    """A 16-expert trace scored mixtral-8x7b's 8 experts (and the other way round), status 0."""
    path = str(Path(__file__).resolve().parents[2] / "traces" / trace)
    refused(capsys, ["--hardware", "h100", *(["--model", model] if model else []), "--trace", path, "--ep", "2",
                     "--phase", "decode"], "trace this model")
