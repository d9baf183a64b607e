"""Tool calls written as regions between a start and an end marker, content around them.

The families differ in what a region holds (`read_region`); this class reads the text around them.
Content is the text outside regions, markers in `ignore` (a family's wrapper around a block of
calls) removed. After a call, text outside regions shows only once it holds more than whitespace
(the newlines between calls are not content), then all of that stretch shows, so the streamed
content always adds up to the content of the whole text. A region that never named a call shows
as the content it was, once it ends.
"""
from __future__ import annotations

from moeserve.server.parsers.base import ParsedCall, ToolParse, held_back


class RegionToolParser:
    """Subclasses set `markers` (every marker a held-back suffix may begin) and define read_region."""

    markers: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def __init__(self, start: str, end: str):
        self.start, self.end = start, end
        self._cursor = 0  # text before it is settled
        self._content = ""
        self._calls: list[ParsedCall] = []
        self._open: int | None = None  # where the open region's body begins
        self._current: ParsedCall | None = None
        self._shown = False  # the stretch of text after the last call has shown (held more than whitespace)

    def begin_region(self, text: str, start: int) -> None:
        """A region's body begins at `start` (reset per-region state)."""

    def read_region(self, text: str, start: int, stop: int | None, final: bool) -> ParsedCall | None:
        """The call in text[start:stop] so far (stop None: the region is still open); None until it has a name."""
        raise NotImplementedError

    def parse(self, text: str, final: bool = False) -> ToolParse:
        while True:
            if self._open is None:
                i = text.find(self.start, self._cursor)
                if i == -1:
                    limit = len(text) if final else len(text) - held_back(text[self._cursor:], self.markers + self.ignore)
                    self._outside(text, limit, final)
                    break
                self._outside(text, i, True)
                self._open = self._cursor = i + len(self.start)
                self.begin_region(text, self._open)
            j = text.find(self.end, self._open)
            stop = j if j != -1 else None
            self._current = self.read_region(text, self._open, stop, final)
            if stop is None and not final:
                break
            region_end = len(text) if stop is None else stop
            if self._current is None:  # never a call: what it held is content
                self._content += text[self._open - len(self.start):region_end + (0 if stop is None else len(self.end))]
            else:
                self._current.complete = True
                self._calls.append(self._current)
            self._cursor = region_end if stop is None else stop + len(self.end)
            self._open, self._current, self._shown = None, None, False
            if stop is None:
                break
        calls = self._calls + ([self._current] if self._current is not None else [])
        return ToolParse(self._content, calls)

    def _outside(self, text: str, upto: int, closed: bool) -> None:
        """text[cursor:upto] lies outside regions; `closed`: nothing more will join this stretch."""
        piece = text[self._cursor:upto]
        for marker in self.ignore:
            piece = piece.replace(marker, "")
        if self._calls and not self._shown and not piece.strip():
            if closed:
                self._cursor = upto  # only whitespace between or after calls: not content
            return
        self._shown = True
        self._content += piece
        self._cursor = upto
