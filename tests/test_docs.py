"""The docs' generated tables match the code they are generated from; no file carries lab-notebook
labels or paths of one machine."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from moeserve.envs import markdown_table
from moeserve.server.config_file import FLAGS, flags_markdown

REPO = Path(__file__).resolve().parents[1]
CONFIGURATION = REPO / "docs" / "configuration.md"


def _block(text: str, name: str) -> str:
    match = re.search(rf"<!-- {name}:[^\n]*-->\n(.*?)\n<!-- end {name} -->", text, re.S)
    assert match, f"docs/configuration.md has no {name} block"
    return match.group(1)


@pytest.mark.parametrize("name, render, source", [
    ("env-table", markdown_table, "python -m moeserve.envs"),
    ("settings-table", flags_markdown, "moeserve.server.config_file.flags_markdown()"),
])
def test_generated_tables_are_in_sync(name, render, source):
    assert _block(CONFIGURATION.read_text(), name) == render(), (
        f"docs/configuration.md's {name} is out of date: replace it with the output of {source}")


def test_the_config_files_comments_list_every_choice():
    """configs/*.yaml are read as documentation: a key with a fixed set of values names them all."""
    choices = {f.key: f.choices for f in FLAGS if f.choices}
    missing = []
    for path in sorted((REPO / "configs").glob("*.yaml")):
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            comment = rest.partition("#")[2]
            missing += [f"{path.name}: {key} does not name {value}" for value in choices.get(key, ())
                        if not re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", comment)]
    assert not missing, "\n".join(missing)


# Results are labelled by date, machine and command; history lives in git. No file names numbered
# work rounds, run letters, who else used the machine, or an absolute path of one machine.
_LABELS = [
    (re.compile(r"\b[Ss]essions? [0-9]+"), "a numbered work session"),
    (re.compile(r"\bruns? [A-Z]{2}\b"), "a run letter"),
    (re.compile(r"\bruns? [A-Z]\b(?!\s*[+*])"), "a run letter"),
    (re.compile(r"\bround [0-9]+\b"), "a numbered round"),
    (re.compile(r"\bengineers?\b"), "who else worked on the machine"),
    (re.compile(r"/(?:work|root|home)/[a-z]"), "an absolute path of one machine"),
]


def _tracked(*patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.split()


def test_no_file_labels_results_by_work_rounds_or_names_a_machine_path():
    me = Path(__file__).resolve().relative_to(REPO).as_posix()
    found = []
    for name in _tracked("*.md", "*.py", "*.yaml"):
        if name == me or not (REPO / name).is_file():  # this file: its patterns would match themselves
            continue
        lines = (REPO / name).read_text(errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            # a label broken over two lines ("... session" / "15 ...") is read as one line
            joined = line + " " + (lines[number].lstrip(" \t#*>-") if number < len(lines) else "")
            found += [f"{name}:{number}: {why}: {line.strip()[:120]}" for pattern, why in _LABELS
                      if pattern.search(line) or (pattern.search(joined) and not _within_next(pattern, lines, number))]
    assert not found, "\n".join(found)


# Documents that are not in the repository: a maintainer who clones it has none of them.
_OUTSIDE = [
    (re.compile(r"\b(?:DESIGN|STYLE|PEERS)\.md\b"), "a document outside the repository"),
    (re.compile(r"\.\./shared\b"), "a folder beside the checkout"),
]


def test_no_file_cites_a_document_outside_the_repository():
    me = Path(__file__).resolve().relative_to(REPO).as_posix()
    found = [f"{name}:{number}: {why}: {line.strip()[:120]}"
             for name in _tracked("*.md", "*.py", "*.yaml", "*.toml", "*.cfg", "*.txt", ".ci/*") if name != me
             and (REPO / name).is_file()
             for number, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1)
             for pattern, why in _OUTSIDE if pattern.search(line)]
    assert not found, "\n".join(found)


def test_every_markdown_link_leads_to_a_file_in_the_repository():
    broken = []
    for name in _tracked("*.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", (REPO / name).read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor of the same page
            path = ((REPO / name).parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(REPO) or not path.exists():
                broken.append(f"{name}: {target}")
    assert not broken, "links to nothing in the repository:\n" + "\n".join(broken)


def _within_next(pattern: re.Pattern, lines: list[str], number: int) -> bool:
    """Whether the next line alone matches (it is reported on its own line then)."""
    return number < len(lines) and bool(pattern.search(lines[number]))


# The bad examples are put together from pieces, so that this file does not itself carry the phrases
# the guard rejects (it is also exempt from the scan above).
@pytest.mark.parametrize("text, bad", [
    ("measured in sess" "ion 12", True), ("run" " AM gave", True), ("runs" " K and O", True), ("round" " 3 of 5", True),
    ("another engin" "eer's tests", True), ("see /" "work/shared/PEE" "RS.md", True), ("/" "home/me/ckpt", True),
    ("every rank runs E * capacity rows", False), ("a run U+FFFD", False), ("rounds of the load", False),
])
def test_the_label_patterns(text, bad):
    assert any(pattern.search(text) for pattern, _ in _LABELS) is bad


@pytest.mark.parametrize("text, bad", [
    ("read with ../" "shared/DESI" "GN.md", True), ("DESI" "GN.md section 2", True), ("see ../" "shared/traces", True),
    ("docs/architecture.md, \"Parallel layout\"", False), ("MOESERVE_SHARED_TRACES", False),
])
def test_the_outside_patterns(text, bad):
    assert any(pattern.search(text) for pattern, _ in _OUTSIDE) is bad
