"""Start `moeserve serve` as a real subprocess on a free loopback port and always clean it up; start a
prefill/decode pair; speak to them as vllm-router does.

A fixture holds a server as `with ServerProcess(...) as srv: yield srv` (killed however the module ends),
a P/D pair as `with pd_pair(...) as (prefill, decode): ...`."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"serving (\S+) on (http://[\d.]+:\d+)")
# no UCX_* variable: moeserve binds UCX to the side channel's interface itself (loopback here)
PD_ENV = {k: "" for k in os.environ if k.startswith("UCX_")}
# byte for byte what vllm-router 0.1.17 adds to the prefill call
ROUTER_PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}


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

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

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


@contextmanager
def pd_pair(*args: str, prefill_args: tuple[str, ...] = (), env: dict[str, str] | None = None
            ) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A `--kv-role prefill` and a `--kv-role decode` server on args (the prefill one also on
    prefill_args), env PD_ENV unless given; both killed on exit, the prefill one also when the decode
    one fails to start."""
    env = PD_ENV if env is None else env
    with ServerProcess(*args, "--kv-role", "prefill", *prefill_args, env=env) as prefill, \
            ServerProcess(*args, "--kv-role", "decode", env=env) as decode:
        yield prefill, decode


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def decoded(url: str, path: str, body: dict) -> dict | list[dict]:
    """The 200 answer's JSON, or a streamed answer's chunks."""
    if not body.get("stream"):
        r = post(url, path, body)
        assert r.status_code == 200, r.text
        return r.json()
    with httpx.stream("POST", url + path, json=body, timeout=120) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]


def metric(url: str, name: str) -> float:
    """The value at the next heartbeat: engine numbers reach /metrics with the engine's heartbeat (0.2 s)."""
    time.sleep(0.5)
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")
