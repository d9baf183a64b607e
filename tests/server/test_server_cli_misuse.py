"""`moeserve serve` misuse is refused before anything starts: status 2 and one line on stderr naming
the flag (or --config key) and what is wrong."""
from __future__ import annotations

import pytest

from moeserve.cli import main
from moeserve.server import cli


@pytest.fixture(autouse=True)
def never_serve(monkeypatch):
    async def serve(engine_config, server_config):
        pytest.fail("the misuse was accepted: the server would have started")
    monkeypatch.setattr(cli, "serve", serve)


def refused(capsys, argv: list[str], needle: str) -> str:
    assert main(["serve", *argv]) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("text, needle", [
    ("tp: [\n", "not valid YAML: expected the node content, but found '<stream end>' at line 2, column 1"),  # was 5 lines
    ("tp: 1\n  bad: indent\n", "at line 2, column 6"),
    (b"tp: 1\n\xff\n", "is not a text file"),  # was UnicodeDecodeError's traceback
])
def test_a_broken_config_file_is_one_line(tmp_path, capsys, text, needle):
    f = tmp_path / "c.yaml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(capsys, ["--config", str(f)], needle)


def test_an_empty_config_path_is_refused_not_ignored(capsys):
    refused(capsys, ["--config", ""], "--config ''")  # was: served the defaults


@pytest.mark.parametrize("flag", ["--shutdown-timeout-s", "--health-timeout-s", "--startup-timeout-s", "--kv-expiry-s"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_timeouts_are_finite(capsys, flag, value):
    """NaN passed `<= 0`: --health-timeout-s nan made /health never see a stuck engine, --startup-timeout-s
    nan / inf waited forever for a model that does not load, --kv-expiry-s inf kept pins for dead decoders."""
    refused(capsys, [flag, value], f"{flag} must be")


@pytest.mark.parametrize("flag, value, needle", [
    # was accepted: each rank then failed after loading its weights, or the first sampled request killed the
    # engine (torch's manual_seed overflows past 64 bits)
    ("--kv-cache-memory-mb", "0", "--kv-cache-memory-mb must be >= 1"),
    ("--kv-cache-memory-mb", "-5", "--kv-cache-memory-mb must be >= 1"),
    ("--seed", str(2**64), "--seed must be in [0, 2**63)"),
    ("--seed", "-1", "--seed must be in [0, 2**63)"),
])
def test_engine_numbers_out_of_range(capsys, flag, value, needle):
    refused(capsys, [flag, value], needle)


@pytest.mark.parametrize("content, needle", [
    (b'{"model_type": "mixtral",', "config.json is not valid JSON: Expecting property name"),
    (b"\xff\xfe", "config.json is not a JSON text"),
])
def test_a_broken_config_json_is_refused_before_the_engine_starts(tmp_path, capsys, content, needle):
    """It passed the checks (read as 'no config to check') and the engine process died loading it."""
    (tmp_path / "config.json").write_bytes(content)
    refused(capsys, ["--model", str(tmp_path)], needle)


@pytest.mark.parametrize("where, needle", [
    ("", "--record-trace-dir ''"),
    ("FILE", "is a file, not a directory"),
    ("FILE/sub", "is not a writable directory"),
])
def test_a_record_trace_dir_that_cannot_be_one_is_refused(tmp_path, capsys, where, needle):
    """Accepted, it warned once per routing window while serving and recorded nothing."""
    (tmp_path / "FILE").write_text("x")
    refused(capsys, ["--record-trace-dir", str(tmp_path / where) if where else ""], needle)
    assert (tmp_path / "FILE").read_text() == "x"


def test_a_record_trace_dir_to_be_made_is_accepted(tmp_path):
    from moeserve.engine.startup_checks import check_record_dir

    check_record_dir(str(tmp_path / "new" / "traces"))
    assert not (tmp_path / "new").exists()  # made by the recorder, not by the check


@pytest.mark.parametrize("flag, needle", [
    ("--model", "--model '': name a checkpoint directory"),  # was "--model  has no config.json" (the working directory)
    ("--chat-template", "--chat-template '': give a template file"),  # was "cannot read --chat-template : Is a directory"
    ("--host", "--host '': give an address"),  # was "cannot listen on :8000: Name or service not known"
])
def test_empty_strings_are_named(capsys, flag, needle):
    refused(capsys, [flag, ""], needle)


def test_the_kv_side_channel_and_http_cannot_share_a_port(capsys):
    """Accepted, the engine loaded and bound the side channel, then uvicorn failed to bind: status 3."""
    import importlib.util

    if importlib.util.find_spec("nixl_cu12") is None and importlib.util.find_spec("nixl") is None:
        pytest.skip("--kv-role prefill needs NIXL (moeserve[pd])")
    refused(capsys, ["--kv-role", "prefill", "--port", "8123", "--kv-side-channel-port", "8123"], "--kv-side-channel-port 8123 is --port too")


def test_yaml_aliases_are_refused_and_a_wrong_value_is_shown_short(tmp_path, capsys):
    """Six nested aliases of nine made `tp` a list of 9**6 items, and its error a 28 MB line (nine: gigabytes,
    the process ran out of memory); a long literal value is shown cut short too."""
    f = tmp_path / "c.yaml"
    nested = ", ".join([f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 7)])
    f.write_text(f"tp: [&l0 [a, a, a, a, a, a, a, a, a], {nested}]\n")
    refused(capsys, ["--config", str(f)], "YAML aliases (*name) are not allowed, line 1")
    f.write_text("tp: [" + ", ".join(["1"] * 100_000) + "]\n")
    err = refused(capsys, ["--config", str(f)], "tp must be a int, got [1, 1, 1, 1, 1, 1, ...]")
    assert len(err) < 300


def test_python_dash_m_moeserve_is_the_moeserve_command():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "moeserve", "serve", "--tp", "0"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "--tp" in done.stderr and "Traceback" not in done.stderr, done.stderr
