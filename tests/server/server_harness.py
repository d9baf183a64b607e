"""Start `moeserve serve` as a real subprocess on a free loopback port and always clean it up."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"serving (\S+) on (http://[\d.]+:\d+)")


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of `pid` (the engine process and its rank workers)."""
    out, frontier = [], [pid]
    while frontier:
        kids = [c for p in frontier for c in child_pids(p)]
        out += kids
        frontier = kids
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class ServerProcess:
    def __init__(self, *args: str, startup_timeout_s: float = 300.0, env: dict[str, str] | None = None):
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
        cmd = [sys.executable, "-m", "moeserve.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.url: str | None = None
        self.model: str | None = None
        self._found = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._wait_ready(startup_timeout_s)
            self.engine_pids = child_pids(self.proc.pid)
        except BaseException:
            self.kill()
            raise

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            m = _LISTENING.search(line)
            if m and not self._found.is_set():
                self.model, self.url = m.group(1), m.group(2)
                self._found.set()
        self._found.set()

    def _wait_ready(self, timeout_s: float) -> None:
        if not self._found.wait(timeout_s) or self.url is None:
            raise RuntimeError("server did not start:\n" + self.log_tail())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server never became healthy:\n" + self.log_tail())

    def log_tail(self, n: int = 40) -> str:
        return "".join(self.lines[-n:])

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """Leaves no process behind, whatever state the server is in."""
        engines = child_pids(self.proc.pid) if self.proc.poll() is None else []
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for pid in engines + getattr(self, "engine_pids", []):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
