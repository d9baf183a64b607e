"""Checks of the files a command will write, made before it does any work: a command that plans for a
minute, or writes one file of two, and only then finds it cannot write the other, has wasted the run."""
from __future__ import annotations

import os
from pathlib import Path


def check_output(flag: str, path: str, example: str) -> None:
    """Raises ValueError (one line, naming `flag`) unless `path` names a file, not a directory, in a
    directory that exists and may be written. `example`: a file name to suggest."""
    if not path or Path(path).name in ("", ".", "..") or Path(path).is_dir():
        raise ValueError(f"{flag} {path!r}: name a file to write ({example}), not a directory")
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise ValueError(f"{flag} {path}: no such directory {folder}")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag} {path}: directory {folder} is not writable")


def check_figure(flag: str, path: str) -> None:
    """check_output, and a name whose extension matplotlib writes (without one it would write PATH.png
    while the command reports PATH; with one it cannot write it would fail after the work)."""
    check_output(flag, path, "loads.png")
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lstrip(".").lower()
    if suffix not in kinds:
        raise ValueError(f"{flag} {path}: name a figure file ending in one of .{', .'.join(sorted(kinds))}")
