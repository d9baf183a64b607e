"""The grammar matchers of a sampling rank: which tokens each constrained request may take next.

Lives beside the Sampler on each attention group's TP-rank 0 (engine/worker.py), the process that
samples: the matcher of a request advances with the tokens that rank sampled, so the next step's
mask needs nothing from rank 0 and no round trip, whichever layout runs. Per step:

    mask = book.bitmask(request_ids)       # [S, ceil(V / 32)] int32 on the host, None if nothing is constrained
    sampled = sampler.sample(logits, request_ids, allowed=mask)
    book.accept_later(request_ids, token_ids)  # a list, or a tensor the device may still be writing

The tokens of a step are accepted when the next mask is asked for, not when they are sampled: with
the GPU runtime's one-step-ahead schedule the host launches step N+1's forward before step N's
tokens have come back, and fills step N+1's mask while that forward runs; only then does it need
step N's tokens (`.tolist()` waits for that copy alone, and only when a constrained request sampled).

A request's matcher is made when it first samples. Its grammar was compiled, and checked, by the
engine core on admission: in the engine core's process the compile here finds it in the cache. A
sampling rank in another process compiles it again, on a worker thread, when the plan announces it
(`prepare`, StepPlan.grammars), and reports it done with a step's result (`take_compiled`); the
scheduler schedules the request only then, so no step waits for a compile (a schema of thousands of
properties takes seconds). The matcher keeps its state until the request finishes: a preempted request recomputes
its tokens and keeps its output, so its matcher stays where it was, as the sampler's generators do.

Reasoning (StructuredOutputsParams.in_reasoning / reasoning_end / reasoning_start): while a request
reasons its rows are unconstrained; the grammar starts after the first end sequence in its output.
When the model may open reasoning itself, its first token may be `reasoning_start` or what the grammar
allows.
"""
from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import torch

from moeserve.core.step_plan import GrammarCompile, GrammarDone, NewRequest
from moeserve.engine.grammar import COMPILE_THREADS, import_xgrammar, shared_compiler
from moeserve.sampling_params import StructuredOutputsParams


def bitmask_words(vocab_size: int) -> int:
    """int32 words per row of a token bitmask (bit j of word w: token 32 * w + j may be sampled)."""
    return (vocab_size + 31) // 32


@dataclass
class _Constrained:
    spec: StructuredOutputsParams
    stop_ids: list[int]
    matcher: Any = None  # xgrammar GrammarMatcher, made on first use
    compiled: Future | None = None  # its grammar, compiled by `prepare`; None: compiled on first use
    in_reasoning: bool = False
    num_out: int = 0
    tail: list[int] = field(default_factory=list)  # the last tokens while reasoning (to find an end sequence)

    def reasoning_ended(self, token: int) -> bool:
        self.tail.append(token)
        longest = max(len(seq) for seq in self.spec.reasoning_end)
        del self.tail[:-longest]
        return any(self.tail[-len(seq):] == seq for seq in self.spec.reasoning_end)


