"""Bounds on routing traces and placement plans read from files, and the checks that apply them.

A trace or plan file is input from anyone: a size in it (an expert id, a layer count, an array
shape in an npz header) is checked against these bounds and against the file's own declared sizes
before anything proportional to it is allocated, and every problem is a `FileContentError` naming
the field. The readers (trace.py, importers.py, plan.py) add the file's name. docs/limits.md lists
the bounds; each is far above any model served today (DeepSeek-V3: 58 MoE layers, 256 experts, top-8).
"""
from __future__ import annotations

import json
import math
from typing import Any, BinaryIO

MAX_EXPERTS = 4096  # logical experts per MoE layer
MAX_LAYERS = 1024  # MoE layers of a trace or plan; model layer numbers are below it too
MAX_TOP_K = 64  # experts one token chooses in one layer
MAX_SLOTS = 16384  # physical slots per layer of a plan
MAX_CELLS = 1 << 27  # elements of one array built from a file (counts [W, L, E], log2phy [L, E, R], ...): 1 GiB of float64
MAX_TOKEN_RECORDS = 1 << 24  # per-token records of one trace
MAX_TEXT_BYTES = 256 << 20  # a JSON or JSONL trace, or a plan
MAX_META_CHARS = 1 << 24  # the JSON metadata string of an npz trace
MAX_JSON_DEPTH = 32  # nesting of any JSON value read (the formats need at most 4)
MAX_TOKEN_ID = 1 << 62  # token keys of a token sample (merging traces offsets them)
# one count of a trace (tokens routed to an expert): sums of MAX_CELLS of them stay finite (1e308 each summed
# to inf over windows, and every balancedness became NaN: `place --json` printed NaN, `place -o` planned on it)
MAX_COUNT = float(1 << 53)


class FileContentError(ValueError):
    """Something in a trace or plan file breaks the format or a bound; the message names the field."""


class TrailingData(FileContentError):
    """A JSON value followed by more text: several values, one per line (JSON lines)."""


def show(value: Any, limit: int = 40) -> str:
    """A value from a file, short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(message: object, limit: int = 300) -> str:
    """Another library's error text as one bounded line."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_bounded(f: BinaryIO, limit: int | None = None) -> bytearray:
    """The rest of `f`, refused past `limit` bytes (default MAX_TEXT_BYTES) without reading more."""
    limit = MAX_TEXT_BYTES if limit is None else limit
    data = bytearray()
    while chunk := f.read(1 << 20):
        data += chunk
        if len(data) > limit:
            raise FileContentError(f"is larger than {limit} bytes, the most a text trace or plan may be")
    return data


def decode_text(data: bytes | bytearray) -> str:
    """UTF-8 text (a leading byte-order mark is dropped)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileContentError(f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise FileContentError(f"field {show(key)} appears twice in one object")
            seen.add(key)
    return out


def _no_constant(name: str) -> float:
    raise FileContentError(f"{name} is not a number JSON allows")


def parse_json(text: str) -> Any:
    """json.loads that refuses duplicate keys, NaN and Infinity, and nesting past MAX_JSON_DEPTH
    (json's own recursion limit, about 1000 levels, is caught: never a RecursionError)."""
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:
        raise FileContentError(f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except FileContentError:
        raise
    except json.JSONDecodeError as e:
        error = TrailingData if e.msg == "Extra data" else FileContentError
        raise error(f"is not valid JSON: {one_line(e)}") from None
    except ValueError as e:  # ints past Python's digit limit
        raise FileContentError(f"is not valid JSON: {one_line(e)}") from None
    check_depth(value)
    return value


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a parsed JSON value nested deeper than `limit`, walking it without recursion."""
    level, depth = [value], 0  # level: the containers `depth` levels down
    while level:
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())
                 if isinstance(c, (list, dict))]
        depth += 1
        if level and depth >= limit:
            raise FileContentError(f"nests deeper than {limit} levels")


def whole(value: Any, field: str, low: int, high: int, what: str = "") -> int:
    """`value` as an int in [low, high], or FileContentError naming `field` (bools are not numbers)."""
    if type(value) is not int:
        raise FileContentError(f"field {field!r} must be a whole number, got {show(value)}")
    if not low <= value <= high:
        bound = f" ({what})" if what else ""
        raise FileContentError(f"field {field!r} is {show(value)}, outside [{low}, {high}]{bound}")
    return value


def optional_whole(meta: dict, field: str, low: int, high: int) -> int | None:
    value = meta.get(field)
    return None if value is None else whole(value, field, low, high)


def check_cells(shape: tuple[int, ...], what: str) -> None:
    """Refuse an array of more than MAX_CELLS elements before it is allocated."""
    cells = math.prod(shape)
    if cells > MAX_CELLS:
        dims = " x ".join(str(d) for d in shape)
        raise FileContentError(f"{what} would be {dims} = {cells} elements, over the bound of {MAX_CELLS}")


def int_list(value: Any, field: str, low: int, high: int, max_len: int, what: str = "") -> list[int]:
    """A JSON list of ints within [low, high], at most `max_len` long."""
    if not isinstance(value, list):
        raise FileContentError(f"field {field!r} must be a list of whole numbers, got {show(value)}")
    if len(value) > max_len:
        raise FileContentError(f"field {field!r} has {len(value)} entries, more than {max_len}")
    for x in value:
        whole(x, field, low, high, what)
    return value
