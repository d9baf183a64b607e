"""The offline Python API: `LLM(model=DIR).generate(prompts, SamplingParams(...))`."""
from __future__ import annotations

import dataclasses
import itertools
import logging
import numbers
import operator
import reprlib
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from moeserve.engine import chat_prompt
from moeserve.engine.engine_core import EngineCore
from moeserve.engine.generation_defaults import generation_defaults
from moeserve.engine.grammar import COMPILE_THREADS
from moeserve.engine.startup_summary import log_summary
from moeserve.engine.vllm_keywords import VLLM_KEYWORDS, from_vllm
from moeserve.errors import QueueFullError
from moeserve.engine.llm_results import PromptsDone, completion, progress, prompt_logprobs
from moeserve.outputs import LLMOutput, RequestOutput
from moeserve.sampling_params import SamplingParams
from moeserve.settings import ENGINE_FLAGS, ENGINE_KEYS, check_value, describe, engine_config

log = logging.getLogger(__name__)

Prompt = str | Sequence[int] | dict[str, Any]
Conversation = Sequence[dict[str, Any]]
# chat_template_kwargs entries that are arguments of LLM.chat itself
_CHAT_ARGUMENTS = ("add_generation_prompt", "continue_final_message", "tools", "chat_template",
                   "chat_template_content_format")


