"""A real NIXL READ whose peer stalls, for test_read_in_flight.py (no NIXL agent lives in the pytest
process: NIXL may crash at interpreter exit). Prints one JSON line; exits with os._exit.

    nixl_stall.py reader stop|kill: starts an owner (this script, role "owner": a registered 16 MiB
        tensor of ones), reads it once, then stops (SIGSTOP) or kills the owner and reads again with a
        2 s timeout; a stopped owner is continued 1 s after the read failed. Prints what the read
        raised, how many bytes had landed in the destination (its sum) after the failure, then
        after the settle polls, and when settle named the read.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import torch

SHAPE = (16, 1024, 256)  # float32: 16 MiB


def owner() -> None:
    from moeserve.kv_transfer.nixl_agent import KvAgent

    t = torch.ones(SHAPE)
    agent = KvAgent([t], block_size=1, name="stall-owner")
    print(json.dumps({"meta": agent.layout.agent_metadata, "addr": t.data_ptr()}), flush=True)
    time.sleep(120)
    os._exit(0)


def reader(how: str) -> None:
    from moeserve.kv_transfer.nixl_agent import KvAgent, ReadInFlight, TransferError

    peer = subprocess.Popen([sys.executable, __file__, "owner"], stdout=subprocess.PIPE, text=True)
    try:
        line = peer.stdout.readline()
        while line and not line.startswith('{"meta"'):
            line = peer.stdout.readline()
        info = json.loads(line)
        t = torch.zeros(SHAPE)
        agent = KvAgent([t], block_size=1, name="stall-reader")
        agent.agent.add_remote_agent(base64.b64decode(info["meta"]))
        agent._peers.add("stall-owner")
        n = t.numel() * t.element_size()
        lo = np.array([[t.data_ptr(), n]], dtype=np.int64)
        re = np.array([[info["addr"], n]], dtype=np.int64)
        out = {"warm": agent.read("stall-owner", lo, re, 10.0)}
        t.zero_()
        os.kill(peer.pid, signal.SIGSTOP if how == "stop" else signal.SIGKILL)
        try:
            agent.read("stall-owner", lo, re, 2.0)
            out["raised"] = None
        except ReadInFlight:
            out["raised"] = "ReadInFlight"
        except TransferError:
            out["raised"] = "TransferError"
        out["lingering"] = agent.num_lingering
        time.sleep(1.0)
        out["landed_before_continue"] = float(t.sum()) * 4
        if how == "stop":
            os.kill(peer.pid, signal.SIGCONT)
        settled_at = None
        started = time.monotonic()
        while agent.num_lingering and time.monotonic() - started < float(os.environ.get("STALL_WAIT_S", "30")):
            if agent.settle():
                settled_at = time.monotonic() - started
            time.sleep(0.05)
        out["settled_after_s"] = settled_at
        out["still_lingering"] = agent.num_lingering
        time.sleep(1.0)
        out["landed_at_end"] = float(t.sum()) * 4
        out["bytes"] = n
        print(json.dumps(out), flush=True)
    finally:
        peer.kill()
        peer.wait()
    os._exit(0)


if __name__ == "__main__":
    owner() if sys.argv[1] == "owner" else reader(sys.argv[2])
