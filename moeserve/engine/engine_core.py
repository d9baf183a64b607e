"""The engine core on rank 0: requests in, incremental outputs out.

    plan = scheduler.schedule(); result = executor.execute(plan); outputs = update(plan, result)

The scheduler decides what runs; the executor runs it on every rank; this class owns what only
rank 0 needs per request: detokenization and stop conditions.

With `--async-scheduling` the host runs one step ahead (vLLM's async scheduling):

    plan[N+1] = scheduler.schedule()      # while the device runs step N
    future[N+1] = executor.submit(plan[N+1])
    outputs = update(plan[N], future[N].result())   # step N's tokens, read back once

Step N+1 is queued on the device before step N's tokens reach the host: its sequences' newest tokens
are PENDING_TOKEN placeholders the workers fill from step N's sampled ids on the device. A request
that stops at step N has computed step N+1 for nothing; its output is dropped (docs/gpu_runtime.md).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from moeserve.config import EngineConfig
from moeserve.core.request import Request
from moeserve.core.scheduler import Scheduler
from moeserve.core.spec_scheduling import SpecScheduling
from moeserve.engine.detokenizer import IncrementalDetokenizer, find_stop
from moeserve.core.step_plan import StepPlan
from moeserve.engine.executor import Executor, StepFuture, make_executor
from moeserve.engine.grammar import GrammarError, shared_compiler
from moeserve.engine.startup_checks import check_startup
from moeserve.errors import RequestError
from moeserve.kv_transfer.params import PARAM, KvTransfer
from moeserve.outputs import RequestOutput
from moeserve.sampling_params import MAX_BAD_WORD_SEQUENCES, SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class _InFlight:
    """A step submitted ahead (async scheduling)."""

    plan: StepPlan
    future: StepFuture
    submitted_at: float


@dataclass
class _Tracked:
    """Rank-0-only state of a live request."""

    params: SamplingParams
    prompt_token_ids: list[int]
    detok: IncrementalDetokenizer
    logprobs: list | None
    # [None] * prompt length when the request asked for prompt logprobs; filled by position as the
    # prompt's chunks are computed (a chunk recomputed after preemption overwrites its positions)
    prompt_logprobs: list | None = None


def resolve_async_scheduling(config: EngineConfig) -> EngineConfig:
    """A config whose async_scheduling is decided: unset means on for CUDA devices (the ranks get the
    decided value with the config). Off with speculative decoding, asked for or not: a step's drafts
    come from its own sampled tokens (how many drafts a verify accepted, the n-gram lookup over them,
    the MTP layer's input), so the next step cannot be scheduled before this one is read back (vLLM
    shipped the same restriction first; docs/speculative_decoding.md)."""
    if config.speculative.enabled:
        if config.scheduler.async_scheduling is not False:
            log = logger.warning if config.scheduler.async_scheduling else logger.info
            log("async scheduling is off with --speculative-config: each step is read back before the next is "
                "scheduled, since the next step's drafts depend on this step's tokens")
        return dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, async_scheduling=False))
    if config.scheduler.async_scheduling is not None:
        return config
    from moeserve.kernels.registry import resolve

    on = resolve(config.device.device, config.device.kernels)[0] == "cuda"
    return dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, async_scheduling=on))


def resolve_model(config: EngineConfig) -> EngineConfig:
    """A config whose model path is concrete (the built-in model when none was given)."""
    if config.model.model is not None:
        return config
    from moeserve.engine.builtin_model import BUILTIN_NAME, builtin_model_dir

    model = dataclasses.replace(
        config.model,
        model=str(builtin_model_dir()),
        served_model_name=config.model.served_model_name or BUILTIN_NAME,
    )
    return dataclasses.replace(config, model=model)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(model_dir: str, chat_template: str | None = None):
    """The checkpoint's tokenizer, or None for a checkpoint without one (token-id prompts only, no text).
    chat_template: a template (--chat-template's text) that replaces the checkpoint's."""
    from pathlib import Path

    from transformers import AutoTokenizer

    if not any((Path(model_dir) / name).exists() for name in _TOKENIZER_FILES):
        return None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def _eos_ids(model_dir: str, tokenizer) -> set[int]:
    from transformers import GenerationConfig

    ids: set[int] = set()
    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        eos = None
    for value in (eos, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    return ids


def spec_scheduling(config: EngineConfig, max_model_len: int) -> SpecScheduling | None:
    """Speculative decoding's scheduling side (core/spec_scheduling.py), or None when it is off."""
    spec = config.speculative
    if not spec.enabled:
        return None
    from moeserve.engine.layout_check import config_fields
    from moeserve.spec_decode.model_check import mtp_layer_count

    fields = config_fields(config.model.model)
    k = spec.num_drafts(mtp_layer_count(fields) if fields is not None else 1)
    logger.info("speculative decoding: %s, %d draft tokens per step", spec.method, k)
    return SpecScheduling(spec, k, max_model_len)


class EngineCore:
    def __init__(self, config: EngineConfig, executor: Executor | None = None):
        config = resolve_async_scheduling(resolve_model(check_startup(config)))
        self.config = config
        model_dir = config.model.model
        self.model_name = config.model.served_model_name or model_dir.rstrip("/").split("/")[-1]
        self.tokenizer = load_tokenizer(model_dir, config.model.chat_template)
        self.executor = executor or make_executor(config)
        if not hasattr(self.executor, "submit"):  # an executor that only runs a step at a time (a test double)
            config = dataclasses.replace(config, scheduler=dataclasses.replace(config.scheduler, async_scheduling=False))
            self.config = config
        self.max_model_len = self.executor.max_model_len
        self.vocab_size = self.executor.vocab_size
        self.eos_token_ids = _eos_ids(model_dir, self.tokenizer)
        self.scheduler = Scheduler(
            config.scheduler,
            config.cache,
            num_groups=self.executor.num_groups,
            num_blocks=self.executor.num_blocks,
            max_model_len=self.max_model_len,
            kv_expiry_s=config.kv_transfer.expiry_s,
            kv_max_pinned_blocks=config.kv_transfer.max_pinned_blocks,
            spec=spec_scheduling(config, self.max_model_len),
            # a sampling rank in another process compiles each grammar again: beside the steps, before
            # the request is scheduled (its cache is not this process's)
            grammar_groups=getattr(self.executor, "remote_sampling_groups", frozenset()),
        )
        self.kv = None  # the prefill/decode split's side channel and releases (kv_transfer/connector.py)
        if config.kv_transfer.enabled:
            from moeserve.kv_transfer.connector import KvConnector

            self.kv = KvConnector(config.kv_transfer, self.executor.kv_layouts(), config.cache.block_size,
                                  config.parallel.tp)
        from moeserve.engine.rebalance import engine_placement

        self.placement = engine_placement(config, self.executor, self.model_name)  # recorder + rebalancing
        self._tracked: dict[str, _Tracked] = {}
        self._grammar_pending: set[str] = set()  # tracked, their grammar still compiling on the caller's thread
        self._pending_outputs: list[RequestOutput] = []
        self.num_steps = 0
        self.async_scheduling = bool(config.scheduler.async_scheduling)
        self._inflight: _InFlight | None = None  # async scheduling: the step submitted, not yet read back
        self._last_result_at = 0.0

    def summary(self) -> list[tuple[str, str]]:
        """The start-up summary's rows: model, dtype, layout, dispatch, kernels, KV cache, placement
        (engine/startup_summary.py)."""
        from moeserve.engine.startup_summary import summary_rows

        return summary_rows(self)

    # -- requests ---------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    owner: str | None = None, kv_transfer: KvTransfer | None = None, grammar_pending: bool = False) -> None:
        """Admits a request or raises RequestError / QueueFullError; a refused request takes nothing.
        `owner` names the client request it belongs to (the n choices of one HTTP request share it):
        the scheduler shares seats and KV blocks fairly between owners (core/fair_share.py).
        `kv_transfer`: keep its prompt's KV for a remote decoder, or take it from a prefill engine.
        `grammar_pending`: the caller compiles its grammar (`compile_grammar`, on a worker thread) and
        says how that went: `grammar_compiled`, or `abort_request(..., output=False)` for a refusal.
        Meanwhile the request is routed, and a sampling rank in another process compiles it too, but it
        is not scheduled."""
        if request_id in self._tracked:
            raise RequestError(f"request id {request_id!r} is already in use", param="request_id")
        self._check_prompt(prompt_token_ids, params)
        self._check_kv_transfer(kv_transfer)
        grammar_pending = grammar_pending and params.structured_outputs is not None
        if params.structured_outputs is not None and not grammar_pending:
            self.compile_grammar(params)
        if params.logprobs == -1 or params.prompt_logprobs == -1:  # the whole vocabulary (_check_prompt bounds it)
            params = dataclasses.replace(params, **{name: self.vocab_size for name in ("logprobs", "prompt_logprobs")
                                                    if getattr(params, name) == -1})
        if params.bad_words:
            params = dataclasses.replace(params, bad_words_token_ids=self._bad_words_token_ids(params.bad_words))
        if params.min_tokens or params.structured_outputs is not None:  # the sampler masks these until
            # min_tokens are out; a grammar allows them where it may end
            params = dataclasses.replace(params, eos_token_ids=sorted(self.eos_token_ids))
        # everything that can fail comes before the scheduler takes the request: once it holds one, a
        # request the engine does not track would be scheduled by every later step
        detok = IncrementalDetokenizer(self.tokenizer if params.detokenize else None, params.skip_special_tokens,
                                       prompt_token_ids)
        request = Request(request_id=request_id, prompt_token_ids=list(prompt_token_ids), sampling=params, owner=owner)
        if kv_transfer is not None:
            request.remote_decode = kv_transfer.remote_decode
            request.remote_prefill = kv_transfer.remote_prefill
        self.scheduler.add_request(request, grammar_pending)  # the empty-prompt and context-length checks; resolves max_tokens
        if grammar_pending:
            self._grammar_pending.add(request_id)
        if params.max_tokens is None:
            params = dataclasses.replace(params, max_tokens=request.max_output_tokens)
        self._tracked[request_id] = _Tracked(
            params=params,
            prompt_token_ids=list(prompt_token_ids),
            detok=detok,
            logprobs=[] if params.logprobs is not None else None,
            prompt_logprobs=[None] * len(prompt_token_ids) if params.prompt_logprobs is not None else None,
        )

    def _check_prompt(self, prompt: list[int], params: SamplingParams) -> None:
        """What only the engine knows (vocabulary, tokenizer); the scheduler checks the prompt's length."""
        if params.stop and self.tokenizer is None:
            raise RequestError("stop strings need a tokenizer and this checkpoint has none", param="stop")
        if any(not isinstance(t, int) or isinstance(t, bool) for t in prompt):  # 1.5 passed every range check,
            # then failed in the detokenizer or a step
            raise RequestError("prompt token ids must be integers", param="prompt")
        if prompt and (min(prompt) < 0 or max(prompt) >= self.vocab_size):
            raise RequestError(f"prompt token ids must lie in [0, {self.vocab_size})", param="prompt")
        if params.stop_token_ids and max(params.stop_token_ids) >= self.vocab_size:
            raise RequestError(f"stop_token_ids must lie in [0, {self.vocab_size})", param="stop_token_ids")
        if params.logit_bias and max(params.logit_bias) >= self.vocab_size:
            raise RequestError(f"logit_bias token ids must lie in [0, {self.vocab_size})", param="logit_bias")
        if params.allowed_token_ids and max(params.allowed_token_ids) >= self.vocab_size:
            raise RequestError(f"allowed_token_ids must lie in [0, {self.vocab_size})", param="allowed_token_ids")
        bound = self.config.model.max_logprobs_for(self.vocab_size)
        for name in ("logprobs", "prompt_logprobs"):
            asked = getattr(params, name)
            asked = self.vocab_size if asked == -1 else asked
            if asked is not None and asked > bound:
                raise RequestError(f"{name} asks for {asked} alternatives per token and this engine returns at most "
                                   f"{bound} (max_logprobs, --max-logprobs)", param=name)

    def _bad_words_token_ids(self, words: list[str]) -> list[list[int]]:
        """vLLM's tokenizations of bad words: each as it starts a text and, where that is other tokens
        of the same count, after a space (as it follows a word)."""
        if self.tokenizer is None:
            raise RequestError("bad_words need a tokenizer and this checkpoint has none", param="bad_words")
        out: list[list[int]] = []
        for word in words:
            alone = self.tokenizer.encode(word.lstrip(), add_special_tokens=False)
            spaced = self.tokenizer.encode(" " + word.lstrip(), add_special_tokens=False)
            if not alone:
                raise RequestError(f"bad word {word[:40]!r} has no tokens", param="bad_words")
            out.append(alone)
            if spaced and spaced[0] != alone[0] and len(spaced) == len(alone):
                out.append(spaced)
        if len(out) > MAX_BAD_WORD_SEQUENCES:
            raise RequestError(f"bad_words are {len(out)} token sequences (each word alone and after a space); "
                               f"at most {MAX_BAD_WORD_SEQUENCES} are allowed", param="bad_words")
        return out

    def compile_grammar(self, params: SamplingParams) -> None:
        """Compiles the request's constraint (cached by xgrammar): what cannot be enforced is a 400
        now, never an error inside a step. A sampling rank in this process finds it in the cache; one in
        another process compiles it again beside the steps, before the request is scheduled
        (Scheduler.grammar_groups). Thread-safe (xgrammar releases the GIL): the server's engine loop calls it off its
        thread after add_request(..., grammar_pending=True), so a slow grammar does not stall the steps of
        other requests, and a sampling rank's compile runs at the same time."""
        if self.tokenizer is None:
            raise RequestError("structured outputs need a tokenizer and this checkpoint has none",
                               param="structured_outputs")
        try:
            shared_compiler(self.config.model.model, self.vocab_size, self.tokenizer).compile(params.structured_outputs)
        except GrammarError as e:
            raise RequestError(str(e), param="structured_outputs") from None

    def _check_kv_transfer(self, kv: KvTransfer | None) -> None:
        role = self.config.kv_transfer.role
        if kv is None:
            return
        if self.kv is None:
            raise RequestError(f"{PARAM} asks for a KV transfer and this server runs without one: start it with "
                               "--kv-role prefill, --kv-role decode or --kv-transfer nixl", param=PARAM)
        if kv.remote_decode and role == "decode":
            raise RequestError(f"{PARAM}: do_remote_decode asks for a prefill, and this server runs --kv-role decode",
                               param=PARAM)
        if kv.remote_prefill is not None and role == "prefill":
            raise RequestError(f"{PARAM}: do_remote_prefill asks for a decode, and this server runs --kv-role prefill",
                               param=PARAM)

    def grammar_compiled(self, request_id: str) -> None:
        """The grammar of a request added with grammar_pending compiled: it may be scheduled (once a
        sampling rank in another process has compiled it too)."""
        if request_id in self._grammar_pending:
            self._grammar_pending.discard(request_id)
            self.scheduler.grammar_compiled(request_id)

    def abort_request(self, request_id: str, output: bool = True) -> None:
        """Frees the request's blocks now; its final output (finish_reason "abort") comes with the next
        step, unless `output` is False (a request refused before its client heard it was taken)."""
        if self._tracked.pop(request_id, None) is None:
            return
        self._grammar_pending.discard(request_id)
        request = self.scheduler.abort_request(request_id)
        if request is not None and request.remote_prefill is not None and self.kv is not None:
            self.kv.give_up(request.remote_prefill)  # never read: the prefill engine may free it now
        if output:
            prompt = request.prompt_token_ids if request is not None else []
            self._pending_outputs.append(RequestOutput(request_id=request_id, prompt_token_ids=prompt, finish_reason="abort"))

    def has_unfinished_requests(self) -> bool:
        """Work for `step`: live requests, outputs not yet returned, or KV reads still running (an
        aborted request's read too: its blocks come back, and its pin is released, when it ends). A
        request waiting for the caller's compile alone is no work; one whose rank compiles is
        (`grammars_in_flight`: steps carry the rank's report)."""
        return (len(self._tracked) > len(self._grammar_pending) or bool(self._pending_outputs)
                or self.scheduler.pulls_in_flight or self.scheduler.grammars_in_flight or self._inflight is not None)

    # -- the step ---------------------------------------------------------------------------------
    def service(self) -> None:
        """Between steps, busy or idle: free the blocks decoders have read, or let expire."""
        if self.kv is None:
            return
        for request_id, num_bytes in self.kv.released():
            pin = self.scheduler.release_pin(request_id)
            if pin is not None:
                self.kv.unpublish(pin, read=True, num_bytes=num_bytes)
        for pin in self.scheduler.expire_pins(time.monotonic()):
            logger.info("KV blocks of %s expired unread after %.0f s", pin.request_id, self.scheduler.pins.expiry_s)
            self.kv.unpublish(pin, read=False)
        self._withdraw_evicted_pins()

    def _withdraw_evicted_pins(self) -> None:
        """Pins newer ones displaced: their blocks are free, so the side channel stops naming them before
        the next schedule() can reuse the blocks (a decoder reading one then fails its pin check)."""
        for pin in self.scheduler.take_evicted_pins():
            logger.warning("KV blocks of %s released unread: --kv-max-pinned-blocks (%d per attention group) were "
                           "held by prefills no decoder had read", pin.request_id, self.scheduler.pins.max_blocks)
            self.kv.unpublish(pin, read=False)

    def step(self) -> list[RequestOutput]:
        self.service()
        if self.async_scheduling:
            return self._step_ahead()
        plan = self.scheduler.schedule()
        outputs, self._pending_outputs = self._pending_outputs, []
        outputs += self._collect_scheduler_failures()
        if self._worth_running(plan):
            if self.placement is not None:
                self.placement.before(plan)  # may ask for routing counts or ship a new expert placement
            started = time.perf_counter()
            result = self.executor.execute(plan)
            if plan.rebalance is None:  # a step that also moves experts says nothing of step cost
                self.scheduler.observe_step(plan, time.perf_counter() - started)
            outputs += self._update(plan, result)
            if self.placement is not None:
                self.placement.after(plan)
            self.num_steps += 1
        return outputs

    def _step_ahead(self) -> list[RequestOutput]:
        """Schedule and submit step N+1, then read step N back and update: the host prepares step N+1
        while the device computes step N, and the device has step N+1 queued while the host updates."""
        if self._inflight is not None and self.placement is not None and self.placement.per_step:
            self.drain()  # the placement runtime annotates each plan after the previous step's counts
        plan = self.scheduler.schedule()
        outputs, self._pending_outputs = self._pending_outputs, []
        outputs += self._collect_scheduler_failures()
        submitted = None
        if self._worth_running(plan):
            if self.placement is not None:
                self.placement.before(plan)
            submitted = _InFlight(plan, self.executor.submit(plan), time.perf_counter())
        if self._inflight is not None:
            outputs += self._finish(self._inflight)
        self._inflight = submitted
        return outputs

    def _worth_running(self, plan: StepPlan) -> bool:
        """Tokens to compute, news for the workers, or an empty step while KV reads or grammar compiles
        run beside the steps: the workers report them done in one."""
        return bool(plan.num_tokens or plan.new_requests or plan.finished_request_ids or plan.grammars
                    or self.scheduler.pulls_in_flight or self.scheduler.grammars_in_flight)

    def drain(self) -> None:
        """Read back the step in flight (async scheduling); its outputs go out with the next `step`.
        Called before anything that must not overlap a step (a control step, a health probe, shutdown)."""
        if self._inflight is not None:
            inflight, self._inflight = self._inflight, None
            self._pending_outputs += self._finish(inflight)

    def _finish(self, inflight: _InFlight) -> list[RequestOutput]:
        plan = inflight.plan
        result = inflight.future.result()
        now = time.perf_counter()
        if plan.rebalance is None:  # device time: from when it could start (queued behind the step before)
            self.scheduler.observe_step(plan, now - max(inflight.submitted_at, self._last_result_at))
        self._last_result_at = now
        outputs = self._update(plan, result)
        if self.placement is not None:
            self.placement.after(plan)
        self.num_steps += 1
        return outputs

    def _collect_scheduler_failures(self) -> list[RequestOutput]:
        """Requests the scheduler had to end itself (e.g. one that can never fit the KV pool)."""
        outputs = []
        for request, message in self.scheduler.take_failed():
            self._tracked.pop(request.request_id, None)
            outputs.append(
                RequestOutput(
                    request_id=request.request_id,
                    prompt_token_ids=request.prompt_token_ids,
                    token_ids=list(request.output_token_ids),
                    finish_reason="error",
                    error=message,
                    error_status=request.error_status,
                )
            )
        return outputs

    def _update(self, plan, result) -> list[RequestOutput]:
        by_id: dict[str, list] = {}
        for s in result.sampled:  # a verify step gives a request several tokens, in order
            by_id.setdefault(s.request_id, []).append(s)
        for part in result.prompt_logprobs:  # before the first token's output, which reports them
            tracked = self._tracked.get(part.request_id)
            if tracked is not None and tracked.prompt_logprobs is not None:
                tracked.prompt_logprobs[part.start : part.start + len(part.entries)] = part.entries
        outputs = []
        got_token = self.scheduler.update(plan, result)  # runs (or fails) the requests whose KV pulls ended
        if (plan.kv_pulls or result.kv_pulls) and self.kv is not None:
            self.kv.on_pulls(plan.kv_pulls, result.kv_pulls)
        for request in got_token:
            tracked = self._tracked.get(request.request_id)
            if tracked is None:
                continue
            outputs.append(self._advance(request, tracked, by_id[request.request_id]))
        return outputs

    def _advance(self, request: Request, tracked: _Tracked, sampled: list) -> RequestOutput:
        """The step's tokens of `request` (one, or a verify's accepted drafts and one more), each checked
        for a stop in order as if it came alone; tokens after a stop are dropped."""
        params = tracked.params
        detok = tracked.detok
        text_before = len(detok.text)
        first_out = len(request.output_token_ids) - len(sampled)
        new_tokens: list[int] = []
        new_logprobs = [] if tracked.logprobs is not None else None
        finish_reason, stop_reason, shown = None, None, True
        for s in sampled:
            new_tokens.append(s.token_id)
            if new_logprobs is not None:
                new_logprobs.append((s.logprob, s.top_logprobs or [], s.rank))
            finish_reason, stop_reason, shown = self._check_token(request, params, detok, s.token_id,
                                                                  first_out + len(new_tokens))
            if finish_reason is not None:
                break
        if tracked.logprobs is not None:
            tracked.logprobs.extend(new_logprobs)
        if finish_reason is not None and not isinstance(stop_reason, str):  # a stop string cut the text already
            detok.flush(hidden_tail=0 if shown else 1)  # complete characters held back for an unfinished one
        if finish_reason is not None:
            self.scheduler.drop_output_tail(request, len(sampled) - len(new_tokens))
        output = RequestOutput(
            request_id=request.request_id,
            prompt_token_ids=tracked.prompt_token_ids,
            token_ids=list(request.output_token_ids),
            text=detok.text,
            new_token_ids=new_tokens,
            delta_text=detok.text[text_before:],
            logprobs=tracked.logprobs,
            new_logprobs=new_logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            num_cached_prompt_tokens=request.num_cached_prompt_tokens,
            prompt_logprobs=tracked.prompt_logprobs,
        )
        if finish_reason is not None:
            self.scheduler.finish_request(request.request_id, finish_reason)  # pins a remote decoder's blocks
            del self._tracked[request.request_id]
            if self.kv is not None:
                self._withdraw_evicted_pins()
            pin = self.scheduler.pins.get(request.request_id) if request.remote_decode else None
            if pin is not None and self.kv is not None:
                output.kv_transfer_params = self.kv.answer(pin)
        return output

    def _check_token(self, request: Request, params: SamplingParams, detok: IncrementalDetokenizer, token: int,
                     n_out: int) -> tuple[str | None, str | int | None, bool]:
        """Detokenize `token`, the request's n_out-th output token, and decide whether it ends the
        request: (finish_reason, stop_reason, whether its text is shown)."""
        finish_reason, stop_reason = None, None
        text_before = len(detok.text)
        may_stop = n_out > params.min_tokens  # vLLM: nothing stops a request before min_tokens
        # a grammar allows the end of sequence only where it is complete: that ends the request, whatever
        # ignore_eos or min_tokens say (nothing else could follow)
        grammar_end = params.structured_outputs is not None and token in self.eos_token_ids
        if may_stop and token in params.stop_token_ids:
            finish_reason, stop_reason = "stop", token
        elif grammar_end or (may_stop and token in self.eos_token_ids and not params.ignore_eos):
            finish_reason = "stop"
        shown = finish_reason is None or params.include_stop_str_in_output  # an ending stop/EOS token shows no text
        if shown:
            detok.add([token])
        else:
            detok.token_ids.append(token)
        if finish_reason is None and params.stop and may_stop:
            hit = find_stop(detok.text, len(detok.text) - text_before, params.stop)
            if hit is not None:
                index, stop = hit
                detok.text = detok.text[: index + (len(stop) if params.include_stop_str_in_output else 0)]
                finish_reason, stop_reason = "stop", stop
        if finish_reason is None and (n_out >= params.max_tokens or len(request.prompt_token_ids) + n_out >= self.max_model_len):
            finish_reason = "length"
        return finish_reason, stop_reason, shown

    # -- introspection ----------------------------------------------------------------------------
    def stats(self) -> dict:
        placement = self.placement.stats() if self.placement is not None else {}
        kv = self.kv.stats() if self.kv is not None else {}
        return dict(self.scheduler.stats(), num_steps=self.num_steps, **placement, **kv)

    # -- routing recorder (placement runtime); call between steps ----------------------------------
    def recorder_start(self) -> None:
        self.drain()
        self._need_placement().start()

    def recorder_stop(self) -> None:
        self.drain()
        self._need_placement().stop()

    def recorder_dump(self, path: str | None = None) -> str:
        """Writes the kept windows as one trace file; returns its path."""
        return self._need_placement().dump(path)

    def _need_placement(self):
        if self.placement is None:
            raise RequestError("this model has no MoE layers, so there is no routing to record")
        return self.placement

    def check_health(self) -> None:
        if self._inflight is None:  # a probe step would overlap the one in flight: the next idle call probes
            self.executor.check_health()

    def shutdown(self) -> None:
        try:
            self.drain()
        except Exception:  # a dead world: shut it down all the same
            logger.exception("the step in flight failed at shutdown")
        if self.kv is not None:
            self.kv.close()
        self.executor.shutdown()
