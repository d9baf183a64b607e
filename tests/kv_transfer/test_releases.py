"""A decode engine's releases of the pins it read (kv_transfer/connector.py), without a prefill
server: one thread posts them in order, so a prefill side channel that does not answer (a
blackholed host: each release waits its 2 s timeout) must not hold the releases to healthy ones
behind every release queued for it. After one unanswered release, that side channel's next ones
are skipped for RELEASE_BACKOFF_S (a pin nobody releases frees at its expiry)."""
from __future__ import annotations

import threading

from moeserve.config import KvTransferConfig
from moeserve.kv_transfer import connector
from moeserve.kv_transfer.params import RemotePrefill
from moeserve.kv_transfer.peer_calls import PeerError


def test_a_silent_prefill_server_costs_one_release_timeout_not_one_per_release(monkeypatch):
    posted, healthy_done = [], threading.Event()

    def release(host, port, key, request_id, engine_id, token, timeout_s, num_bytes=None):
        posted.append(request_id)
        if host == "10.0.0.1":
            raise PeerError("the prefill server's side channel at 10.0.0.1:1 did not answer (TimeoutError)")
        if request_id == "b1":
            healthy_done.set()
        return True

    monkeypatch.setattr(connector, "release", release)
    kv = connector.KvConnector(KvTransferConfig(role="decode", secret="a long enough pool secret"), [], 16, 1)
    try:
        for request_id, host in (("a1", "10.0.0.1"), ("a2", "10.0.0.1"), ("a3", "10.0.0.1"), ("b0", "10.0.0.2"),
                                 ("b1", "10.0.0.2")):
            kv.give_up(RemotePrefill("e-" + host, request_id, [0], host, 1, release_token="t"))
        assert healthy_done.wait(30)
    finally:
        kv.close()
    assert posted == ["a1", "b0", "b1"]  # a2 and a3 skipped: a1 went unanswered
