"""Counting the host reads of a forward pass on CPU: the calls that, on a GPU, make the host wait for
the device (a device-to-host copy or a data-dependent output size).

    with HostReads() as reads:
        engine.step()
    reads.by_package()  # {"dispatch": 2, ...}: reads made by moeserve/<package>/ code

A `TorchFunctionMode` sees every torch call. A read is attributed to the innermost stack frame that is
not torch's (nor this module's); it counts when that frame lies in one of `WATCHED` packages of
moeserve. Reads made inside triton's interpreter (which copies tensors to numpy to run a kernel) are
the interpreter's, not the layer's: they are not counted.

What counts as a read (each one a sync on CUDA):
- `.item()`, `.tolist()`, `.numpy()`, `.cpu()`, `.to(<cpu>)`, `int()`, `float()`, `bool()`,
  `operator.index()` of a tensor (including `if tensor:` and a tensor used as a list index);
- ops whose output size depends on the data: `nonzero`, `argwhere`, one-argument `where`,
  `masked_select`, indexing or assignment with a boolean mask, `bincount`, `unique`,
  `unique_consecutive`, tensor-valued `repeat_interleave` without `output_size`;
- `torch.equal`, `allclose`, `is_nonzero` (a bool read back).
"""

from __future__ import annotations

import collections
import os
import sys
import traceback

import torch
from torch.overrides import TorchFunctionMode

WATCHED = ("models", "moe", "dense", "dispatch", "kernels")

_ALWAYS = {
    "item", "tolist", "numpy", "cpu", "__int__", "__float__", "__bool__", "__index__", "nonzero", "argwhere",
    "masked_select", "bincount", "unique", "unique_consecutive", "_unique", "_unique2", "equal", "allclose",
    "is_nonzero", "__complex__",
}
_TORCH_DIR = os.path.dirname(torch.__file__)
_HERE = os.path.abspath(__file__)
_PACKAGE_ROOT = os.path.join("moeserve", "")


def _has_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _is_read(name: str, args: tuple, kwargs: dict) -> bool:
    if name in _ALWAYS:
        return True
    if name in ("__getitem__", "__setitem__", "index_put", "index_put_"):
        return len(args) > 1 and _has_bool_index(args[1])
    if name == "where":
        return len(args) + len(kwargs) == 1
    if name == "repeat_interleave":
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        return isinstance(repeats, torch.Tensor) and repeats.numel() > 1 and kwargs.get("output_size") is None
    if name == "to":
        targets = list(args[1:]) + [kwargs.get("device")]
        device = next((t for t in targets if isinstance(t, (str, torch.device))), None)
        return device is not None and torch.device(device).type == "cpu" and isinstance(args[0], torch.Tensor) \
            and args[0].device.type != "cpu"
    return False


def _origin() -> str | None:
    """'package/module.py:line' of the innermost frame outside torch and this file, or None."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path != _HERE and not path.startswith(_TORCH_DIR):
            return path
        frame = frame.f_back
    return None


def _package(path: str) -> str | None:
    """The moeserve package of a source path ('dispatch' for .../moeserve/dispatch/local.py), or None."""
    parts = path.split(os.sep)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "moeserve" and i + 2 < len(parts):
            return parts[i + 1]
    return None


class HostReads(TorchFunctionMode):
    """Records every host read made while active, with where it was made (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, str, str]] = []  # (op, origin path, short stack)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if _is_read(name, args, kwargs):
            origin = _origin()
            if origin is not None:
                where = "".join(traceback.format_stack(sys._getframe(1), limit=4)[:-1])
                self.reads.append((name, origin, where))
        return func(*args, **kwargs)

    def watched(self, packages: tuple[str, ...] = WATCHED) -> list[tuple[str, str, str]]:
        """The reads made by code in moeserve/<package>/ for a package in `packages`."""
        return [r for r in self.reads if _package(r[1]) in packages]

    def by_package(self) -> dict[str, int]:
        return dict(collections.Counter(_package(r[1]) or "other" for r in self.reads))

    def describe(self, packages: tuple[str, ...] = WATCHED) -> str:
        """One line per distinct read site: count, op, and the stack that made it."""
        sites = collections.Counter((op, where) for op, _, where in self.watched(packages))
        return "\n".join(f"{n} x {op}:\n{where}" for (op, where), n in sites.most_common())
