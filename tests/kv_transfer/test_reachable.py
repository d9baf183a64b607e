"""The decoder's check that a prefill rank is reachable from another host (a rank listening on loopback
behind a side channel that is not): judged on resolved addresses, and never past the pull's deadline,
however long the resolver takes to answer a name."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from moeserve.kv_transfer import peer_calls
from moeserve.kv_transfer.cache_layout import CacheLayout, LayoutMismatch
from moeserve.kv_transfer.rank_agent import _check_reachable


def _rank(host: str, tp_rank: int = 0) -> CacheLayout:
    return CacheLayout("agent", "", [0], [8], 4, 4, "float32", tp_rank=tp_rank, host=host)


def test_a_loopback_rank_behind_an_outward_side_channel_is_refused():
    with pytest.raises(LayoutMismatch, match="tp rank 1 listens on 127.0.0.1 only"):
        _check_reachable([_rank("10.1.2.3"), _rank("127.0.0.1", 1)], "10.1.2.3", time.monotonic() + 5)


def test_names_resolve_to_what_they_name():
    with pytest.raises(LayoutMismatch, match="listens on localhost only"):
        _check_reachable([_rank("localhost")], "10.1.2.3", time.monotonic() + 5)
    _check_reachable([_rank("localhost")], "localhost", time.monotonic() + 5)  # one host: nothing to check
    _check_reachable([_rank("10.1.2.4")], "10.1.2.3", time.monotonic() + 5)


def test_a_resolver_that_never_answers_holds_the_check_only_until_the_deadline(monkeypatch):
    released = threading.Event()
    real = socket.getaddrinfo

    def stuck(host, *args, **kwargs):
        if host.endswith(".blackholed"):
            released.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "temporary failure")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(peer_calls.socket, "getaddrinfo", stuck)
    try:
        started = time.monotonic()
        # the side channel's name: not judged; a rank's name: not judged either, the reads fail on their own
        _check_reachable([_rank("127.0.0.1")], "prefill.blackholed", started + 0.5)
        _check_reachable([_rank("rank.blackholed")], "10.1.2.3", time.monotonic() + 0.5)
        assert time.monotonic() - started < 5
    finally:
        released.set()
