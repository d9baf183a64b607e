"""A rank's part of the prefill/decode split: its KV cache registered with NIXL (its own agent), and
its attention group's KvPulls, read beside the engine's steps: engine/worker.py hands each step's
new pulls to `start` and collects the finished ones with `finished`, so a long read never stalls the
running requests' steps (the scheduler keeps the pulling requests out of every batch until their
reads are done on every rank, and never hands their blocks to anyone meanwhile).

Every rank of the decode group reads, for each block, the KV heads it holds, from whichever ranks of
the prefill group named in the pull hold them: in place when a source holds the same heads
(cache_layout.pull_rows), else its whole blocks through a staging buffer (staging.py); the executor merges
the ranks' outcomes on rank 0 (step_plan.PullTally), so one failed rank fails the request.

One /layout per prefill engine (every rank's CacheLayout), cached by (host, port) and checked against
the engine id each pull names: a restarted prefill engine has a new id, so old parameters fail
instead of reading someone else's blocks. NIXL's add_remote_agent runs once per (engine, rank) this
rank reads from.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

import torch

from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer.cache_layout import CacheLayout, LayoutMismatch, group_ranks, pull_rows
from moeserve.kv_transfer.head_slices import HeadRange
from moeserve.kv_transfer.nixl_agent import KvAgent, ReadInFlight, TransferError
from moeserve.kv_transfer.peer_calls import LAYOUT_ANSWER_BYTES, PeerError, get_json, pin_answer_bytes, pin_path
from moeserve.kv_transfer.staging import (
    SourceReads, chunks, plan_sources, scatter_staged, staged_block_bytes, staged_rows,
)
from moeserve.kv_transfer.trust import PoolKey
from moeserve.errors import ConfigError
from moeserve.netif import is_loopback_address

log = logging.getLogger("moeserve.kv_transfer")

HANDSHAKE_TIMEOUT_S = 10.0  # GET /layout, and the pin check after a read (each a whole call: peer_calls.py)
READ_TIMEOUT_S = 10.0  # a pull's reads this slow, together, mean the prefill engine died mid-transfer
STAGING_BYTES = 64 << 20  # a staged read moves at most this much per NIXL transfer
SETTLE_POLL_S = 0.05  # how often the reader asks NIXL whether a failed read still running has ended


class PinGone(TransferError):
    """The pull's pin was withdrawn (expired) before or during the read: this pull fails, not its peer."""


