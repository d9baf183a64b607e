"""A second server with a one-request batch and a one-request queue: 429 when the queue is full, and
SIGTERM under load (503 for new requests, in-flight ones finish or end with "abort", exit 0, no
process left behind). The SIGTERM test ends this server, so it runs last."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from server_harness import ServerProcess, alive

URL_ARGS = ("--max-num-seqs", "1", "--max-queued-requests", "1", "--kv-cache-blocks", "256", "--max-model-len", "4000",
            "--shutdown-timeout-s", "5")  # far shorter than 3900 decode steps (20 s or more), long enough to see the 503s


@pytest.fixture(scope="module")
def small_server():
    with ServerProcess(*URL_ARGS) as srv:
        yield srv


def gauge(server, name: str) -> float:
    for line in httpx.get(server.url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def wait_until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


class Stream(threading.Thread):
    """A streaming completion in the background; records finish reasons and whether [DONE] came."""

    def __init__(self, server, max_tokens: int, prompt: str):
        super().__init__(daemon=True)
        self.body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
        self.url = server.url + "/v1/completions"
        self.status = None
        self.finish = None
        self.done = False
        self.tokens = 0

    def run(self) -> None:
        with httpx.stream("POST", self.url, json=self.body, timeout=120) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    self.done = True
                elif line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    self.tokens += 1
                    self.finish = choice["finish_reason"] or self.finish


@pytest.mark.slow
def test_full_queue_gets_429_with_retry_after(small_server):
    # ~900 decode steps: seconds, so the runner still runs when the third request arrives even though
    # the gauges below lag by a heartbeat (256 blocks of 16 hold the runner and the waiter)
    running = Stream(small_server, 900, "runner")
    running.start()
    wait_until(lambda: gauge(small_server, "moeserve_num_requests_running") == 1)
    waiting = Stream(small_server, 5, "waiter")
    waiting.start()
    wait_until(lambda: gauge(small_server, "moeserve_num_requests_waiting") == 1)
    r = httpx.post(small_server.url + "/v1/completions", json={"prompt": "one too many", "max_tokens": 5}, timeout=30)
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    err = r.json()["error"]
    assert err["type"] == "rate_limit_error" and err["code"] == "queue_full"
    running.join(180)
    waiting.join(180)
    assert running.finish == "length" and waiting.finish == "length" and running.done and waiting.done


@pytest.mark.slow
def test_sigterm_drains_then_aborts_then_exits_cleanly(small_server):
    # one short request in flight and one long one queued behind it (a second long one could meet a
    # full queue). A stream's headers come once the server has admitted it, so the long one is in
    # before the signal; the waiting gauge is no proof of that (it is the last heartbeat's, up to 0.2 s
    # old, and could still show the previous test's queued request).
    short = Stream(small_server, 8, "short one")
    short.start()
    wait_until(lambda: short.tokens >= 1)
    long = Stream(small_server, 3900, "long")  # ~3900 decode steps: far longer than the 5 s drain
    long.start()
    wait_until(lambda: long.status is not None)
    assert long.status == 200
    engine_pids = list(small_server.engine_pids)
    assert engine_pids and all(alive(p) for p in engine_pids)
    small_server.terminate()
    wait_until(lambda: httpx.get(small_server.url + "/health", timeout=5).status_code == 503, 10)
    r = httpx.post(small_server.url + "/v1/completions", json={"prompt": "late", "max_tokens": 2}, timeout=10)
    assert r.status_code == 503 and r.json()["error"]["message"]
    assert small_server.wait(60) == 0
    for s in (short, long):
        s.join(30)
        assert s.status == 200 and s.done, (s.status, s.done)
    assert short.finish == "length"
    assert long.finish == "abort" and long.tokens < 3900
    wait_until(lambda: not any(alive(p) for p in engine_pids), 10)
    assert any("serving" in line and "http://127.0.0.1:" in line for line in small_server.lines)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_while_the_engine_starts_exits_cleanly():
    """SIGTERM before the engine has connected: the front end exits 0 and the engine, finding no one
    to connect to, exits quietly (it used to print a ConnectionRefusedError traceback)."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "moeserve.cli", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "starting the engine process" in line:
                proc.send_signal(signal.SIGTERM)
                break
        lines += proc.stdout.readlines()  # to the end of both processes' output
        assert proc.wait(60) == 0, "".join(lines)
        assert "Traceback" not in "".join(lines), "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)



def test_sigterm_before_the_server_has_its_handlers_exits_0(monkeypatch):
    """Within the first second (imports, config checks) SIGTERM ended `moeserve serve` with 143, the
    default action, which a supervisor reads as a failure. Here the signal
    arrives while the sub-command's parser is built, in process."""
    import os
    import signal

    from moeserve import cli

    def build_parser_and_get_stopped(only=None):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not stop it")

    def left_to_the_default(signum, frame):  # stands in for the default action, which would end pytest
        raise AssertionError("SIGTERM took its default action (status 143)")

    previous = signal.signal(signal.SIGTERM, left_to_the_default)
    monkeypatch.setattr(cli, "build_parser", build_parser_and_get_stopped)
    try:
        with pytest.raises(SystemExit) as stopped:
            cli.main(["serve", "--port", "0"])
        assert stopped.value.code == 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_serve_called_in_process_gives_the_callers_sigterm_handler_back():
    """`cli.main(["serve", ...])` that returns (here: a refused flag) leaves the caller's SIGTERM
    handler in place; it left its own, so a later SIGTERM to the caller (pytest) raised SystemExit
    inside whatever test ran next."""
    import signal

    from moeserve import cli

    def callers(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        assert cli.main(["serve", "--ep", "6", "--tp", "4", "--port", "0"]) == 2
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, previous)
