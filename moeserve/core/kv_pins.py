"""Blocks a prefill engine holds for remote decoders: the policy of how long (docs/disaggregation.md).

A request that finished its prefill for a remote decoder keeps one reference on each of its KV
blocks here instead of freeing them, so no eviction or preemption can touch them, until the decoder
says it has read them (`release`) or `expiry_s` passes since the pin (`expire`), as vLLM's
VLLM_NIXL_ABORT_REQUEST_TIMEOUT, or newer pins of its attention group need the room (`make_room`):
pins hold at most `max_blocks` blocks per group, so prefills nobody decodes cannot starve the
requests this server serves itself. Pure bookkeeping: the caller frees the blocks returned.
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
    def __init__(self, expiry_s: float, max_blocks: int):
        """max_blocks: the most blocks pins may hold in one attention group."""
        assert expiry_s > 0 and max_blocks >= 1
        self.expiry_s = expiry_s
        self.max_blocks = max_blocks
        self._pins: dict[str, Pin] = {}  # insertion order is deadline order (one expiry for all)
        self._group_blocks: dict[int, int] = {}
        self.num_released = 0
        self.num_expired = 0
        self.num_evicted = 0

    def pin(self, request_id: str, group: int, block_ids: list[int], prompt_digest: str, now: float) -> Pin:
        assert request_id not in self._pins, f"{request_id} pinned twice"
        assert self.blocks_in(group) + len(block_ids) <= self.max_blocks, "make_room first"
        pin = Pin(request_id, group, list(block_ids), prompt_digest, now + self.expiry_s)
        self._pins[request_id] = pin
        self._group_blocks[group] = self.blocks_in(group) + len(pin.block_ids)
        return pin

    def make_room(self, group: int, num_blocks: int) -> list[Pin]:
        """Removes the group's oldest pins until `num_blocks` more fit under max_blocks (a pin larger
        than max_blocks is the caller's to refuse); returns them, unread."""
        assert num_blocks <= self.max_blocks
        out = []
        for pin in [p for p in self._pins.values() if p.group == group]:
            if self.blocks_in(group) + num_blocks <= self.max_blocks:
                break
            out.append(self._remove(pin.request_id))
        self.num_evicted += len(out)
        return out

    def blocks_in(self, group: int) -> int:
        return self._group_blocks.get(group, 0)

    def _remove(self, request_id: str) -> Pin:
        pin = self._pins.pop(request_id)
        self._group_blocks[pin.group] -= len(pin.block_ids)
        return pin

    def get(self, request_id: str) -> Pin | None:
        return self._pins.get(request_id)

    def release(self, request_id: str) -> Pin | None:
        """The decoder is done with `request_id` (or never came); None if unknown or already gone."""
        if request_id not in self._pins:
            return None
        self.num_released += 1
        return self._remove(request_id)

    def expire(self, now: float) -> list[Pin]:
        """Pins whose deadline passed, removed."""
        out = []
        for rid, pin in list(self._pins.items()):
            if pin.deadline > now:
                break
            out.append(self._remove(rid))
        self.num_expired += len(out)
        return out

    @property
    def num_blocks(self) -> int:
        return sum(self._group_blocks.values())

    def __len__(self) -> int:
        return len(self._pins)

    def by_group(self, group: int) -> list[Pin]:
        return [p for p in self._pins.values() if p.group == group]