class GrammarBook:
    """Mutates only its matchers; never the logits or the sampler's state."""

    def __init__(self, model_dir: str, vocab_size: int):
        self.model_dir = model_dir
        self.vocab_size = vocab_size
        self._requests: dict[str, _Constrained] = {}
        self._compiler = None
        self._pending: tuple[list[str], Any] | None = None  # the last step's tokens, not yet accepted
        self._compiled: dict[str, Future] = {}  # grammars `prepare` started, until their request is added
        self._unreported: dict[str, Future] = {}  # those `take_compiled` has not reported yet
        self._pool: ThreadPoolExecutor | None = None

    def add(self, new: NewRequest) -> None:
        spec = new.sampling.structured_outputs
        if spec is not None:
            self._requests[new.request_id] = _Constrained(spec, list(new.sampling.eos_token_ids), in_reasoning=spec.in_reasoning,
                                                          compiled=self._compiled.pop(new.request_id, None))

    def remove(self, request_id: str) -> None:
        self._accept_pending()  # its last token may still be pending: the others' must not be lost
        self._requests.pop(request_id, None)
        self._compiled.pop(request_id, None)  # ended before it was scheduled: a compile still running is dropped
        self._unreported.pop(request_id, None)

    def prepare(self, compiles: list[GrammarCompile]) -> None:
        """Start compiling these requests' grammars on worker threads (xgrammar releases the GIL)."""
        for c in compiles:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="grammar")
            self._compiled[c.request_id] = self._unreported[c.request_id] = self._pool.submit(self._compile, c.spec)

    @property
    def compiling(self) -> bool:
        """Some grammar `prepare` started has not been reported yet."""
        return bool(self._unreported)

    def take_compiled(self, wait_s: float = 0.0) -> list[GrammarDone]:
        """The grammars compiled (or failed) since the last call; waits up to wait_s for one when none
        is (an empty step: the world has nothing else to do)."""
        if wait_s > 0 and self._unreported and not any(f.done() for f in self._unreported.values()):
            wait(list(self._unreported.values()), timeout=wait_s, return_when=FIRST_COMPLETED)
        done = []
        for request_id, future in list(self._unreported.items()):
            if future.done():
                del self._unreported[request_id]
                error = future.exception()
                done.append(GrammarDone(request_id, None if error is None else str(error) or type(error).__name__))
        return done

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, spec: StructuredOutputsParams) -> Any:
        """On a worker thread; whatever it raises is reported as the request's failure, not the rank's."""
        return self._shared_compiler().compile(spec)

    def _shared_compiler(self) -> Any:
        if self._compiler is None:
            self._compiler = shared_compiler(self.model_dir, self.vocab_size)
        return self._compiler

    def __len__(self) -> int:
        return len(self._requests)

    def bitmask(self, request_ids: list[str]) -> torch.Tensor | None:
        """[S, W] int32 of the next tokens each row may take (-1: every token), or None when no row is
        constrained this step."""
        self._accept_pending()
        rows = [(i, self._requests[r]) for i, r in enumerate(request_ids) if r in self._requests]
        rows = [(i, c) for i, c in rows if not c.in_reasoning]
        if not rows:
            return None
        mask = torch.full((len(request_ids), bitmask_words(self.vocab_size)), -1, dtype=torch.int32)
        for i, c in rows:
            matcher = self._matcher(c)
            if matcher.is_terminated():  # its grammar is complete: only the end of the sequence is left
                mask[i] = 0
                _allow(mask[i], c.stop_ids)
                continue
            matcher.fill_next_token_bitmask(mask, i)
            if c.num_out == 0 and c.spec.reasoning_start is not None:
                _allow(mask[i], [c.spec.reasoning_start])
        return mask

    def accept_later(self, request_ids: list[str], token_ids: Any) -> None:
        """A step's sampled tokens (a list, a [S] tensor on any device, or a callable returning the list:
        the sampler's read back, which waits for that step's copy alone), accepted before the next mask."""
        self._accept_pending()
        if any(r in self._requests for r in request_ids):
            self._pending = (request_ids, token_ids)

    def _accept_pending(self) -> None:
        if self._pending is not None:
            request_ids, token_ids = self._pending
            self._pending = None
            if callable(token_ids):
                token_ids = token_ids()
            self.accept(request_ids, token_ids.tolist() if isinstance(token_ids, torch.Tensor) else token_ids)

    def accept(self, request_ids: list[str], token_ids: list[int]) -> None:
        """Advance each constrained request by the token it sampled (which its mask allowed)."""
        for request_id, token in zip(request_ids, token_ids):
            c = self._requests.get(request_id)
            if c is None:
                continue
            first, c.num_out = c.num_out == 0, c.num_out + 1
            if c.in_reasoning:
                c.in_reasoning = not c.reasoning_ended(token)
            elif first and token == c.spec.reasoning_start:
                c.in_reasoning = True
            elif not self._matcher(c).is_terminated() and not c.matcher.accept_token(token):
                raise RuntimeError(f"request {request_id!r}: token {token} was sampled against its grammar")

    def _matcher(self, c: _Constrained) -> Any:
        if c.matcher is None:
            # compiled by `prepare`, and done: the request was scheduled once it was reported
            grammar = c.compiled.result() if c.compiled is not None else self._shared_compiler().compile(c.spec)
            c.matcher = import_xgrammar().GrammarMatcher(grammar, override_stop_tokens=c.stop_ids or None)
        return c.matcher


def _allow(row: torch.Tensor, token_ids: list[int]) -> None:
    """Set the bits of `token_ids` in one bitmask row (int32 words, two's complement for bit 31)."""
    for t in token_ids:
        word, bit = divmod(t, 32)
        if word < row.shape[0]:
            value = (int(row[word]) & 0xFFFFFFFF) | (1 << bit)
            row[word] = value - (1 << 32) if value >= 1 << 31 else value
