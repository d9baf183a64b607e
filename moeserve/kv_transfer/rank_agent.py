"""A rank's part of the prefill/decode split: its KV cache registered with NIXL, and the step's
KvPulls run before the forward (engine/worker.py calls `run`).

One handshake per prefill engine (GET /layout on its side channel, then NIXL's add_remote_agent),
cached by (host, port) and checked against the engine id each pull names: a restarted prefill
engine has a new id, so old parameters fail instead of reading someone else's blocks.
"""
from __future__ import annotations

import logging
import time
from urllib.parse import quote

import torch

from moeserve.core.step_plan import KvPull, KvPullDone
from moeserve.kv_transfer.nixl_agent import CacheLayout, KvAgent, TransferError
from moeserve.kv_transfer.side_channel import PeerError, get_json

log = logging.getLogger("moeserve.kv_transfer")

HANDSHAKE_TIMEOUT_S = 10.0  # also the pin check after a read: the engine step waits on it
READ_TIMEOUT_S = 10.0  # a read this slow means the prefill engine died mid-transfer


class RankKvAgent:
    def __init__(self, kv_caches: list[list[torch.Tensor]], block_size: int):
        """kv_caches[layer] = that layer's cache tensors, each [num_blocks, block_size, ...]."""
        self.agent = KvAgent([t for layer in kv_caches for t in layer], block_size)
        self._peers: dict[tuple[str, int], tuple[str, str]] = {}  # (host, port) -> (engine id, agent name)

    def layout(self) -> dict:
        return self.agent.layout.to_json()

    def run(self, pulls: list[KvPull]) -> list[KvPullDone]:
        return [self._pull(p) for p in pulls]

    def _pull(self, pull: KvPull) -> KvPullDone:
        if not pull.remote_block_ids:
            return KvPullDone(pull.request_id)  # our prefix cache held every block
        try:
            agent_name = self._handshake(pull)
            started = time.perf_counter()
            nbytes = self.agent.read(agent_name, pull.remote_block_ids, pull.local_block_ids, READ_TIMEOUT_S)
            seconds = time.perf_counter() - started  # the read alone: /metrics' transfer latency
            self._check_still_pinned(pull)
        except (PeerError, TransferError) as e:
            self._forget(pull.host, pull.port)  # the next pull shakes hands afresh (the engine may be back)
            log.warning("KV pull of %s from %s:%d failed: %s", pull.request_id, pull.host, pull.port, e)
            return KvPullDone(pull.request_id, error=str(e))
        return KvPullDone(pull.request_id, nbytes, seconds)

    @staticmethod
    def _check_still_pinned(pull: KvPull) -> None:
        """A one-sided read cannot tell whether the owner freed (and reused) the blocks meanwhile: a
        pin that expired while this request waited in our queue. The owner frees an expired pin and
        withdraws it from its side channel before it can schedule anything into the blocks, so a
        pin still listed after the read was pinned all through it."""
        status, body = get_json(pull.host, pull.port, f"/pins/{quote(pull.remote_request_id, safe='')}",
                                HANDSHAKE_TIMEOUT_S)
        pinned = body.get("block_ids") if status == 200 and body.get("engine_id") == pull.engine_id else None
        if not isinstance(pinned, list) or not set(pull.remote_block_ids) <= set(pinned):
            raise TransferError(f"the prefill server no longer holds the blocks of {pull.remote_request_id} "
                                f"(expired while this request waited): its KV was not used")

    def _handshake(self, pull: KvPull) -> str:
        key = (pull.host, pull.port)
        known = self._peers.get(key)
        if known is None or known[0] != pull.engine_id:
            self._forget(*key)
            status, body = get_json(pull.host, pull.port, "/layout", HANDSHAKE_TIMEOUT_S)
            if status != 200 or "ranks" not in body:
                raise PeerError(f"the side channel at {pull.host}:{pull.port} answered {status} to /layout")
            if body.get("engine_id") != pull.engine_id:
                raise PeerError(f"the prefill server at {pull.host}:{pull.port} is engine {body.get('engine_id')!r}, "
                                f"not {pull.engine_id!r} (it restarted): its old blocks are gone")
            layout = CacheLayout.from_json(body["ranks"][0])
            self.agent.add_peer(layout)
            self._peers[key] = (pull.engine_id, layout.agent_name)
        return self._peers[key][1]

    def _forget(self, host: str, port: int) -> None:
        known = self._peers.pop((host, port), None)
        if known is not None:
            self.agent.remove_peer(known[1])

    def close(self) -> None:
        self.agent.close()
