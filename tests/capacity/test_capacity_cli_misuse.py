"""`moeserve configure` misuse found by review: one line on stderr, status 2, no traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from moeserve.capacity.cli import main

UNREADABLE = Path("/proc/self/mem")  # a file every user may open and none may read from offset 0


def refused(capsys, argv: list[str], needle: str) -> None:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.skipif(not UNREADABLE.is_file(), reason="needs Linux /proc")
def test_an_unreadable_hardware_profile_is_named(capsys):
    refused(capsys, ["--hardware", str(UNREADABLE)], f"--hardware {UNREADABLE}: cannot read it")  # was OSError's traceback