class LLM:
    """Runs an engine in this process (rank 0; other ranks, if any, are spawned by the executor).

    `LLM(model=DIR, tp=2, ep=4, ...)`: every keyword is a `moeserve serve` setting of the same name
    and default (moeserve/settings.py), or one of vLLM's LLM keywords (engine/vllm_keywords.py:
    tensor_parallel_size, enable_expert_parallel, trust_remote_code, ...); model None serves the built-in
    model. tp / ep: docs/architecture.md, "Parallel layout". The settings:
    """

    def __init__(self, model: str | None = None, **settings: Any):
        unknown = sorted(set(settings) - set(ENGINE_KEYS) - set(VLLM_KEYWORDS))
        if unknown:
            raise TypeError(f"LLM() got unknown settings {', '.join(unknown)}; valid settings: {', '.join(ENGINE_KEYS)}; "
                            f"and vLLM's {', '.join(VLLM_KEYWORDS)} (engine/vllm_keywords.py)")
        settings = from_vllm(model, settings)
        values = {k: check_value(ENGINE_KEYS[k], v, "LLM()") for k, v in {"model": model, **settings}.items()}
        config = engine_config(values)
        self.engine = EngineCore(config)
        log_summary(self.engine.summary(), "moeserve LLM is ready")
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._defaults: dict[str, Any] | None = None  # get_default_sampling_params' fields, read on first use
        # `del llm` (or losing the last reference) stops the engine and its ranks, as shutdown() does
        self._finalizer = weakref.finalize(self, EngineCore.shutdown, self.engine)

    def generate(
        self, prompts: Prompt | Sequence[Prompt], sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
    ) -> list[LLMOutput]:
        """One finished LLMOutput per prompt, in prompt order. The prompts are read (and tokenized)
        first, then submitted together, as far as the engine's waiting queue (max_queued_requests) holds them.

        prompts (as vLLM's): a str, a list of token ids, {"prompt": str} or {"prompt_token_ids": [...]},
        or a list of these. sampling_params: one for every prompt, or a list with one per prompt; n > 1
        samples a prompt n times (sample i as the HTTP server's choice i: SamplingParams.for_choice).
        use_tqdm: a progress bar over the prompts when tqdm is installed; or a callable that makes one
        (tqdm's signature). A prompt or a parameter the engine refuses raises ValueError or TypeError,
        and nothing of the call stays queued."""
        prompt_list = _prompt_list(prompts)
        params = _params_list(self.get_default_sampling_params() if sampling_params is None else sampling_params,
                              len(prompt_list))
        return self._generate([(self._prompt_text(prompt), self._token_ids(prompt)) for prompt in prompt_list], params,
                              use_tqdm)

    def chat(
        self, messages: Conversation | Sequence[Conversation], sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool | Callable[..., Any] = True, *, chat_template: str | None = None, add_generation_prompt: bool = True,
        continue_final_message: bool = False, tools: list[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None, chat_template_content_format: str = "auto",
    ) -> list[LLMOutput]:
        """vLLM's LLM.chat: one finished LLMOutput per conversation. messages: one conversation (a list
        of {"role", "content"} dicts, as OpenAI's API takes them) or a list of conversations; each is
        rendered as the HTTP server's /v1/chat/completions renders it (engine/chat_prompt.py: the
        checkpoint's chat template, or `chat_template`, with `tools` and `chat_template_kwargs` as
        template variables; each message's content as the template reads it, as vLLM's
        `chat_template_content_format` "auto" decides, or "string" / "openai"), then generated as
        `generate` does (sampling_params, use_tqdm alike). Bad messages raise ChatPromptError (a ValueError naming the field, `.param`) or TypeError
        before anything is queued."""
        conversations = _conversations(messages)
        params = _params_list(self.get_default_sampling_params() if sampling_params is None else sampling_params,
                              len(conversations))
        render = self._chat_renderer(chat_template, add_generation_prompt, continue_final_message, tools, chat_template_kwargs,
                                     chat_template_content_format)
        prompts = []
        for k, conversation in enumerate(conversations):
            try:
                prompts.append(render(conversation))
            except chat_prompt.ChatPromptError as e:
                if isinstance(messages[0], dict):  # one conversation: the message names it already
                    raise
                raise chat_prompt.ChatPromptError(f"conversation {k}: {e}", e.param) from None
        return self._generate(prompts, params, use_tqdm)

    def _chat_renderer(self, chat_template: Any, add_generation_prompt: Any, continue_final_message: Any, tools: Any,
                       chat_template_kwargs: Any, content_format: Any = "auto") -> Callable[[Any], tuple[str, list[int]]]:
        """Checks LLM.chat's arguments; returns conversation -> (rendered text, token ids)."""
        if content_format not in chat_prompt.CONTENT_FORMATS:
            raise ValueError(f"chat_template_content_format must be one of {', '.join(chat_prompt.CONTENT_FORMATS)}, "
                             f"got {content_format!r}")
        for name, value in (("add_generation_prompt", add_generation_prompt), ("continue_final_message", continue_final_message)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        if chat_template is not None and not isinstance(chat_template, str):
            raise TypeError(f"chat_template must be a Jinja template (a str) or None, got {type(chat_template).__name__}")
        if self.tokenizer is None:
            raise ValueError("messages: this checkpoint has no tokenizer to render a chat: pass token ids to generate")
        variables = dict(chat_prompt.check_template_kwargs(chat_template_kwargs, _CHAT_ARGUMENTS, "an argument of LLM.chat"))
        if tools is not None:
            chat_prompt.check_tools(tools)
            variables["tools"] = tools
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message=True needs add_generation_prompt=False")

        def render(conversation: Any) -> tuple[str, list[int]]:
            chat_prompt.check_message_types(conversation)
            chat_prompt.check_messages(conversation, add_generation_prompt, continue_final_message)
            return chat_prompt.render(self.tokenizer, chat_prompt.template_turns(conversation),
                                      add_generation_prompt=add_generation_prompt,
                                      continue_final_message=continue_final_message, variables=variables,
                                      chat_template=chat_template, content_form=content_format)

        return render

    def _generate(self, prompts: list[tuple[str | None, list[int]]], params: list[SamplingParams],
                  use_tqdm: bool | Callable[..., Any]) -> list[LLMOutput]:
        """prompts: (text or None, token ids) each. Runs them to completion, each with its params."""
        max_n = self.engine.config.scheduler.max_n
        for p in params:
            if p.n > max_n:
                raise ValueError(f"sampling_params: n is {p.n}; this LLM samples at most {max_n} per prompt (max_n)")
        self._compile_grammars(params)
        owners = [f"llm-{next(self._ids)}" for _ in prompts]
        # sample i of a prompt is engine request <owner>-<i>, as the server names choice i of a request
        pending = deque((f"{owner}-{i}", ids, self._within_context(p, len(ids)).for_choice(i), owner)
                        for owner, (_, ids), p in zip(owners, prompts, params) for i in range(p.n))
        # one call steps the engine at a time: a call collects only its own outputs, so two stepping at
        # once took each other's (one never returned) and raced on the scheduler's state
        with self._lock:
            if not self._finalizer.alive:
                raise RuntimeError("this LLM is shut down: create a new LLM to generate")
            with progress(use_tqdm, len(prompts)) as bar:
                finished = self._run(pending, PromptsDone({o: p.n for o, p in zip(owners, params)}, bar))
        return [LLMOutput(request_id=owner, prompt=text, prompt_token_ids=ids,
                          outputs=[completion(i, finished[f"{owner}-{i}"], self.tokenizer) for i in range(p.n)],
                          sequences=[finished[f"{owner}-{i}"] for i in range(p.n)],
                          prompt_logprobs=prompt_logprobs(ids, finished[f"{owner}-0"].prompt_logprobs, self.tokenizer))
                for owner, (text, ids), p in zip(owners, prompts, params)]

    def _within_context(self, params: SamplingParams, prompt_len: int) -> SamplingParams:
        """vLLM's LLM: max_tokens past the end of the context generates up to its end (finish_reason
        "length"), where the server refuses the request (a client's mistake it should hear of)."""
        room = self.engine.max_model_len - prompt_len
        if params.max_tokens is not None and 0 < room < params.max_tokens:
            return dataclasses.replace(params, max_tokens=None)  # the engine's "the rest of the context"
        return params

    def _compile_grammars(self, params: list[SamplingParams]) -> None:
        """Compiles the call's distinct grammars COMPILE_THREADS at a time (xgrammar releases the GIL), as
        the server compiles its requests' grammars, before any prompt is submitted: add_request then
        finds each in xgrammar's cache instead of compiling them one after another. A grammar that
        cannot be compiled raises (RequestError naming structured_outputs) with nothing queued."""
        distinct = {}
        for p in params:
            spec = p.structured_outputs
            if spec is not None:
                distinct.setdefault((spec.kind, spec.spec, spec.disable_any_whitespace), p)
        if len(distinct) < 2:
            return  # add_request compiles a single one
        with ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="grammar") as pool:
            for done in [pool.submit(self.engine.compile_grammar, p) for p in distinct.values()]:
                done.result()

    def _run(self, pending: deque, done: PromptsDone) -> dict[str, RequestOutput]:
        """Every engine request of `pending` run to its final output, by request id."""
        order: dict[str, None] = {}  # submitted
        finished: dict[str, RequestOutput] = {}
        try:
            while pending or len(finished) < len(order):
                self._submit(pending, order, len(order) - len(finished))
                for out in self.engine.step():
                    if out.finished and out.request_id in order:
                        finished[out.request_id] = out
                        done.finished(out.request_id)
            return finished
        except BaseException:
            # a refused prompt, Ctrl-C, an engine error: nothing of this call may keep running
            for request_id in order:
                try:
                    self.engine.abort_request(request_id)
                except Exception:  # bookkeeping interrupted mid-update: keep aborting, keep the cause
                    log.exception("could not abort %s", request_id)
            raise

    def _submit(self, pending: deque, order: dict[str, None], running: int) -> None:
        """Moves prompts from `pending` into the engine while its waiting queue has room: a call may hold
        more prompts than --max-queued-requests (a server's bound on its clients), as vLLM's does."""
        while pending:
            request_id, ids, p, owner = pending[0]
            try:
                self.engine.add_request(request_id, ids, p, owner=owner)
            except QueueFullError:
                if running == 0:  # nothing of ours to wait for: the queue is full of what we do not own
                    raise
                return
            pending.popleft()
            order[request_id] = None
            running += 1

    @staticmethod
    def _prompt_text(prompt: Any) -> str | None:
        """vLLM's RequestOutput.prompt: the prompt's text, None for token ids."""
        if isinstance(prompt, dict):
            prompt = prompt.get("prompt")
        return prompt if isinstance(prompt, str) else None

    def _token_ids(self, prompt: Any) -> list[int]:
        """One prompt (a str, token ids, or vLLM's {"prompt": ...} / {"prompt_token_ids": ...}) as token ids."""
        if isinstance(prompt, dict):
            if len(prompt) != 1 or not ({"prompt", "prompt_token_ids"} & set(prompt)):
                raise ValueError(f"prompts: a dict prompt holds one key, 'prompt' (text) or 'prompt_token_ids', "
                                 f"got keys {sorted(map(str, prompt))}")
            if "prompt" in prompt:
                prompt = prompt["prompt"]
                if not isinstance(prompt, str):
                    raise TypeError(f"prompts: 'prompt' is text, got {type(prompt).__name__}")
            else:
                prompt = prompt["prompt_token_ids"]
                prompt = prompt.tolist() if hasattr(prompt, "tolist") else prompt
                if isinstance(prompt, str):
                    raise TypeError("prompts: 'prompt_token_ids' is a list of token ids, got a str (text goes in 'prompt')")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("prompts: this checkpoint has no tokenizer: pass prompts as lists of token ids")
            return self.tokenizer.encode(prompt)
        if not isinstance(prompt, (list, tuple)):
            raise TypeError(f"prompts: a prompt is a str, a list of token ids or a dict, got {type(prompt).__name__}")
        try:
            if any(isinstance(t, bool) for t in prompt):
                raise TypeError
            return [operator.index(t) for t in prompt]  # numpy and torch integers too, never 1.5
        except TypeError:
            raise TypeError(f"prompts: token ids must be integers, got {reprlib.repr(list(prompt))}") from None

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's: what generate / chat sample with when given no SamplingParams: SamplingParams() with
        the sampling fields the checkpoint's generation_config.json sets (temperature, top_p, top_k, min_p,
        the penalties, max_new_tokens as max_tokens)."""
        if self._defaults is None:
            self._defaults = generation_defaults(self.engine.config.model.model)
        return SamplingParams(**self._defaults)

    def get_tokenizer(self) -> Any:
        """vLLM's: the checkpoint's tokenizer (transformers'), None for a checkpoint without one."""
        return self.tokenizer

    def shutdown(self) -> None:
        with self._lock:  # after a generate running in another thread
            self._finalizer()  # runs EngineCore.shutdown once, however often this is called

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _prompt_list(prompts: Any) -> list[Any]:
    """The prompts of one call as a list: one prompt (a str, token ids, a dict) becomes a list of one."""
    if hasattr(prompts, "tolist"):  # a numpy array or tensor of token ids: 1-D one prompt, 2-D several
        prompts = prompts.tolist()
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if not isinstance(prompts, Iterable) or isinstance(prompts, (bytes, bytearray)):
        raise TypeError(f"prompts must be a str, a list of token ids, a dict or a list of these, "
                        f"got {type(prompts).__name__}")
    prompts = list(prompts)  # a generator too, read once
    if prompts and all(isinstance(p, numbers.Number) for p in prompts):
        return [prompts]  # one prompt of token ids (checked to be integers with the others)
    return prompts


def _conversations(messages: Any) -> list[Any]:
    """LLM.chat's messages as a list of conversations: one conversation (a list of dicts) becomes a list of one."""
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence) or not messages:
        raise TypeError(f"messages must be a conversation (a non-empty list of {{'role', 'content'}} dicts) or a list "
                        f"of conversations, got {reprlib.repr(messages)}")
    if all(isinstance(m, dict) for m in messages):
        return [list(messages)]
    if all(isinstance(c, Sequence) and not isinstance(c, (str, bytes)) for c in messages):
        return [list(c) for c in messages]
    raise TypeError(f"messages must be a list of message dicts or a list of conversations (lists of dicts), not a mix: "
                    f"got {reprlib.repr(messages)}")


def _params_list(params: Any, num_prompts: int) -> list[SamplingParams]:
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if not isinstance(params, Sequence) or isinstance(params, str):
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")
    if len(params) != num_prompts:
        raise ValueError(f"got {num_prompts} prompts but {len(params)} sampling_params: pass one, or one per prompt")
    for p in params:
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params must hold SamplingParams, got a {type(p).__name__}")
    return list(params)


LLM.__doc__ = LLM.__doc__.rstrip() + "\n" + describe(ENGINE_FLAGS) + "\n"