class RankKvAgent:
    def __init__(self, kv_caches: list[list[torch.Tensor]], key: PoolKey, block_size: int,
                 heads: HeadRange = HeadRange(0, 1, 1), group: int = 0, tp_rank: int = 0, bind_host: str = "127.0.0.1"):
        """kv_caches[layer] = that layer's cache tensors, each [num_blocks, block_size, ...]; key: the
        pool's (side-channel calls are signed with it); heads: the KV heads they hold; group, tp_rank:
        this rank's attention group and place in it; bind_host: the address peers reach this host at."""
        self.key = key
        self.agent = KvAgent([t for layer in kv_caches for t in layer], block_size, heads, group, tp_rank,
                             bind_host=bind_host)
        self._engines: dict[tuple[str, int], tuple[str, list[CacheLayout]]] = {}  # (host, port) -> (engine id, ranks)
        self._init_reader()

    def _init_reader(self) -> None:
        self._todo: queue.SimpleQueue[list[KvPull] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[KvPullDone] = queue.SimpleQueue()
        self._num_in_flight = 0  # reports still to come: pulls started, and reads that linger (`_settle`)
        self._lingering: dict[int, str] = {}  # ReadInFlight.token -> its pull's request id (reader thread's)
        self._reader: threading.Thread | None = None  # started with the first pull

    def start(self, pulls: list[KvPull]) -> None:
        """Read `pulls` in the background (one reader thread: one step's pulls after another's)."""
        if not pulls:
            return
        if self._reader is None:
            self._reader = threading.Thread(target=self._read_loop, name="kv-reader", daemon=True)
            self._reader.start()
        self._num_in_flight += len(pulls)
        self._todo.put(pulls)

    def finished(self, wait_s: float = 0.0) -> list[KvPullDone]:
        """The pulls whose reads have ended since the last call; waits up to wait_s for a first one
        when none has (an engine with nothing else to run should not spin on this)."""
        out = []
        if self._num_in_flight and wait_s > 0:
            try:
                out.append(self._done.get(timeout=wait_s))
            except queue.Empty:
                pass
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        self._num_in_flight -= len(out)
        self._num_in_flight += sum(d.lingering > 0 for d in out)  # each reports its end later (lingering -1)
        return out

    @property
    def num_in_flight(self) -> int:
        return self._num_in_flight

    def _read_loop(self) -> None:
        while True:
            try:  # while a failed read still runs (lingers), wake to ask whether it has ended
                pulls = self._todo.get(timeout=SETTLE_POLL_S) if self._lingering else self._todo.get()
            except queue.Empty:
                pulls = []
            if pulls is None:
                return
            try:
                dones = self.run(pulls) if pulls else []
            except Exception as e:  # a bug, not a peer: still every pull must end, or its request waits forever
                log.exception("KV reads of %d pulls failed", len(pulls))
                dones = [KvPullDone(p.request_id, error=f"{type(e).__name__}: {e}") for p in pulls]
            for done in dones + self._settle():
                self._done.put(done)

    def _settle(self) -> list[KvPullDone]:
        """For each read that failed while still running and has now ended: its pull's request id
        with lingering -1 (the scheduler holds the request's blocks until every such read has ended)."""
        if not self._lingering:
            return []
        ended = [self._lingering.pop(token) for token in self.agent.settle()]
        for request_id in ended:
            log.info("the failed KV read of %s has ended: its blocks may be reused", request_id)
        return [KvPullDone(request_id, lingering=-1) for request_id in ended]

    def layout(self) -> dict:
        return self.agent.layout.to_json()

    def run(self, pulls: list[KvPull]) -> list[KvPullDone]:
        """One step's pulls, in order, read now. A prefill engine that failed one pull fails the
        step's later pulls from it at once, so a dead or stuck peer costs one set of timeouts, not
        one per request."""
        down: dict[tuple[str, int], str] = {}
        out = []
        for pull in pulls:
            error = down.get((pull.host, pull.port))
            if error is not None:
                out.append(KvPullDone(pull.request_id, error=error))
                continue
            done, peer_down = self._pull(pull)
            if peer_down:
                down[(pull.host, pull.port)] = done.error
            out.append(done)
        return out

    def _pull(self, pull: KvPull) -> tuple[KvPullDone, bool]:
        """How the pull went, and whether its prefill engine failed (not answering, or a read failing:
        True) rather than this pull alone (its pin gone, its block ids out of range: False)."""
        if not pull.remote_block_ids:
            return KvPullDone(pull.request_id), False  # our prefix cache held every block
        deadline = time.monotonic() + READ_TIMEOUT_S  # one for all of the pull's reads
        try:
            sources = group_ranks(self._handshake(pull), pull.remote_group)
            _check_reachable(sources, pull.host)
            plan = plan_sources(self.agent.layout, sources, pull.remote_block_ids)
            for reads in plan:
                self.agent.add_peer(reads.src)
            started = time.perf_counter()
            nbytes = sum(self.read_from(reads, pull.local_block_ids, pull.remote_block_ids, deadline) for reads in plan)
            seconds = time.perf_counter() - started  # the reads alone: /metrics' transfer latency
            self._check_still_pinned(pull)
        except (PeerError, TransferError, LayoutMismatch) as e:
            self._forget(pull.host, pull.port)  # the next pull shakes hands afresh (the engine may be back)
            log.warning("KV pull of %s from %s:%d failed: %s", pull.request_id, pull.host, pull.port, e)
            peer_down = isinstance(e, (PeerError, TransferError)) and not isinstance(e, PinGone)
            if isinstance(e, ReadInFlight):  # it may still write the request's blocks: they stay held
                self._lingering[e.token] = pull.request_id
                return KvPullDone(pull.request_id, error=str(e), lingering=1), peer_down
            return KvPullDone(pull.request_id, error=str(e)), peer_down
        return KvPullDone(pull.request_id, nbytes, seconds), False

    def read_from(self, reads: SourceReads, local_ids: list[int], remote_ids: list[int], deadline: float) -> int:
        """Read heads reads.runs of remote_ids from one source rank into local_ids by `deadline`
        (time.monotonic()); the bytes moved."""
        mine, src = self.agent.layout, reads.src
        try:
            if not reads.staged(mine):  # the same heads on both sides: whole blocks land in place
                ((lo, re),) = pull_rows(mine, [src], local_ids, remote_ids).values()
                return self.agent.read(src.agent_name, lo, re, _left(deadline))
            nbytes = 0
            per_block = staged_block_bytes(src)
            for local, remote in chunks(local_ids, remote_ids, max(1, STAGING_BYTES // per_block)):
                staging = self.agent.staging(len(remote) * per_block)
                lo, re = staged_rows(src, staging.data_ptr(), remote)
                nbytes += self.agent.read(src.agent_name, lo, re, _left(deadline))
                scatter_staged(staging, self.agent.caches, src, mine, reads.runs, local)
            return nbytes
        except TransferError as e:  # say which prefill rank, on which host (a ReadInFlight stays one)
            where = f" at {src.host}" if src.host else ""
            e.args = (f"{e} (prefill group {src.group}, tp rank {src.tp_rank}{where})",)
            raise e from None

    def _check_still_pinned(self, pull: KvPull) -> None:
        """A one-sided read cannot tell whether the owner freed (and reused) the blocks meanwhile: a
        pin that expired while this request waited in our queue. The owner frees an expired pin and
        withdraws it from its side channel before it can schedule anything into the blocks, so a
        pin still listed after the read was pinned all through it."""
        status, body = get_json(pull.host, pull.port, self.key, pin_path(pull.remote_request_id), HANDSHAKE_TIMEOUT_S,
                                pin_answer_bytes(pull.remote_block_ids))
        pinned = body.get("block_ids") if status == 200 and body.get("engine_id") == pull.engine_id else None
        if not isinstance(pinned, list) or not set(pull.remote_block_ids) <= set(pinned):
            raise PinGone(f"the prefill server no longer holds the blocks of {pull.remote_request_id} "
                                f"(expired while this request waited): its KV was not used")

    def _handshake(self, pull: KvPull) -> list[CacheLayout]:
        """Every rank's layout of the prefill engine the pull names (GET /layout once per engine)."""
        key = (pull.host, pull.port)
        known = self._engines.get(key)
        if known is None or known[0] != pull.engine_id:
            self._forget(*key)
            status, body = get_json(pull.host, pull.port, self.key, "/layout", HANDSHAKE_TIMEOUT_S, LAYOUT_ANSWER_BYTES)
            if status != 200 or not isinstance(body.get("ranks"), list):
                raise PeerError(f"the side channel at {pull.host}:{pull.port} answered {status} to /layout")
            if body.get("engine_id") != pull.engine_id:
                raise PeerError(f"the prefill server at {pull.host}:{pull.port} is engine {body.get('engine_id')!r}, "
                                f"not {pull.engine_id!r} (it restarted): its old blocks are gone")
            try:
                ranks = [CacheLayout.from_json(r) for r in body["ranks"]]
            except (KeyError, TypeError, ValueError) as e:
                raise PeerError(f"the side channel at {pull.host}:{pull.port} sent a layout this version cannot "
                                f"read ({type(e).__name__}: {e})") from None
            self._engines[key] = (pull.engine_id, ranks)
        return self._engines[key][1]

    def _forget(self, host: str, port: int) -> None:
        known = self._engines.pop((host, port), None)
        if known is not None:
            for rank in known[1]:
                self.agent.remove_peer(rank.agent_name)

    def close(self) -> None:
        """Let the reader finish what it started (each read has its timeout), then deregister."""
        if self._reader is not None:
            self._todo.put(None)
            self._reader.join(timeout=2 * (HANDSHAKE_TIMEOUT_S + READ_TIMEOUT_S))
            self._reader = None
        self.agent.close()


def _check_reachable(sources: list[CacheLayout], side_channel_host: str) -> None:
    """LayoutMismatch where a prefill rank listens on loopback only but its side channel does not (a
    server spanning hosts whose host gave no --kv-side-channel-host of its own): a decoder on
    another host could never read its blocks, and UCX would try the decoder's own loopback."""
    try:
        if not side_channel_host or is_loopback_address(side_channel_host):
            return
    except ConfigError:  # a name this host cannot resolve: the handshake has reached it, so it is not ours
        return
    for src in sources:
        if src.host and is_loopback_address(src.host):
            raise LayoutMismatch(f"prefill group {src.group}'s tp rank {src.tp_rank} listens on {src.host} only: its "
                                 f"host needs --kv-side-channel-host set to its own address facing the decoders")


def _left(deadline: float) -> float:
    """Seconds until `deadline`; a read past it times out at once."""
    return max(0.001, deadline - time.monotonic())
