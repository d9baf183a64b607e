"""The simulated hosts are hosts: own name, /etc/hosts, /dev/shm and network; they reach each other and
nothing else; a link taken down carries nothing; a killed host and a closed cluster leave nothing."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

PY = sys.executable


def _listen(address: str) -> socket.socket:
    s = socket.socket()
    s.bind((address, 0))
    s.listen(4)
    return s


def _reaches(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        socket.create_connection((address, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def test_hosts_have_their_own_name_hosts_file_shm_and_network(make_cluster):
    a, b = make_cluster(2)
    assert a.run(["hostname"]).stdout.strip() == "host-a" and b.run(["hostname"]).stdout.strip() == "host-b"
    hosts = a.run(["cat", "/etc/hosts"]).stdout
    assert "10.77.0.1 host-a" in hosts and "10.77.0.2 host-b" in hosts
    resolved = b.run([PY, "-c", "import socket; print(socket.gethostbyname('host-a'))"]).stdout.strip()
    assert resolved == a.address
    assert a.run(["sh", "-c", "echo x > /dev/shm/only-on-a"]).returncode == 0
    assert a.shm_files() == ["only-on-a"] and b.shm_files() == []
    assert not os.path.exists("/dev/shm/only-on-a")
    devices = b.run(["ls", "/sys/class/net"]).stdout.split()
    assert sorted(devices) == ["eth0", "lo"], devices
    assert a.run(["rm", "/dev/shm/only-on-a"]).returncode == 0


def test_hosts_reach_each_other_and_nothing_else(make_cluster):
    a, b = make_cluster(2)
    server = a.call(_listen, a.address)
    try:
        port = server.getsockname()[1]
        assert b.call(_reaches, a.address, port)
        assert not _reaches(a.address, port, 0.3)  # the test's own network has no route there
        b.set_link(False)
        assert not b.call(_reaches, a.address, port, 0.5)
        b.set_link(True)
        deadline = time.monotonic() + 10
        while not b.call(_reaches, a.address, port):
            assert time.monotonic() < deadline, "the link did not come back"
            time.sleep(0.1)
    finally:
        server.close()


def test_a_killed_host_and_a_closed_cluster_leave_nothing(make_cluster):
    a, b = make_cluster(2)
    sleepers = [h.popen(["sh", "-c", "sleep 300 & sleep 300 & echo x > /dev/shm/seg; wait"]) for h in (a, b)]
    deadline = time.monotonic() + 10
    while len(a.processes()) < 3 or len(b.processes()) < 3 or not a.shm_files():
        assert time.monotonic() < deadline, (a.processes(), b.processes())
        time.sleep(0.05)
    netns = os.readlink(f"/proc/{b.pid}/ns/net")
    b.kill()
    assert sleepers[1].wait(10) != 0
    assert b.processes() == [] and b.shm_files() == [] and not b.alive
    left = a.cluster.leftovers()
    assert set(left) == {"host-a"} and left["host-a"]["shm"] == ["seg"]
    pids = a.processes()
    a.cluster.close()
    assert sleepers[0].wait(10) != 0
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
    ours = {os.readlink(f"/proc/{p}/ns/net") for p in os.listdir("/proc") if p.isdigit() and
            os.path.exists(f"/proc/{p}/ns/net")}
    assert netns not in ours
