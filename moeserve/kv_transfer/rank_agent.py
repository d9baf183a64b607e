"""A rank's part of the prefill/decode split: its KV cache registered with NIXL (its own agent), and
its attention group's KvPulls, read beside the engine's steps: engine/worker.py hands each step's
new pulls to `start` and collects the finished ones with `finished`, so a long read never stalls the
running requests' steps (the scheduler keeps the pulling requests out of every batch until their
reads are done on every rank, and never hands their blocks to anyone meanwhile).

Each prefill engine's pulls are read by a thread of its own, in the order they came (at most
MAX_READERS threads, started on an engine's first pull, ended after READER_IDLE_S idle or to make
room for another engine): a prefill engine that stopped answering holds its own pulls for their
timeouts, never another engine's. The threads share the rank's NIXL agent, one call at a time
(nixl_agent.py), each with its own staging buffer.

Every rank of the decode group reads, for each block, the KV heads it holds, from whichever ranks of
the prefill group named in the pull hold them: in place when a source holds the same heads
(cache_layout.pull_rows), else its whole blocks through a staging buffer (staging.py); the executor merges
the ranks' outcomes on rank 0 (step_plan.PullTally), so one failed rank fails the request.

One /layout per prefill engine (every rank's CacheLayout), cached by engine id and checked against
the id the side channel answers with: a restarted prefill engine has a new id, so old parameters
fail instead of reading someone else's blocks. NIXL's add_remote_agent runs once per (engine, rank)
this rank reads from.
"""
from __future__ import annotations

import ipaddress
import logging
import queue
import threading
import time

import torch

from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer.cache_layout import CacheLayout, LayoutMismatch, group_ranks, pull_rows
from moeserve.kv_transfer.head_slices import HeadRange
from moeserve.kv_transfer.nixl_agent import KvAgent, ReadInFlight, TransferError
from moeserve.kv_transfer.peer_calls import LAYOUT_ANSWER_BYTES, PeerError, get_json, pin_answer_bytes, pin_path, resolve
from moeserve.kv_transfer.staging import (
    SourceReads, chunks, plan_sources, scatter_staged, staged_block_bytes, staged_rows,
)
from moeserve.kv_transfer.trust import PoolKey

log = logging.getLogger("moeserve.kv_transfer")

HANDSHAKE_TIMEOUT_S = 10.0  # GET /layout, and the pin check after a read (each a whole call: peer_calls.py)
READ_TIMEOUT_S = 10.0  # a pull's reads this slow, together, mean the prefill engine died mid-transfer
STAGING_BYTES = 64 << 20  # a staged read moves at most this much per NIXL transfer
SETTLE_POLL_S = 0.05  # how often the engine thread asks NIXL whether a failed read still running has ended
MAX_READERS = 16  # reader threads per rank at most: one per prefill engine read from, started on its first pull
READER_IDLE_S = 60.0  # a reader idle this long ends, and its engine's connections with it


