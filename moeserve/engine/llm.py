"""The offline Python API: `LLM(model=DIR).generate(prompts, SamplingParams(...))`."""
from __future__ import annotations

import itertools
import logging
import weakref
from collections.abc import Sequence

from moeserve.config import CacheConfig, DeviceConfig, EngineConfig, ModelConfig, ParallelConfig, SchedulerConfig
from moeserve.engine.engine_core import EngineCore
from moeserve.outputs import RequestOutput
from moeserve.placement.runtime_config import PlacementRuntimeConfig
from moeserve.sampling_params import SamplingParams

log = logging.getLogger(__name__)

Prompt = str | Sequence[int]


class LLM:
    """Runs an engine in this process (rank 0; other ranks, if any, are spawned by the executor).

    model: checkpoint directory, or None for the built-in model. tp / ep: see DESIGN.md section 2.
    device: auto | cpu | cuda; kernels: auto | torch | cpu | triton (docs/kernels.md).
    """

    def __init__(
        self,
        model: str | None = None,
        dtype: str = "auto",
        tp: int = 1,
        ep: int = 1,
        dispatch: str = "auto",
        num_threads: int | None = None,
        expert_threads: int | None = None,
        max_model_len: int | None = None,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 4096,
        split_prefill_bursts: bool = False,
        kv_cache_blocks: int | None = None,
        block_size: int = 16,
        enable_prefix_caching: bool = True,
        placement: str | None = None,
        record_trace_dir: str | None = None,
        record_window_steps: int = 100,
        eplb_interval: int = 0,
        eplb_window: int = 0,
        seed: int = 0,
        device: str = "auto",
        kernels: str = "auto",
        gpu_memory_utilization: float = 0.9,
    ):
        config = EngineConfig(
            model=ModelConfig(model=model, dtype=dtype, max_model_len=max_model_len),
            cache=CacheConfig(block_size=block_size, num_blocks=kv_cache_blocks, enable_prefix_caching=enable_prefix_caching),
            scheduler=SchedulerConfig(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                split_prefill_bursts=split_prefill_bursts,
            ),
            parallel=ParallelConfig(tp=tp, ep=ep, dispatch=dispatch, num_threads=num_threads, expert_threads=expert_threads),
            device=DeviceConfig(device=device, kernels=kernels, gpu_memory_utilization=gpu_memory_utilization),
            placement=placement,
            placement_runtime=PlacementRuntimeConfig(
                record_trace_dir=record_trace_dir,
                record_window_steps=record_window_steps,
                eplb_interval=eplb_interval,
                eplb_window=eplb_window,
            ),
            seed=seed,
        )
        self.engine = EngineCore(config)
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
