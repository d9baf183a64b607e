"""`moeserve` console script: one sub-command per part of the system, each defined next to its code."""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

# sub-command -> module exposing `add_arguments(parser)` and `run(args) -> int`
_COMMANDS = {
    "serve": ("moeserve.server.cli", "start the OpenAI-compatible server"),
    "bench": ("moeserve.server.bench", "load-test any OpenAI-compatible server"),
    "place": ("moeserve.placement.cli_place", "plan or evaluate an expert placement from routing traces"),
    "trace": ("moeserve.placement.cli_trace", "inspect routing traces"),
    "configure": ("moeserve.capacity.cli", "plan a deployment: memory, step times and tokens/s per GPU (docs/capacity.md)"),
}


class _Parser(argparse.ArgumentParser):
    """Misuse is one line and status 2 (`serve`'s usage alone is 40 lines: --help shows it)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` set, one whose sub-command `only` alone has its arguments:
    a sub-command's module is imported only when it runs (a broken one cannot break the others)."""
    parser = _Parser(prog="moeserve", description="Serve mixture-of-experts models.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")
    for name, (module, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only in (None, name):
            importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _stop_before_serving(signum, frame) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    previous = None
    if chosen == "serve" and threading.current_thread() is threading.main_thread():
        # SIGTERM before the server has its own handlers (imports, config checks: about a second) stops
        # it as cleanly as later: status 0, nothing started yet (it was the default action, status 143)
        previous = signal.signal(signal.SIGTERM, _stop_before_serving)
    try:
        return _run(argv, chosen)
    finally:  # a caller in process (a test, an embedding program) gets its own handler back
        if previous is not None and signal.getsignal(signal.SIGTERM) is _stop_before_serving:
            signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str], chosen: str | None) -> int:
    parser = build_parser(only=chosen if chosen in _COMMANDS else "")
    args = parser.parse_args(argv)
    if args.version:
        from moeserve import __version__

        print(__version__)
        return 0
    if not args.command:
        parser.print_help()
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
