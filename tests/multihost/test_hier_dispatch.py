"""Hierarchical dispatch (dispatch/hierarchical.py) equals `local` on the whole routing, case by case
(the equality suite's generators and checks: tests/dispatch/dispatch_cases.py), on six ranks over three
simulated hosts: each host's ranks share that host's /dev/shm only, rails cross the simulated network.
`auto` picks it there, and `shm` across hosts is refused by every rank (the hosts are real enough)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from dispatch_world import CASES, PER_HOST

pytestmark = pytest.mark.slow  # six rank processes on three hosts

WORLD = 6


@pytest.fixture(scope="module")
def results(make_module_cluster) -> list[dict]:
    cluster = make_module_cluster(WORLD // PER_HOST)
    procs = []
    for rank in range(WORLD):
        host = cluster[rank // PER_HOST]
        env = dict(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR=cluster[0].address, MASTER_PORT="29600",
                   GLOO_SOCKET_IFNAME="eth0")
        procs.append(host.popen([sys.executable, "tests/multihost/dispatch_world.py"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [""] * WORLD

    def read(i: int) -> None:
        outputs[i] = procs[i].stdout.read()

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(WORLD)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(600)  # a hang fails here, and the cluster's teardown kills the ranks
    per_rank = []
    for rank, text in enumerate(outputs):
        line = next((x for x in text.splitlines() if x.startswith("RESULTS ")), None)
        assert line is not None, f"rank {rank} gave no results:\n{text[-3000:]}"
        per_rank.append(json.loads(line[len("RESULTS "):]))
    return per_rank


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hierarchical_dispatch_matches_local(case, results):
    errors = {r: results[r][case.name] for r in range(case.world)}
    assert all(e is None for e in errors.values()), errors
