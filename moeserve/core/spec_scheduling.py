"""Speculative decoding's share of scheduling: which drafts a decode carries, and its counters.

A decoding request holds `draft_token_ids`, proposed after its last step: by the n-gram proposer here
on rank 0 (`spec_decode/ngram.py`), or by the workers' MTP layer (they come back with the step's
result). When it is scheduled, its drafts ride behind its newest token (`ScheduledSeq.num_drafts`),
cut to what the step's token budget, its max_tokens and the model's context leave, and the workers
verify them in the same forward. The request then advances by the accepted drafts plus one token;
the KV written for rejected drafts is past `num_computed_tokens`, so it is never read, never
published to the prefix cache, and overwritten by the next step (no block is copied or freed).

No drafts for a request whose sampling depends on its own previous tokens (presence, frequency
and repetition penalties, a min_tokens mask still on, a structured output's grammar): its rows could
not be shaped before the verify knows which drafts it accepts. It decodes one token a step, in the
same batches.

Counters after vLLM's spec_decode metrics: drafts (verify steps of one sequence with at least one
draft), draft tokens, accepted tokens, accepted tokens per draft position; the mean acceptance
length is 1 + accepted / drafts (`moeserve configure --mtp-accept` predicts with it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeserve.core.request import Request
from moeserve.speculative_config import SpeculativeConfig
from moeserve.spec_decode.ngram import NgramProposer


@dataclass
class SpecDecodeStats:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [k]: drafts accepted at position j

    def observe(self, num_drafts: int, num_accepted: int) -> None:
        assert 0 <= num_accepted <= num_drafts
        if num_drafts == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        if len(self.accepted_per_pos) < num_drafts:
            self.accepted_per_pos += [0] * (num_drafts - len(self.accepted_per_pos))
        for j in range(num_accepted):
            self.accepted_per_pos[j] += 1

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens a verify step yields per sequence on average: 1 + accepted drafts (0: no drafts yet)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0

    def as_stats(self) -> dict[str, int | float | list[int]]:
        return {"spec_decode_num_drafts": self.num_drafts, "spec_decode_num_draft_tokens": self.num_draft_tokens,
                "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
                "spec_decode_num_accepted_tokens_per_pos": list(self.accepted_per_pos),
                "spec_decode_mean_acceptance_length": self.mean_acceptance_length}


def may_draft(req: Request) -> bool:
    """Whether verify rows of `req` can be shaped without knowing which drafts are accepted."""
    p = req.sampling
    if p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0:
        return False
    if p.structured_outputs is not None:  # its grammar would have to accept the drafts to mask their rows
        return False
    if p.bad_words_token_ids:  # which tokens are banned depends on the output before each row
        return False
    return req.num_output_tokens >= p.min_tokens


class SpecScheduling:
    """Per engine: the drafts each decode carries and the counters. Mutates requests' draft_token_ids."""

    def __init__(self, config: SpeculativeConfig, num_drafts: int, max_model_len: int):
        assert config.enabled and num_drafts >= 1
        self.config = config
        self.k = num_drafts
        self.max_model_len = max_model_len
        self.ngram = NgramProposer(*config.ngram_sizes(), num_drafts) if config.is_ngram else None
        self.stats = SpecDecodeStats()

    @property
    def lookahead(self) -> int:
        """KV slots past a step's tokens a sampling sequence needs: the MTP chain writes its draft
        positions' KV (k - 1 positions past the verified ones) before they are verified."""
        return self.k - 1 if self.config.is_mtp else 0

    @property
    def drops_last_cached_block(self) -> bool:
        """With MTP, a prompt's last cached block is recomputed: the MTP layer's KV at a block's last
        position depends on the token after the block, which the cache key does not cover, and its
        first pass needs the main model's hidden states from there on (vLLM drops it for EAGLE too)."""
        return self.config.is_mtp

    def drafts_for(self, req: Request, tokens_left: int) -> list[int]:
        """The drafts `req` carries this step (its newest token takes one of `tokens_left`)."""
        if not req.draft_token_ids or not may_draft(req):
            return []
        room = min(tokens_left - 1, req.max_output_tokens - req.num_output_tokens - 1,
                   self.max_model_len - req.num_tokens - 1)
        return req.draft_token_ids[: max(0, room)]

    def after_step(self, req: Request, num_drafts: int, num_accepted: int, proposed: list[int] | None) -> None:
        """`req` verified `num_drafts` drafts, accepted `num_accepted`, and its tokens are appended;
        `proposed`: the MTP layer's next drafts (None: propose here, n-gram)."""
        self.stats.observe(num_drafts, num_accepted)
        if self.ngram is not None:
            if may_draft(req):
                req.draft_token_ids = self.ngram.propose(req.request_id, req.all_token_ids)
            else:
                req.draft_token_ids = []
        else:
            req.draft_token_ids = list(proposed or [])

    def forget(self, req: Request) -> None:
        req.draft_token_ids = []
        if self.ngram is not None:
            self.ngram.forget(req.request_id)
