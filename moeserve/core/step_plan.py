"""The plain-data contract between the scheduler (rank 0) and the workers (every rank).

One step: the scheduler emits a `StepPlan` (one `GroupBatch` per attention group); every rank runs
its group's batch; each group's TP-rank 0 answers with a `StepResult` of sampled tokens. Everything
here is plain Python data (ints, strings, lists, SamplingParams) so it encodes without pickle.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from moeserve.sampling_params import SamplingParams, StructuredOutputsParams

# a token id the host does not know yet: the token the previous step samples for this request, which
# the worker fills in on the device (async scheduling: the host schedules step N+1 while step N runs)
PENDING_TOKEN = -1


@dataclass
class NewRequest:
    """A request scheduled for the first time: workers create its sampling state (seeded generator,
    output-token counts for penalties) and keep it until it appears in `finished_request_ids`."""

    request_id: str
    sampling: SamplingParams
    prompt_token_ids: list[int] | None = None  # sent only when the sampler needs them (repetition_penalty)


@dataclass
class ScheduledSeq:
    """One request's share of a step.

    token_ids: the tokens whose KV is computed this step (a prompt chunk, a recompute chunk after
        preemption, or the single newest token in decode). The last may be PENDING_TOKEN: the token the
        previous step samples for this request, not yet read back (async scheduling).
    start_pos: absolute position of token_ids[0]; positions [0, start_pos) are already in the cache.
    block_table: the request's physical KV block ids, covering start_pos + len(token_ids) tokens.
    sample: True when token_ids end at the sequence's last token, so the next token is sampled.
    prompt_targets: None unless the request asked for prompt logprobs and this chunk holds prompt
        positions before the last one: then the prompt tokens at positions start_pos + 1 ...
        start_pos + len(prompt_targets), scored by the logits at positions start_pos ... (row i of
        this chunk scores prompt_targets[i]; the chunk's last row may score the next chunk's first
        token, which is why the targets travel explicitly).
    num_drafts: speculative decoding: the last num_drafts of token_ids are draft tokens behind the
        sequence's newest token (a verify); its last num_drafts + 1 rows are sampled, and it gets its
        accepted drafts and one more token (core/spec_scheduling.py). 0: no drafts.
    next_token_id: the token after token_ids when it is known (a chunk that does not end the
        sequence) and an MTP layer drafts (its first pass reads the next token at every position);
        -1 otherwise.
    """

    request_id: str
    token_ids: list[int]
    start_pos: int
    block_table: list[int]
    sample: bool
    prompt_targets: list[int] | None = None
    num_drafts: int = 0
    next_token_id: int = -1

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_sampled_rows(self) -> int:
        """Rows whose logits are sampled: the last one, or the newest token's and each draft's."""
        return self.num_drafts + 1 if self.sample else 0

    @property
    def draft_token_ids(self) -> list[int]:
        return self.token_ids[len(self.token_ids) - self.num_drafts :] if self.num_drafts else []


@dataclass
class GroupBatch:
    """The batch of one attention group (may be empty: the group still enters every collective)."""

    group: int
    seqs: list[ScheduledSeq] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.seqs)

    @property
    def empty(self) -> bool:
        return not self.seqs


@dataclass
class KvPull:
    """Read a prompt's KV blocks from a prefill engine before this step's forward (prefill/decode
    split). The request's seq in the same step computes only its last prompt token.

    remote_block_ids[i] (the prefill engine's block) lands in local_block_ids[i] (this group's)."""

    request_id: str
    group: int
    engine_id: str
    remote_request_id: str
    host: str
    port: int
    remote_block_ids: list[int]
    local_block_ids: list[int]
    remote_group: int = 0  # the prefill engine's attention group whose ranks hold the blocks
    release_token: str = ""  # this decoder's claim on the pin: its release must carry it


@dataclass
class KvPullDone:
    """How a KvPull went on the rank that ran it: error None means every block arrived.

    lingering > 0 (with an error): that many ranks' reads failed while still running, so
    they may still write into the request's blocks; each such rank reports again, later, with
    lingering -1 once its read has ended (a report of its own, not a pull's outcome)."""

    request_id: str
    num_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    lingering: int = 0


class PullTally:
    """Rank 0's count of a group's reports on each pull: the ranks read beside the steps and each
    reports its share in whichever step it ends, so a pull is done once all `ranks_per_group` ranks
    of its group have reported (merged as merge_pull_results merges), not before: until then a rank
    may still be writing its blocks."""

    def __init__(self, ranks_per_group: int):
        self.ranks_per_group = ranks_per_group
        self._parts: dict[str, list[KvPullDone]] = {}

    def add(self, parts: list[list[KvPullDone]]) -> list[KvPullDone]:
        """One step's reports (a list per rank); returns the pulls that are now done on every rank,
        then the lingering reads that ended (lingering -1) of pulls already returned. A lingering read
        that ends before the other ranks report its pull is netted into that pull's outcome."""
        ready, ended = [], []
        for part in parts:
            for d in part:
                if d.lingering < 0:
                    mine = next((g for g in self._parts.get(d.request_id, ()) if g.lingering > 0), None)
                    if mine is None:
                        ended.append(d)
                    else:
                        mine.lingering -= 1
                    continue
                got = self._parts.setdefault(d.request_id, [])
                got.append(d)
                if len(got) == self.ranks_per_group:
                    ready.append(self._parts.pop(d.request_id))
        return merge_pull_results([[d] for got in ready for d in got]) + ended

    def __len__(self) -> int:
        return len(self._parts)


def merge_pull_results(parts: list[list[KvPullDone]]) -> list[KvPullDone]:
    """One KvPullDone per request from every rank's (each rank of a group reads its own head slice):
    bytes summed, seconds the slowest rank's (they read side by side), and failed if any rank
    failed, so every rank's outcome is one decision, taken on rank 0; lingering reads summed."""
    merged: dict[str, KvPullDone] = {}
    for part in parts:
        for d in part:
            m = merged.get(d.request_id)
            if m is None:
                merged[d.request_id] = KvPullDone(d.request_id, d.num_bytes, d.seconds, d.error, d.lingering)
            else:
                m.num_bytes += d.num_bytes
                m.seconds = max(m.seconds, d.seconds)
                m.error = m.error or d.error
                m.lingering += d.lingering
    return list(merged.values())


@dataclass
class GrammarCompile:
    """Compile a constrained request's grammar on its group's sampling rank, beside the steps (that
    rank runs in another process than the engine core, which compiled it on admission): the request is
    not scheduled until the rank reports it done (`GrammarDone`), so no step waits for a compile."""

    request_id: str
    group: int
    spec: StructuredOutputsParams


@dataclass
class GrammarDone:
    """A sampling rank has compiled a request's grammar (error None) or could not (the reason)."""

    request_id: str
    error: str | None = None


@dataclass
class StepPlan:
    step: int
    groups: list[GroupBatch]
    new_requests: list[NewRequest] = field(default_factory=list)
    finished_request_ids: list[str] = field(default_factory=list)
    # placement runtime (engine/rebalance.py), decided on rank 0:
    # rebalance: {"phy2log": [[int] * P] * L}, the placement every rank moves to before this step's forward
    rebalance: dict | None = None
    # every rank hands its routing counts since the last collection to rank 0 after this step's forward
    collect_routing: bool = False
    kv_pulls: list[KvPull] = field(default_factory=list)  # run before the forward, on the group's ranks
    grammars: list[GrammarCompile] = field(default_factory=list)  # started beside the steps, on sampling ranks

    @property
    def num_tokens(self) -> int:
        return sum(g.num_tokens for g in self.groups)

    @property
    def is_decode(self) -> bool:
        """Every scheduled sequence of every group computes one token and wants no prompt logprobs (the
        shape decode CUDA graphs replay), and some group has one. The same on every rank."""
        seqs = [s for g in self.groups for s in g.seqs]
        return bool(seqs) and all(len(s.token_ids) == 1 and s.prompt_targets is None for s in seqs)

    @property
    def max_group_tokens(self) -> int:
        """Decided on rank 0 and shipped with the plan: backends that need a global size use this."""
        return max((g.num_tokens for g in self.groups), default=0)


@dataclass
class SampledToken:
    """One token for a request; a verify step gives a request several, consecutive and in order."""

    request_id: str
    token_id: int
    logprob: float | None = None
    top_logprobs: list[tuple[int, float]] | None = None
    rank: int | None = None  # with logprob: how many vocabulary entries are at least as likely (vLLM's rank)


@dataclass
class PromptLogprobs:
    """Prompt logprobs one step computed for one request's chunk: entry i scores prompt token
    `start + i` (start >= 1; prompt token 0 has no logprob) as (logprob, [(token_id, logprob)] top-N,
    rank of the prompt token)."""

    request_id: str
    start: int
    entries: list[tuple[float, list[tuple[int, float]], int]] = field(default_factory=list)


@dataclass
class StepResult:
    step: int
    sampled: list[SampledToken] = field(default_factory=list)
    prompt_logprobs: list[PromptLogprobs] = field(default_factory=list)
    kv_pulls: list[KvPullDone] = field(default_factory=list)
    # the MTP layer's drafts for each sampled request's next step (speculative decoding, method mtp)
    drafts: dict[str, list[int]] = field(default_factory=dict)
    grammars: list[GrammarDone] = field(default_factory=list)  # compiles a sampling rank finished since its last step
