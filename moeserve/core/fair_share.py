"""Fair shares of one attention group's seats and KV blocks: requests, not sequences, are the unit.

A client request with n choices runs as n sequences that share an owner (`Request.fair_owner`).
Left to FIFO admission, one request with n = max_num_seqs held every seat until its longest sequence
ended, and a request sent after it got no token for minutes (n 128, max_tokens 4000,
ignore_eos). The rule:

- With W owners live in a group (running or waiting), an owner's fair share is max_num_seqs // W
  seats and num_blocks // W KV blocks (at least one of each).
- While an owner below both shares waits and a seat or the blocks for its first chunk are missing,
  sequences of owners above their share are preempted (by recompute, the newest sequence of the
  owner furthest above its share first) until it fits; an owner is never pushed below its share
  this way, and a request's last running sequence is never taken, so two owners never preempt
  each other back and forth.
- Admission takes waiting sequences of owners holding the fewest seats first, FIFO among equals.
- When a running sequence needs a block and none is free, the victim is the newest sequence of the
  owner furthest above its block share, if any owner is (else the newest sequence, as before).
- An owner alone, or owners within their shares, use everything: nothing is reserved for requests
  that have not come.

Preemption recomputes, so fairness changes the order in which sequences run, never their tokens.

Policy only: pure functions over requests and counts; `GroupScheduler` applies them.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from moeserve.core.request import Request


@dataclass(frozen=True)
class Shares:
    seats: int
    blocks: int


def shares(num_owners: int, max_num_seqs: int, num_blocks: int) -> Shares:
    """Each of `num_owners` owners' fair share of a group's seats and blocks."""
    owners = max(1, num_owners)
    return Shares(seats=max(1, max_num_seqs // owners), blocks=max(1, num_blocks // owners))


def seats_by_owner(running: Iterable[Request]) -> Counter[str]:
    return Counter(r.fair_owner for r in running)


def blocks_by_owner(running: Iterable[Request]) -> Counter[str]:
    """Blocks each owner's sequences hold (a prefix block shared by k sequences counts k times: each
    sequence would need it alone)."""
    held: Counter[str] = Counter()
    for r in running:
        held[r.fair_owner] += len(r.block_ids)
    return held


def fair_order(waiting: Sequence[Request], seats: Mapping[str, int]) -> list[Request]:
    """`waiting` with the sequences of owners holding fewer seats first; FIFO among equals (stable)."""
    return sorted(waiting, key=lambda r: seats.get(r.fair_owner, 0))


def pick_victim(candidates: Sequence[Request], held: Mapping[str, int], share: int, seats: Mapping[str, int],
                cost: Callable[[Request], int] = lambda r: 1) -> Request | None:
    """The newest of `candidates` (admission order) of the owner holding the most above `share` (held:
    seats or blocks per owner; `cost`: what one sequence holds of it), or None. Only an owner running
    two or more sequences (`seats`) gives one up, and only while it keeps at least its share: a lone
    sequence preempted for another would be preempted back for it, and neither would finish."""
    owners = dict.fromkeys(r.fair_owner for r in candidates)  # admission order: ties go to the oldest
    worst = max(owners, key=lambda o: held.get(o, 0), default=None)
    if worst is None or seats.get(worst, 0) < 2:
        return None
    victim = next(r for r in reversed(candidates) if r.fair_owner == worst)
    return victim if held.get(worst, 0) - cost(victim) >= share else None
