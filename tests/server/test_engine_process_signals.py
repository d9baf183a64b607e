"""The engine process's SIGTERM handling: a SIGTERM that lands while the interpreter is already shutting
down (the parent-death signal of a front end SIGKILLed just as the engine saw its socket close) must not
raise SystemExit into that shutdown, which prints a traceback to the server's log."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

# run_engine_process returns at once, leaving a non-daemon thread that the interpreter's shutdown waits for
SCRIPT = """
import sys, threading, time
from moeserve.server import engine_process as ep
late = threading.Thread(target=time.sleep, args=(2.0,))
def serve(*args, **kwargs):
    late.start()
    print("served", flush=True)
    return 0
ep.run_engine_process, ep.pinned, ep.config_from_dict = serve, (lambda c: c), (lambda d: d)
sys.exit(ep.main(["--socket", "unused", "--config-json", "{}"]))
"""


@pytest.mark.timeout(60)
def test_a_sigterm_during_the_interpreters_shutdown_exits_quietly():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "served"
    time.sleep(0.5)  # main has returned: the interpreter waits for the thread
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err and "SystemExit" not in err, err
