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

Policy only: pure functions over requests and one block pool; `GroupScheduler` applies them.
"""
from __future__ import annotations

from collections import Counter
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


def held_siblings(running: Iterable[Request], waiting: Iterable[Request], blocks: BlockManager) -> set[str]:
    """Ids of the waiting requests to pass over this step: a sibling leads their prompt's prefill."""
    if not blocks.enable_prefix_caching:
        return set()
    bs = blocks.block_size
    waiting = list(waiting)
    owners = Counter(r.owner for r in waiting if r.owner is not None)
    if not owners:
        return set()
    leading: set[SiblingKey] = set()  # keys a running sibling is prefilling
    for r in running:
        if r.owner in owners and r.num_published_blocks < max_cacheable_blocks(r.num_prompt_tokens, bs):
            key = sibling_key(r, bs)
            if key is not None:
                leading.add(key)
    leading_owners = {owner for owner, _ in leading}
    first: dict[SiblingKey, Request] = {}  # the first waiting sibling of a key no running one leads
    cached: set[SiblingKey] = set()  # keys whose prompt the cache holds already: no one waits
    held: set[str] = set()
    for r in waiting:
        if r.owner is None or (owners[r.owner] < 2 and r.owner not in leading_owners):
            continue  # a sequence alone of its owner (every n = 1 request): no key computed
        key = sibling_key(r, bs)
        if key is None or key in cached:
            continue
        if key not in leading and key in first:  # a second waiting sibling: does the first lead?
            lead = first[key]
            m = max_cacheable_blocks(lead.num_prompt_tokens, bs)
            if len(blocks.match_prefix(lead.block_hashes[:m])) == m:
                cached.add(key)
                continue
            leading.add(key)
        if key in leading:
            held.add(r.request_id)
        else:
            first[key] = r
    return held