class _Reader:
    """The thread reading one prefill engine's pulls, a step's batch after another's."""

    def __init__(self, engine_id: str):
        self.engine_id = engine_id
        self.todo: queue.SimpleQueue[list[KvPull] | None] = queue.SimpleQueue()
        self.pending = 0  # batches queued or being read (RankKvAgent._lock): 0 is idle
        self.thread: threading.Thread | None = None


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
        self._engines: dict[str, list[CacheLayout]] = {}  # prefill engine id -> its ranks (that engine's reader's)
        self._init_reader()

    def _init_reader(self) -> None:
        self._lock = threading.Lock()  # readers and waiting (the engine thread and the reader threads)
        self._readers: dict[str, _Reader] = {}  # prefill engine id -> the thread reading from it
        self._waiting: dict[str, list[list[KvPull]]] = {}  # engines without a reader yet: their batches, in order
        self._done: queue.SimpleQueue[KvPullDone] = queue.SimpleQueue()
        self._num_in_flight = 0  # reports still to come: pulls started, and reads that linger (`_settle`)
        # ReadInFlight.token of a failed read still running, by request id: a reader's note, taken by
        # `finished` once it has taken that pull's report, so its end is never reported before it
        self._read_tokens: dict[str, int] = {}
        self._lingering: dict[int, str] = {}  # token -> its pull's request id (the engine thread's)
        self._last_settle = 0.0

    def start(self, pulls: list[KvPull]) -> None:
        """Read `pulls` in the background: each prefill engine's in order on a reader thread of its
        own (at most MAX_READERS), so a stuck or dead prefill engine delays its own pulls only."""
        if not pulls:
            return
        self._num_in_flight += len(pulls)
        by_engine: dict[str, list[KvPull]] = {}
        for pull in pulls:
            by_engine.setdefault(pull.engine_id, []).append(pull)
        with self._lock:
            for engine_id, batch in by_engine.items():
                self._waiting.setdefault(engine_id, []).append(batch)
            self._dispatch()

    def _dispatch(self) -> None:
        """Hand waiting batches to their engine's reader, started if need be (under self._lock)."""
        for engine_id in list(self._waiting):
            reader = self._readers.get(engine_id) or self._new_reader(engine_id)
            if reader is None:
                continue  # MAX_READERS busy: it waits for the next step's call
            for batch in self._waiting.pop(engine_id):
                reader.pending += 1
                reader.todo.put(batch)

    def _new_reader(self, engine_id: str) -> _Reader | None:
        """A reader thread for `engine_id`, after retiring an idle one if MAX_READERS run; None when
        every one is busy (under self._lock)."""
        if len(self._readers) >= MAX_READERS:
            idle = next((e for e, r in self._readers.items() if not r.pending), None)
            if idle is None:
                return None
            self._retire(idle)
        reader = self._readers[engine_id] = _Reader(engine_id)
        reader.thread = threading.Thread(target=self._read_loop, args=(reader,), name="kv-reader", daemon=True)
        reader.thread.start()
        return reader

    def _retire(self, engine_id: str) -> None:
        """End an idle reader and forget its engine (under self._lock, so no new reader for that engine
        starts before its connections are gone)."""
        self._readers.pop(engine_id).todo.put(None)
        self._forget(engine_id)
        self.agent.drop_staging(engine_id)

    def finished(self, wait_s: float = 0.0) -> list[KvPullDone]:
        """The pulls whose reads have ended since the last call, then the failed reads still running
        that have ended since (lingering -1); waits up to wait_s for a first one when none has (an
        engine with nothing else to run should not spin on this)."""
        if self._waiting:
            with self._lock:
                self._dispatch()
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
        for done in out:
            if done.lingering > 0:
                self._lingering[self._read_tokens.pop(done.request_id)] = done.request_id
        out += self._settle()
        self._num_in_flight -= len(out)
        self._num_in_flight += sum(d.lingering > 0 for d in out)  # each reports its end later (lingering -1)
        return out

    @property
    def num_in_flight(self) -> int:
        return self._num_in_flight

    @property
    def num_readers(self) -> int:
        return len(self._readers)

    def _read_loop(self, reader: _Reader) -> None:
        while True:
            try:
                pulls = reader.todo.get(timeout=READER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._readers.get(reader.engine_id) is reader and not reader.pending:
                        self._retire(reader.engine_id)
                continue  # retired: None is next
            if pulls is None:
                return
            try:
                dones = self.run(pulls)
            except Exception as e:  # a bug, not a peer: still every pull must end, or its request waits forever
                log.exception("KV reads of %d pulls failed", len(pulls))
                dones = [KvPullDone(p.request_id, error=f"{type(e).__name__}: {e}") for p in pulls]
            for done in dones:
                self._done.put(done)
            with self._lock:
                reader.pending -= 1

    def _settle(self) -> list[KvPullDone]:
        """For each read that failed while still running and has now ended: its pull's request id
        with lingering -1 (the scheduler holds the request's blocks until every such read has ended).
        Asks NIXL at most every SETTLE_POLL_S."""
        now = time.monotonic()
        if not self._lingering or now - self._last_settle < SETTLE_POLL_S:
            return []
        self._last_settle = now
        ended = [self._lingering.pop(token) for token in self.agent.settle(list(self._lingering))]
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
            _check_reachable(sources, pull.host, deadline)
            plan = plan_sources(self.agent.layout, sources, pull.remote_block_ids)
            for reads in plan:
                self.agent.add_peer(reads.src)
            started = time.perf_counter()
            nbytes = sum(self.read_from(reads, pull.local_block_ids, pull.remote_block_ids, deadline, pull.engine_id)
                         for reads in plan)
            seconds = time.perf_counter() - started  # the reads alone: /metrics' transfer latency
            self._check_still_pinned(pull)
        except (PeerError, TransferError, LayoutMismatch) as e:
            self._forget(pull.engine_id)  # the next pull shakes hands afresh
            log.warning("KV pull of %s from %s:%d failed: %s", pull.request_id, pull.host, pull.port, e)
            peer_down = isinstance(e, (PeerError, TransferError)) and not isinstance(e, PinGone)
            if isinstance(e, ReadInFlight):  # it may still write the request's blocks: they stay held
                self._read_tokens[pull.request_id] = e.token  # before its report: `finished` takes it then
                return KvPullDone(pull.request_id, error=str(e), lingering=1), peer_down
            return KvPullDone(pull.request_id, error=str(e)), peer_down
        return KvPullDone(pull.request_id, nbytes, seconds), False

    def read_from(self, reads: SourceReads, local_ids: list[int], remote_ids: list[int], deadline: float,
                  reader: str = "") -> int:
        """Read heads reads.runs of remote_ids from one source rank into local_ids by `deadline`
        (time.monotonic()), staging (where it must) through `reader`'s buffer; the bytes moved."""
        mine, src = self.agent.layout, reads.src
        try:
            if not reads.staged(mine):  # the same heads on both sides: whole blocks land in place
                ((lo, re),) = pull_rows(mine, [src], local_ids, remote_ids).values()
                return self.agent.read(src.agent_name, lo, re, _left(deadline))
            nbytes = 0
            per_block = staged_block_bytes(src)
            for local, remote in chunks(local_ids, remote_ids, max(1, STAGING_BYTES // per_block)):
                staging = self.agent.staging(len(remote) * per_block, reader)
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
        known = self._engines.get(pull.engine_id)
        if known is not None:
            return known
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
        self._engines[pull.engine_id] = ranks
        return ranks

    def _forget(self, engine_id: str) -> None:
        """Drop the engine's layouts and its ranks' connections (but those a failed READ still running
        uses: nixl_agent.remove_peer). Only the engine's reader, or whoever retires it, calls this."""
        for rank in self._engines.pop(engine_id, ()):
            self.agent.remove_peer(rank.agent_name)

    def close(self) -> None:
        """Let the readers finish what they started (each read has its timeout), then deregister."""
        with self._lock:
            readers = list(self._readers.values())
            self._readers.clear()
            for reader in readers:
                reader.todo.put(None)
        deadline = time.monotonic() + 2 * (HANDSHAKE_TIMEOUT_S + READ_TIMEOUT_S)
        for reader in readers:
            reader.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.agent.close()


def _check_reachable(sources: list[CacheLayout], side_channel_host: str, deadline: float) -> None:
    """LayoutMismatch where a prefill rank listens on loopback only but its side channel does not (a
    server spanning hosts whose host gave no --kv-side-channel-host of its own): a decoder on
    another host could never read its blocks, and UCX would try the decoder's own loopback. Names are
    resolved under the pull's `deadline`; one that does not resolve in time is not judged (the reads,
    bounded by the same deadline, fail on their own)."""
    if not side_channel_host or _is_loopback(side_channel_host, deadline) is not False:
        return  # loopback, or a name this host cannot resolve: the handshake has reached it, so it is not ours
    for src in sources:
        if src.host and _is_loopback(src.host, deadline):
            raise LayoutMismatch(f"prefill group {src.group}'s tp rank {src.tp_rank} listens on {src.host} only: its "
                                 f"host needs --kv-side-channel-host set to its own address facing the decoders")


def _is_loopback(host: str, deadline: float) -> bool | None:
    """Whether `host` (an address, or a name: its first address) is a loopback address; None when the
    name does not resolve before `deadline`."""
    try:
        address = resolve(host, 0, deadline)[0][4][0]
    except OSError:  # TimeoutError included
        return None
    return ipaddress.ip_address(address.split("%")[0]).is_loopback


def _left(deadline: float) -> float:
    """Seconds until `deadline`; a read past it times out at once."""
    return max(0.001, deadline - time.monotonic())
