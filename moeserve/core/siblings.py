"""Samples of one prompt share its prefill: one computes the prompt, the others wait for its blocks.

A request with n > 1 (`SamplingParams(n=k)`, `best_of`) runs as k sequences with the same owner and the
same prompt (server/generation.py, engine/llm.py). Admitted in the same step, each computed the whole
prompt: the prefix cache only serves blocks once a step has computed and published them. The rule:

- Siblings are waiting or running sequences of one group with the same owner and the same cacheable
  prompt prefix (the prefix-cache key of the last full block a hit may cover, `max_cacheable_blocks`):
  `sibling_key`. A prompt of one block or less has nothing to share, and neither has a request without
  an owner, one that asks for prompt logprobs (it never takes cache hits: every position needs its
  logits) or one of the prefill/decode split (a KV read, or a prefill kept for a remote decoder: n is 1
  there).
- The leader of a key is a running sibling whose prompt blocks are not all published yet, else the
  first waiting sibling whose prompt the cache does not already hold. The other waiting siblings are
  held: they stay in the queue, in place, and admission passes over them to the requests behind (no
  head-of-line blocking), until the leader's prompt blocks are published (it is past its prompt's last
  full block, whatever the chunking), or it left (finished, aborted, failed: the next sibling leads,
  taking what the first one published). Preempted, a leader goes back to the queue's front and leads
  again from there.
- Released siblings are admitted as any request is, and hit the leader's blocks: each computes only the
  prompt's last partial block (at least its last token, for the first token's logits).

Without prefix caching no one is held. Cost: siblings get their first token one step after the leader's
last prompt chunk, instead of in the same step; the prompt is computed once per group instead of k times.

Policy only: `sibling_key` and `SiblingHolds` read requests and one block pool; `GroupScheduler` applies them.
"""
from __future__ import annotations

from collections.abc import Iterable

from moeserve.core.block_manager import BlockManager
from moeserve.core.prefix_cache import extend_block_hashes, max_cacheable_blocks
from moeserve.core.request import Request

SiblingKey = tuple[str, bytes]


def sibling_key(req: Request, block_size: int) -> SiblingKey | None:
    """(owner, key of the prompt's last cacheable block), or None: `req` neither leads nor waits."""
    if req.owner is None or req.sampling.prompt_logprobs is not None or req.remote_decode or req.remote_prefill is not None:
        return None
    m = max_cacheable_blocks(req.num_prompt_tokens, block_size)
    if m == 0:
        return None
    extend_block_hashes(req.block_hashes, req.all_token_ids, m, block_size)  # kept: admission reads them too
    return req.owner, req.block_hashes[m - 1]


class SiblingHolds:
    """One step's answer to "is this waiting request held for a sibling's prefill?", asked in queue
    order (the first waiting sibling of a prompt no running one leads is its leader). Work is done only
    for the requests asked: admission stops at the seat and token budgets, not at the queue's end."""

    def __init__(self, running: Iterable[Request], blocks: BlockManager):
        self.blocks = blocks
        self.enabled = blocks.enable_prefix_caching
        self._leading: set[SiblingKey] = set()  # prompts a running sibling is prefilling, or a waiting one leads
        self._first: dict[SiblingKey, Request] = {}  # the first waiting sibling of a prompt no running one leads
        self._cached: set[SiblingKey] = set()  # prompts the cache holds already: no one waits
        self._answers: dict[str, bool] = {}
        if not self.enabled:
            return
        bs = blocks.block_size
        for r in running:
            if r.owner is not None and r.num_published_blocks < max_cacheable_blocks(r.num_prompt_tokens, bs):
                key = sibling_key(r, bs)
                if key is not None:
                    self._leading.add(key)

    def held(self, req: Request) -> bool:
        if not self.enabled:
            return False
        answer = self._answers.get(req.request_id)
        if answer is None:
            answer = self._answers[req.request_id] = self._decide(req)
        return answer

    def _decide(self, req: Request) -> bool:
        bs = self.blocks.block_size
        key = sibling_key(req, bs)
        if key is None or key in self._cached:
            return False
        if key in self._leading:
            return True
        lead = self._first.get(key)
        if lead is None:
            self._first[key] = req
            return False
        m = max_cacheable_blocks(lead.num_prompt_tokens, bs)  # a second sibling: does the first lead?
        if len(self.blocks.match_prefix(lead.block_hashes[:m])) == m:
            self._cached.add(key)
            return False
        self._leading.add(key)
        return True
