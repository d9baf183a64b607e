"""A front end killed with SIGKILL (no chance to clean up) leaves no engine or rank process behind."""
from __future__ import annotations

import os
import signal
import time

import pytest
from server_harness import ServerProcess, alive, descendants

pytestmark = pytest.mark.slow  # each test starts, stops or kills a whole server


@pytest.mark.timeout(300)
def test_sigkilled_front_end_leaves_no_process():
    srv = ServerProcess("--ep", "2", "--max-model-len", "256", startup_timeout_s=240)
    engine_and_ranks = descendants(srv.proc.pid)
    try:
        assert len(engine_and_ranks) >= 2  # the engine process (rank 0) and rank 1
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(10)
        deadline = time.monotonic() + 30
        while any(alive(p) for p in engine_and_ranks):
            assert time.monotonic() < deadline, "the engine or a rank outlived its killed front end"
            time.sleep(0.5)
    finally:
        srv.kill()
        for pid in engine_and_ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_sigterm_with_a_stopped_engine_escalates_and_exits_cleanly():
    # a stopped engine (as stuck as a rank can be: it takes neither Shutdown nor SIGTERM) must be
    # killed by the front end's shutdown, which then exits 0 with nothing left behind
    srv = ServerProcess("--max-model-len", "256", "--health-timeout-s", "3", "--shutdown-timeout-s", "1")
    engines = descendants(srv.proc.pid)
    try:
        assert engines
        os.kill(engines[0], signal.SIGSTOP)
        srv.terminate()
        assert srv.wait(90) == 0, srv.log_tail()
        deadline = time.monotonic() + 15
        while any(alive(p) for p in engines):
            assert time.monotonic() < deadline, "the stopped engine outlived the server"
            time.sleep(0.2)
        assert "Traceback" not in "".join(srv.lines), srv.log_tail()
    finally:
        srv.kill()
        for pid in engines:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_an_engine_killed_by_a_signal_is_named_in_the_log_and_the_errors():
    """An OOM kill of the engine must leave a trace: the front end's log says the engine is dead and
    what ended it, and so do the 503s (before, only "the engine process exited", in no log line)."""
    import httpx

    srv = ServerProcess("--max-model-len", "256")
    engines = descendants(srv.proc.pid)
    try:
        assert engines
        os.kill(engines[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while httpx.get(srv.url + "/health", timeout=10).status_code != 503:
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.2)
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=30)
        assert r.status_code == 503 and "killed by SIGKILL" in r.json()["error"]["message"], r.text
        assert any("the engine is dead" in line and "SIGKILL" in line for line in srv.lines), srv.log_tail()
    finally:
        srv.kill()
