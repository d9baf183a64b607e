"""Every MOESERVE_* variable is declared once in moeserve/envs.py and read through it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from moeserve import envs
from moeserve.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
# readers the kernel work converts when it lands (moeserve/dense/ is being reorganised on another branch);
# builtin_model.py likewise (its own branch); panel_gemm.cpp reads MOESERVE_PANEL_ISA in C++
NOT_YET_CONVERTED = ("moeserve/dense/", "moeserve/moe/", "moeserve/engine/builtin_model.py")


@pytest.mark.parametrize("text, value", [(t, True) for t in ("1", "true", "TRUE", "on", "yes", " Yes ")]
                         + [(t, False) for t in ("0", "false", "Off", "no", "NO")])
def test_one_switch_parser(text, value):
    assert envs.parse_bool("A_SWITCH", text) is value


def test_a_switch_that_is_neither_names_the_variable_and_the_choices():
    with pytest.raises(ConfigError, match=r"MOESERVE_CPU_BIND='maybe' is not a switch: use 1/0, true/false"):
        envs.CPU_BIND.get({"MOESERVE_CPU_BIND": "maybe"})


def test_unset_and_empty_give_the_default_and_ints_parse():
    assert envs.CPU_BIND.get({}) is True and envs.CPU_BIND.get({"MOESERVE_CPU_BIND": ""}) is True
    assert envs.NUM_THREADS.get({}) is None and envs.NUM_THREADS.get({"MOESERVE_NUM_THREADS": "3"}) == 3
    with pytest.raises(ConfigError, match="MOESERVE_NUM_THREADS='three' is not a whole number"):
        envs.NUM_THREADS.get({"MOESERVE_NUM_THREADS": "three"})


def test_every_variable_in_the_repository_is_declared_once():
    names = [v.name for v in envs.ALL]
    assert len(names) == len(set(names))
    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.yaml", "*.cpp", "*.sh"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    used = set()
    for name in files:
        if (REPO / name).is_file():
            used |= set(re.findall(r"\bMOESERVE_[A-Z0-9_]*[A-Z0-9]\b", (REPO / name).read_text(errors="replace")))
    used -= {n for n in used if n.startswith("MOESERVE_ROW_")}  # C++ macros in kernels/cpu/csrc, not variables
    assert used - set(names) == set(), "declare these in moeserve/envs.py"


def test_the_package_reads_moeserve_variables_only_through_envs():
    offenders = []
    for path in sorted((REPO / "moeserve").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "moeserve/envs.py" or rel.startswith(NOT_YET_CONVERTED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(environ\.get|getenv|environ\[)\(?\s*[\"']MOESERVE_", line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "read these through moeserve/envs.py:\n" + "\n".join(offenders)
