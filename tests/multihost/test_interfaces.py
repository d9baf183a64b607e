"""The interface between hosts (the one that routes to MASTER_ADDR, or --dist-ifname; never loopback
with --nodes > 1), what rank 0 says about hosts that stop answering, and a launcher's rank giving up
on a silent rank 0. Quick: no model, no ranks."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from moeserve import netif
from moeserve.config import ParallelConfig
from moeserve.engine.host_map import RankHost, answers, unreachable
from moeserve.engine.launch_check import check_launch, dist_interface, use_dist_interface
from moeserve.errors import ConfigError


@pytest.fixture
def launcher(monkeypatch):
    """The environment torchrun gives a rank of a 4-rank world."""
    for name, value in dict(RANK="1", WORLD_SIZE="4", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT="29500").items():
        monkeypatch.setenv(name, value)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_route_to_an_address_leaves_by_its_interface():
    assert netif.route_interface("127.0.0.1") == ("lo", "127.0.0.1")
    assert netif.is_loopback("lo")
    with pytest.raises(ConfigError, match="no network interface 'nope0'"):
        netif.interface_addresses("nope0")


def test_one_node_may_talk_over_loopback_several_never(launcher):
    one = ParallelConfig(ep=4)
    assert dist_interface(one) == "lo"
    check_launch(one)
    two = ParallelConfig(ep=4, nodes=2)
    with pytest.raises(ConfigError, match="--nodes 2: the hosts cannot talk over the loopback interface lo "
                                          r"\(the route to MASTER_ADDR 127.0.0.1\)"):
        check_launch(two)
    with pytest.raises(ConfigError, match="no network interface 'eth9'"):
        dist_interface(ParallelConfig(ep=4, dist_ifname="eth9"))
    with pytest.raises(ConfigError, match="--dist-ifname"):
        ParallelConfig(ep=4, dist_ifname="eth0; rm").validate()


def test_the_operators_interface_variables_win(launcher):
    launcher.setenv("GLOO_SOCKET_IFNAME", "theirs")
    assert use_dist_interface(ParallelConfig(ep=4), 1) == "lo"
    assert os.environ["GLOO_SOCKET_IFNAME"] == "theirs" and os.environ["NCCL_SOCKET_IFNAME"] == "lo"


def test_rank0_names_the_host_that_stopped_answering(make_cluster):
    a, b, c = make_cluster(3)
    hosts = [RankHost(h.name, h.address, "eth0") for h in (a, a, b, b, c)]
    assert a.call(answers, b.address) and a.call(unreachable, hosts) is None
    b.set_link(False)
    gone = a.call(unreachable, hosts)
    assert gone == "host-b (10.77.0.2, ranks 2, 3) did not answer on the network from host-a over eth0: its link " \
                   "or the host is down", gone
    c.kill()
    assert "host-b (10.77.0.2, ranks 2, 3); host-c (10.77.0.3, rank 4) did not answer" in a.call(unreachable, hosts)
    a.set_link(False)
    assert a.call(unreachable, hosts) == "this host's link to the other hosts (eth0) is down"


def test_a_launchers_rank_exits_when_rank0_falls_silent():
    code = textwrap.dedent("""
        import logging, time
        logging.basicConfig(level=logging.INFO)
        from moeserve.engine.rank_worker import Rank0Watch
        watch = Rank0Watch(0.5, 3)
        watch.waiting(); time.sleep(0.3); watch.got_plan(); time.sleep(1.0)  # a plan came in time: alive
        print("alive", flush=True)
        watch.waiting(); time.sleep(5)
        print("still here", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == "alive\n", (out.stdout, out.stderr)
    assert "rank 3: no step from rank 0 for 0 s" in out.stderr
