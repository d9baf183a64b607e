"""Which host each rank runs on, and which hosts still answer: what rank 0 says when a step across
hosts fails.

A collective that times out says only that it timed out ("Timed out waiting 60000ms for recv
operation"): not which rank, host or link stopped. Rank 0 gathers every rank's host name and the
address it reaches the master from once at start-up (`gather_hosts`); when a step fails, it asks each
other host once whether it still answers on the network (`unreachable`): a TCP connection to a port
nobody listens on is refused at once by a host that is up (so is one that is accepted), and is never
answered by a host whose link or power is gone. No listener of ours is needed on any host.
"""
from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass

import psutil

from moeserve import netif
from moeserve.engine.process_groups import gather_bytes

PROBE_PORT = 9  # discard: nothing listens there on a serving host, and a refusal is an answer
PROBE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class RankHost:
    name: str  # the host's name (socket.gethostname())
    address: str  # the address this rank reaches the master from (its interface toward the other hosts)
    interface: str


def this_host(master_addr: str) -> RankHost:
    try:
        interface, address = netif.route_interface(master_addr)
    except Exception:  # noqa: BLE001 - a name only: no route is for the launch checks to say
        interface, address = "", ""
    return RankHost(socket.gethostname(), address, interface)


def gather_hosts(master_addr: str, group) -> list[RankHost] | None:
    """Every rank's RankHost on rank 0 (rank order), None elsewhere; a collective over `group`."""
    payloads = gather_bytes(json.dumps(this_host(master_addr).__dict__).encode(), group)
    return None if payloads is None else [RankHost(**json.loads(p)) for p in payloads]


def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the host at `address` answers a TCP connection attempt (accepts or refuses it) in time."""
    try:
        socket.create_connection((address, PROBE_PORT), timeout=timeout_s).close()
        return True
    except ConnectionRefusedError:
        return True
    except OSError:  # timed out, no route, host or network unreachable or down
        return False


def unreachable(hosts: list[RankHost]) -> str | None:
    """What rank 0 (hosts[0]) finds gone, in one line: its own link to the other hosts down, or the other
    hosts that do not answer, with their ranks; None when every host answers (or all share one host)."""
    mine = hosts[0]
    others: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        if host.name != mine.name and host.address:
            others.setdefault(host.address, []).append(rank)
    if not others:
        return None
    stats = psutil.net_if_stats().get(mine.interface)
    if stats is not None and not stats.isup:
        return f"this host's link to the other hosts ({mine.interface}) is down"
    result: dict[str, bool] = {}
    threads = [threading.Thread(target=lambda a=a: result.__setitem__(a, answers(a)), daemon=True) for a in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PROBE_TIMEOUT_S + 1)
    gone = [f"{hosts[ranks[0]].name} ({address}, rank{'s' if len(ranks) > 1 else ''} "
            f"{', '.join(map(str, ranks))})" for address, ranks in others.items() if not result.get(address, False)]
    if not gone:
        return None
    return f"{'; '.join(gone)} did not answer on the network from {mine.name} over {mine.interface}: its link or " \
           f"the host is down"
