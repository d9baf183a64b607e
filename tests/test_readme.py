"""The README's short commands run as written, so they cannot rot: the test command is CI's, the
placement commands run on the sample trace, the planning command writes a config `serve` reads,
every `moeserve serve` line parses, and the Python snippet generates on the built-in model. The
README stays short (under README_LIMIT characters: detail belongs in docs/)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from moeserve import cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
README_LIMIT = 8000  # characters: what it is, the two commands, how to use it, results, links


def test_the_readme_stays_under_its_limit():
    assert len(README) < README_LIMIT, (
        f"README.md has {len(README):,} characters, the limit is {README_LIMIT:,}: move detail to docs/ and link it")


def _command_lines(prefix: str) -> list[str]:
    """The README's indented command lines starting with `prefix`, comments dropped."""
    lines = [line.strip() for line in README.splitlines() if line.startswith("    " + prefix)]
    return [line.split("  #")[0].strip() for line in lines]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "moeserve.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_test_command_is_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"    {ci}" in README


@pytest.mark.parametrize("command", ["serve", "place", "trace", "bench"])
def test_help_of_every_command(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0 and f"moeserve {command}" in capsys.readouterr().out


def test_every_serve_line_parses():
    lines = _command_lines("moeserve serve") + [re.sub(r"^.*-m moeserve.cli ", "", line) for line in
                                                 README.splitlines() if "-m moeserve.cli serve" in line]
    assert len(lines) >= 5
    for line in lines:
        argv = shlex.split(line.replace("...", "").replace("moeserve ", "", 1))
        cli.build_parser(only="serve").parse_args(argv)  # an unknown flag exits 2


def test_the_placement_commands_run_on_the_sample_trace(tmp_path):
    (tmp_path / "traces").symlink_to(REPO / "traces")
    lines = _command_lines("moeserve trace") + _command_lines("moeserve place")
    assert len(lines) == 3, lines  # show, plan, evaluate: in this order, the evaluation reads the plan
    for line in lines:
        proc = _run(shlex.split(line)[1:], tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    assert (tmp_path / "plan.json").is_file() and "balancedness" in proc.stdout


def test_the_planning_command_writes_a_config_serve_reads(tmp_path):
    from moeserve.server.config_file import load_yaml

    (line,) = _command_lines("moeserve configure")
    proc = _run(shlex.split(line)[1:], tmp_path)
    assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    emitted = shlex.split(line)[shlex.split(line).index("--emit") + 1]
    assert load_yaml(str(tmp_path / emitted))  # every key a serve setting of the right type


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.slow
def test_the_python_snippet_runs_on_the_builtin_model(tmp_path):
    snippet = next(block for block in _python_blocks() if "LLM(" in block)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout.strip()  # [two texts] [the first's token ids] its finish reason
    assert printed.startswith("[") and printed.split()[-1] in ("length", "stop"), printed
