"""Blocks a prefill engine holds for remote decoders: the policy of how long (docs/disaggregation.md).

A request that finished its prefill for a remote decoder keeps one reference on each of its KV
blocks here instead of freeing them, so no eviction or preemption can touch them, until the decoder
says it has read them (`release`) or `expiry_s` passes since the pin (`expire`), as vLLM's
VLLM_NIXL_ABORT_REQUEST_TIMEOUT. Pure bookkeeping: the caller frees the blocks returned.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pin:
    request_id: str
    group: int
    block_ids: list[int]
    prompt_digest: str  # params.prompt_digest of the prompt whose KV the blocks hold
    deadline: float  # time.monotonic() after which the blocks are freed unread


class KvPins:
    def __init__(self, expiry_s: float):
        assert expiry_s > 0
        self.expiry_s = expiry_s
        self._pins: dict[str, Pin] = {}  # insertion order is deadline order (one expiry for all)
        self.num_released = 0
        self.num_expired = 0

    def pin(self, request_id: str, group: int, block_ids: list[int], prompt_digest: str, now: float) -> Pin:
        assert request_id not in self._pins, f"{request_id} pinned twice"
        pin = Pin(request_id, group, list(block_ids), prompt_digest, now + self.expiry_s)
        self._pins[request_id] = pin
        return pin

    def get(self, request_id: str) -> Pin | None:
        return self._pins.get(request_id)

    def release(self, request_id: str) -> Pin | None:
        """The decoder is done with `request_id` (or never came); None if unknown or already gone."""
        pin = self._pins.pop(request_id, None)
        if pin is not None:
            self.num_released += 1
        return pin

    def expire(self, now: float) -> list[Pin]:
        """Pins whose deadline passed, removed."""
        out = []
        for rid, pin in list(self._pins.items()):
            if pin.deadline > now:
                break
            out.append(self._pins.pop(rid))
        self.num_expired += len(out)
        return out

    @property
    def num_blocks(self) -> int:
        return sum(len(p.block_ids) for p in self._pins.values())

    def __len__(self) -> int:
        return len(self._pins)

    def by_group(self, group: int) -> list[Pin]:
        return [p for p in self._pins.values() if p.group == group]
