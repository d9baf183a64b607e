"""The offline Python API: `LLM(model=DIR).generate(prompts, SamplingParams(...))`."""
from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from moeserve.engine.engine_core import EngineCore
from moeserve.engine.startup_summary import log_summary
from moeserve.outputs import RequestOutput
from moeserve.sampling_params import SamplingParams
from moeserve.settings import ENGINE_FLAGS, ENGINE_KEYS, check_value, describe, engine_config

log = logging.getLogger(__name__)

Prompt = str | Sequence[int]


class LLM:
    """Runs an engine in this process (rank 0; other ranks, if any, are spawned by the executor).

    `LLM(model=DIR, tp=2, ep=4, ...)`: every keyword is a `moeserve serve` setting of the same name
    and default (moeserve/settings.py); model None serves the built-in model. tp / ep: docs/architecture.md,
    "Parallel layout". The settings:
    """

    def __init__(self, model: str | None = None, **settings: Any):
        unknown = sorted(set(settings) - set(ENGINE_KEYS))
        if unknown:
            raise TypeError(f"LLM() got unknown settings {', '.join(unknown)}; valid settings: {', '.join(ENGINE_KEYS)}")
        values = {k: check_value(ENGINE_KEYS[k], v, "LLM()") for k, v in {"model": model, **settings}.items()}
        config = engine_config(values)
        self.engine = EngineCore(config)
        log_summary(self.engine.summary(), "moeserve LLM is ready")
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()
        # `del llm` (or losing the last reference) stops the engine and its ranks, as shutdown() does
        self._finalizer = weakref.finalize(self, EngineCore.shutdown, self.engine)

    def generate(
        self, prompts: Prompt | Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None
    ) -> list[RequestOutput]:
        """One finished RequestOutput per prompt, in prompt order. All prompts are submitted at once."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams")
        order: list[str] = []
        try:
            for prompt, p in zip(prompts, params):
                if p.n != 1:
                    raise ValueError("LLM.generate takes n=1 per prompt; repeat the prompt for several samples")
                if isinstance(prompt, str) and self.tokenizer is None:
                    raise ValueError("this checkpoint has no tokenizer: pass prompts as lists of token ids")
                ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
                request_id = f"llm-{next(self._ids)}"
                self.engine.add_request(request_id, ids, p)
                order.append(request_id)
            finished: dict[str, RequestOutput] = {}
            wanted = set(order)
            while len(finished) < len(order):
                for out in self.engine.step():
                    if out.finished and out.request_id in wanted:
                        finished[out.request_id] = out
            return [finished[r] for r in order]
        except BaseException:
            # a refused prompt, Ctrl-C, an engine error: nothing of this call may keep running
            for request_id in order:
                try:
                    self.engine.abort_request(request_id)
                except Exception:  # bookkeeping interrupted mid-update: keep aborting, keep the cause
                    log.exception("could not abort %s", request_id)
            raise

    def shutdown(self) -> None:
        self._finalizer()  # runs EngineCore.shutdown once, however often this is called

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


LLM.__doc__ = LLM.__doc__.rstrip() + "\n" + describe(ENGINE_FLAGS) + "\n"
