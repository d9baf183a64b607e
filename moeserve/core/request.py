"""One request's scheduling state: tokens, progress, KV blocks and lifecycle status.

The scheduler mutates a request (status, num_computed_tokens, block ids, output tokens through
`append_output_token`); the engine reads it and decides stop conditions. A request never touches
the block pool itself.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from moeserve.kv_transfer.params import RemotePrefill
from moeserve.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, never admitted
    RUNNING = "running"  # admitted: holds KV blocks (prefilling or decoding)
    PULLING = "pulling"  # admitted on a decode engine: holds blocks its prompt's KV is being read into
    PREEMPTED = "preempted"  # blocks taken back; queued again, recomputes its tokens on resume
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """A sequence being served.

    `all_token_ids` is kept equal to prompt + output (maintained incrementally so a decode step
    never rebuilds the list). num_computed_tokens counts the leading tokens whose KV is in
    `block_ids`; the rest are computed by later steps. With the host one step ahead (async
    scheduling), `num_pending` output tokens have been sampled on the device but not read back yet:
    they count in `num_tokens` (the scheduler computes them next, as placeholders the worker fills
    on the device), not in the token lists, which hold only tokens the host knows. `block_hashes[i]` is the prefix-cache key of
    full block i (filled lazily); `num_published_blocks` of them have been offered to the cache.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    arrival_time: float = field(default_factory=time.monotonic)
    # the client request this sequence belongs to (the n choices of one HTTP request share it): the
    # unit of fairness (core/fair_share.py); None means the sequence is a request of its own
    owner: str | None = None
    # prefill/decode split (kv_transfer/params.py): keep the prompt's blocks for a remote decoder
    # when finished, or take the prompt's KV from a prefill engine on admission (cleared once taken)
    remote_decode: bool = False
    remote_prefill: RemotePrefill | None = None

    output_token_ids: list[int] = field(default_factory=list, init=False)
    all_token_ids: list[int] = field(init=False)
    status: RequestStatus = field(default=RequestStatus.WAITING, init=False)
    num_computed_tokens: int = field(default=0, init=False)
    num_pending: int = field(default=0, init=False)  # sampled, not yet read back (async scheduling)
    block_ids: list[int] = field(default_factory=list, init=False)
    block_hashes: list[bytes] = field(default_factory=list, init=False)
    num_published_blocks: int = field(default=0, init=False)
    group: int = field(default=-1, init=False)
    num_cached_prompt_tokens: int = field(default=0, init=False)
    num_preemptions: int = field(default=0, init=False)
    ever_scheduled: bool = field(default=False, init=False)
    # Resolved by the scheduler on admission: sampling.max_tokens, or what max_model_len leaves.
    max_output_tokens: int = field(default=0, init=False)
    finish_reason: str | None = field(default=None, init=False)
    error: str | None = field(default=None, init=False)
    error_status: int = field(default=500, init=False)  # HTTP status of `error`: 503 when a peer failed
    fair_owner: str = field(default="", init=False)  # owner, or the request itself (read every step)
    # speculative decoding: tokens proposed to follow all_token_ids, verified when next scheduled
    draft_token_ids: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.prompt_token_ids = list(self.prompt_token_ids)
        self.all_token_ids = list(self.prompt_token_ids)
        self.fair_owner = self.owner if self.owner is not None else self.request_id

    @property
    def sampling_params(self) -> SamplingParams:
        return self.sampling

    @property
    def num_tokens(self) -> int:
        """Tokens of the sequence, the pending ones included."""
        return len(self.all_token_ids) + self.num_pending

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    def append_output_token(self, token_id: int) -> None:
        """A sampled token the host now knows (the oldest pending one, if any)."""
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
        self.num_pending = max(0, self.num_pending - 1)

    def drop_output_tail(self, n: int) -> None:
        """Forget the last n output tokens (a verify step accepted tokens past a stop): the request
        is finishing, so its computed KV and blocks need no change."""
        if n > 0:
            del self.output_token_ids[-n:]
            del self.all_token_ids[-n:]
