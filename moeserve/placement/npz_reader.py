"""`NpzReader`: the arrays of an `.npz` file, each checked from its header before it is read.

`np.load` allocates an array as large as its `.npy` header declares before reading a byte of it, so
a few hundred compressed bytes can ask for terabytes (a zip bomb). Here a member's dtype and shape
come from its header alone; the caller checks them against its bounds (`header`), and only then is
the array read (`array`), never with pickles. A member whose data is shorter than its header
declares is refused as truncated before anything is allocated.
"""
from __future__ import annotations

import math
import tokenize
import warnings
import zipfile
import zlib
from typing import BinaryIO

import numpy as np

from moeserve.placement.file_limits import FileContentError, one_line

_MAX_HEADER_BYTES = 10000  # numpy's own default for headers it parses
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError)


class NpzReader:
    """Members of an npz archive by array name (`counts` for `counts.npy`). Mutates nothing; reads
    only the members asked for."""

    def __init__(self, f: BinaryIO) -> None:
        try:
            self._zip = zipfile.ZipFile(f)
        except _ZIP_ERRORS as e:
            raise FileContentError(f"is not a readable npz archive (truncated?): {one_line(e)}") from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in self._zip.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in self._members:
                raise FileContentError(f"array {name!r} appears twice in the archive")
            self._members[name] = info

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def close(self) -> None:
        self._zip.close()

    def header(self, name: str) -> tuple[tuple[int, ...], np.dtype]:
        """(shape, dtype) of array `name` from its header; nothing of its data is read."""
        info = self._member(name)
        try:
            with self._zip.open(info) as f, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy's parser warns about odd headers on stderr
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=_MAX_HEADER_BYTES)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=_MAX_HEADER_BYTES)
                else:
                    raise FileContentError(f"array {name!r} is in .npy format {version}, not 1.0 or 2.0")
                data_start = f.tell()
        except FileContentError:
            raise
        except (*_ZIP_ERRORS, SyntaxError, tokenize.TokenError, TypeError, RecursionError) as e:
            raise FileContentError(f"array {name!r} has an unreadable .npy header: {one_line(e)}") from None
        if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
            raise FileContentError(f"array {name!r} has dtype {one_line(dtype, 60)}: only plain numbers and strings are read")
        if any(d < 0 for d in shape):
            raise FileContentError(f"array {name!r} declares the shape {shape}")
        nbytes = math.prod(shape) * dtype.itemsize
        if info.file_size < data_start + nbytes:
            raise FileContentError(f"array {name!r} is truncated: its header declares {nbytes} bytes of data, "
                                   f"the archive holds {max(info.file_size - data_start, 0)}")
        return tuple(shape), dtype

    def array(self, name: str) -> np.ndarray:
        """Array `name`; call `header(name)` and check it first: this allocates what the header says."""
        try:
            with self._zip.open(self._member(name)) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except _ZIP_ERRORS as e:
            raise FileContentError(f"array {name!r} cannot be read (truncated or corrupt): {one_line(e)}") from None

    def _member(self, name: str) -> zipfile.ZipInfo:
        if name not in self._members:
            raise FileContentError(f"lacks the array {name!r}")
        return self._members[name]
