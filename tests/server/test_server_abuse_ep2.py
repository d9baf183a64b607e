"""A two-rank server (--ep 2) under abuse of its ranks and its network surface (docs/limits.md).

Every socket the process tree listens on is on --host or loopback: rank 0's torch TCPStore listened on
every interface, IPv4 and IPv6, without authentication; so could gloo's pair
sockets, on the address the host name resolves to. A SIGSTOPped rank is named, and /health says 503,
within seconds, not after the 60 s heartbeat timeout as "no heartbeat"."""
from __future__ import annotations

import ipaddress
import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
from server_harness import ServerProcess, alive, child_pids, descendants

pytestmark = pytest.mark.slow  # spawns ranks, servers or builds: left out of the quick run

_LISTEN = "0A"


def _address(hex_addr: str) -> str:
    """/proc/net/tcp{,6}'s local address (host byte order per 32-bit word) as text."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def listening_sockets() -> dict[int, str]:
    """inode -> "address:port" of every listening TCP socket of this network namespace."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state == _LISTEN:
                addr, port = local.split(":")
                out[inode] = f"{_address(addr)}:{int(port, 16)}"
    return out


def _loopback(text: str) -> bool:
    addr = ipaddress.ip_address(text)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


@pytest.fixture(scope="module")
def srv():
    with ServerProcess("--ep", "2", "--tp", "1", "--max-model-len", "512", "--kv-cache-blocks", "64",
                       startup_timeout_s=400) as server:
        yield server


def test_every_listening_socket_of_an_ep2_server_is_on_loopback(srv):
    assert socket.gethostname()  # (the check holds whatever the host name resolves to)
    r = httpx.post(srv.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 4}, timeout=120)
    assert r.status_code == 200
    tree = [srv.proc.pid, *descendants(srv.proc.pid)]
    assert len(tree) >= 3  # front end, engine (rank 0), rank 1
    listening = listening_sockets()
    ours = {listening[i] for pid in tree for i in socket_inodes(pid) if i in listening}
    assert len(ours) >= 2, ours  # the HTTP port and the rendezvous store at least
    exposed = {a for a in ours if not _loopback(a.rsplit(":", 1)[0])}
    assert not exposed, f"listening beyond loopback: {sorted(exposed)}"


def test_a_stopped_rank_is_named_and_health_turns_503_within_seconds(srv):
    """Idle server, default --step-timeout-s and --health-timeout-s (60 s): the probe step blocked on
    the stopped rank and the front end said "no heartbeat" after 60 s, /health 200 until then."""
    engine = child_pids(srv.proc.pid)
    rank1 = next(p for p in descendants(srv.proc.pid) if p not in engine)
    os.kill(rank1, signal.SIGSTOP)
    try:
        stopped_at = time.monotonic()
        while (health := httpx.get(srv.url + "/health", timeout=5)).status_code != 503:
            assert time.monotonic() - stopped_at < 40, "/health still 200 40 s after a rank stopped"
            time.sleep(0.5)
        assert "rank 1 is stopped" in health.json()["error"]["message"], health.text
    finally:
        if alive(rank1):
            os.kill(rank1, signal.SIGKILL)
