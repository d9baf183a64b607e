"""The engine core's part of the prefill/decode split, on rank 0 (mechanism; the pins' policy is
core/kv_pins.py): the side channel a prefill engine serves, the releases a decode engine posts once
it has read a prompt's blocks, and the transfer counters /metrics shows.
"""
from __future__ import annotations

import bisect
import logging
import queue
import threading
import time
import uuid
from typing import Any

from moeserve.config import KvTransferConfig
from moeserve.core.kv_pins import Pin
from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer.params import RemotePrefill, prefill_answer
from moeserve.kv_transfer.peer_calls import PeerError, release
from moeserve.kv_transfer.side_channel import SideChannel
from moeserve.kv_transfer.trust import key_for, sign_params

log = logging.getLogger("moeserve.kv_transfer")

RELEASE_TIMEOUT_S = 2.0
RELEASE_BACKOFF_S = 10.0  # after a release nobody answered, that side channel's next ones are skipped this long
# the transfer latency histogram's upper bounds (seconds), as /metrics shows them
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class KvConnector:
    def __init__(self, cfg: KvTransferConfig, rank_layouts: list[dict], block_size: int, tp_size: int):
        self.cfg = cfg
        self.engine_id = f"moeserve-{uuid.uuid4().hex}"
        self.tp_size = tp_size
        self.key = key_for(cfg.secret)
        self.side_channel: SideChannel | None = None
        if cfg.role in ("prefill", "both"):
            layout = {"tp_size": tp_size, "block_size": block_size, "ranks": rank_layouts}
            self.side_channel = SideChannel(cfg.side_channel_host, cfg.side_channel_port, self.engine_id, layout,
                                            self.key)
            log.info("KV side channel of engine %s on %s:%d", self.engine_id, self.side_channel.host, self.side_channel.port)
        self._outbox: queue.SimpleQueue[tuple[str, int, str, str, str, int] | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_releases, name="kv-release", daemon=True)
        self._sender.start()
        self.bytes_pulled = 0
        self.blocks_pulled = 0
        self.bytes_served = 0  # read from us by decoders (counted from the pins they released)
        self.blocks_served = 0
        self.pull_failures = 0
        self._latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0
        self._group_block_bytes = group_block_bytes(rank_layouts)
        self._in_flight: dict[str, KvPull] = {}  # request id -> its pull, until every rank has finished it

    # ---- prefill side ---------------------------------------------------------------------------
    def answer(self, pin: Pin) -> dict[str, Any]:
        """Publish `pin` on the side channel and return the kv_transfer_params naming it, signed with
        the pool's key (trust.py): a decoder acts on nothing else."""
        assert self.side_channel is not None
        self.side_channel.publish(pin.request_id, pin.block_ids, pin.prompt_digest, pin.group)
        return sign_params(self.key, prefill_answer(self.engine_id, pin.request_id, pin.block_ids, self.side_channel.host,
                                                    self.side_channel.port, self.tp_size, pin.group, pin.prompt_digest))

    def released(self) -> list[tuple[str, int | None]]:
        """(request id, bytes its decoder read or None) of each pin decoders released since the last call."""
        return self.side_channel.drain_releases() if self.side_channel is not None else []

    def unpublish(self, pin: Pin, read: bool, num_bytes: int | None = None) -> None:
        """`pin` is gone (read by its decoder, or expired): the side channel stops naming it. num_bytes:
        what the decoder's ranks read, as its release says (a decoder that did not say: every head of
        each block once)."""
        if self.side_channel is not None:
            self.side_channel.unpublish(pin.request_id)
        if read:
            self.blocks_served += len(pin.block_ids)
            if num_bytes is None:
                num_bytes = len(pin.block_ids) * self._group_block_bytes.get(pin.group, 0)
            self.bytes_served += num_bytes

    # ---- decode side ----------------------------------------------------------------------------
    def on_pulls(self, started: list[KvPull], done: list[KvPullDone]) -> None:
        """After a step: remember the pulls it `started` (the ranks read beside the steps), and for
        each pull every rank has now finished (`done`, merged over the group's ranks): count it and
        release the prefill engine's pin (a failed read too: the blocks are of no use to anyone once
        this request has failed)."""
        for pull in started:
            self._in_flight[pull.request_id] = pull
        for d in done:
            pull = self._in_flight.pop(d.request_id, None)
            if pull is None:
                continue
            ok = d.error is None
            if ok:
                self.bytes_pulled += d.num_bytes
                self.blocks_pulled += len(pull.remote_block_ids)
                if pull.remote_block_ids:
                    self._latency_counts[bisect.bisect_left(LATENCY_BUCKETS, d.seconds)] += 1
                    self._latency_sum += d.seconds
            else:
                self.pull_failures += 1
            self._outbox.put((pull.host, pull.port, pull.remote_request_id, pull.engine_id, pull.release_token,
                              d.num_bytes if ok else 0))

    def give_up(self, remote: RemotePrefill) -> None:
        """A decode request ended before it read its blocks (aborted while waiting): release them."""
        self._outbox.put((remote.host, remote.port, remote.request_id, remote.engine_id, remote.release_token, 0))

    def _send_releases(self) -> None:
        """One thread posts every release, in order. A side channel that did not answer one gets none
        for RELEASE_BACKOFF_S: a blackholed prefill server cost every release queued for it its
        timeout, and the releases to healthy ones waited behind them (their pins then held the blocks
        until expiry, and past --kv-max-pinned-blocks evicted newer prefills' pins)."""
        failed_at: dict[tuple[str, int], float] = {}
        while (item := self._outbox.get()) is not None:
            host, port, request_id, engine_id, token, num_bytes = item
            failed = failed_at.get((host, port))
            if failed is not None and time.monotonic() - failed < RELEASE_BACKOFF_S:
                log.info("release of %s at %s:%d skipped (it did not answer the last); it frees at its expiry",
                         request_id, host, port)
                continue
            try:
                released = release(host, port, self.key, request_id, engine_id, token, RELEASE_TIMEOUT_S, num_bytes)
                failed_at.pop((host, port), None)
            except PeerError as e:
                failed_at[(host, port)] = time.monotonic()
                log.info("release of %s: %s; it frees at its expiry", request_id, e)
                continue
            if not released:
                log.info("release of %s at %s:%d not acknowledged; it frees at its expiry", request_id, host, port)

    # ---- stats ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        cumulative, total = [], 0
        for n in self._latency_counts:
            total += n
            cumulative.append(total)
        return {
            "kv_transfer_bytes": self.bytes_pulled + self.bytes_served,
            "kv_transfer_bytes_pulled": self.bytes_pulled,
            "kv_transfer_bytes_served": self.bytes_served,
            "kv_blocks_transferred": self.blocks_pulled + self.blocks_served,
            "kv_transfer_failures": self.pull_failures,
            "kv_transfer_seconds_buckets": cumulative,  # cumulative counts per LATENCY_BUCKETS bound, then +Inf
            "kv_transfer_seconds_sum": self._latency_sum,
        }

    def close(self) -> None:
        self._outbox.put(None)
        self._sender.join(timeout=RELEASE_TIMEOUT_S + 1)
        if self.side_channel is not None:
            self.side_channel.close()


def group_block_bytes(rank_layouts: list[dict]) -> dict[int, int]:
    """Per attention group, the bytes of one block over its distinct KV heads (a head several ranks
    replicate, or MLA's latent, counted once): what a decoder reads of a block at the least."""
    seen: dict[int, dict[int, int]] = {}
    for r in rank_layouts:
        heads = seen.setdefault(int(r.get("group", 0)), {})
        heads.setdefault(int(r.get("head_start", 0)), sum(r["block_bytes"]))
    return {g: sum(h.values()) for g, h in seen.items()}
