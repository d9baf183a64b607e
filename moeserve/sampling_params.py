"""Per-request sampling parameters: plain data, validated once when a request is admitted."""
from __future__ import annotations

import copy
import dataclasses
import json as jsonlib
import math
from dataclasses import dataclass, field
from typing import Any

MAX_STOP_STRINGS = 16
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for a logit_bias value: [-100, 100]
# entries of one logit_bias: each costs Python work per choice in the front end, per sub-request in the
# engine and per row in every decode step; a whole vocabulary (130k entries, a 1.7 MB body) held the
# server's event loop for seconds per choice. +100 on a few ids steers to them, -100 bans a few.
MAX_LOGIT_BIAS_ENTRIES = 1024
# token sequences of one request's bad_words (each word tokenized with and without a leading space):
# vLLM's bound (VLLM_MAX_NUM_BAD_WORDS); each is compared with the output's tail at every step
MAX_BAD_WORD_SEQUENCES = 128
# allowed_token_ids of one request: above the largest vocabularies served (Gemma's 262,144); every
# choice carries the list to the engine, so its length is multiplied by n
MAX_ALLOWED_TOKEN_IDS = 262_144
MAX_N = 128  # choices one request may ask for (`n`)


class SamplingParamsError(ValueError):
    """A sampling parameter is out of range; `param` names the offending field (OpenAI error shape)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass
class StructuredOutputsParams:
    """What constrains a request's output to a shape (vLLM's `StructuredOutputsParams`): exactly one of

    json: a JSON schema (a dict, or its JSON text; kept as text, so any number survives the wire);
    json_object: any JSON object;
    regex: a regular expression the whole output matches;
    choice: the output is one of these strings;
    grammar: an EBNF grammar (xgrammar's dialect, rule `root` first).

    disable_any_whitespace (default True here, vLLM's default is False): generated JSON has no free
    whitespace between tokens, so a small model cannot fill its budget with newlines.
    The constraint applies to the answer, not to reasoning (engine/grammar_book.py), through fields
    the server fills from its reasoning parser: `in_reasoning` the output starts inside reasoning;
    `reasoning_end` token sequences that end it; `reasoning_start` a token the model may begin its
    output with to open reasoning (allowed beside the grammar's first tokens).
    """

    json: str | dict | bool | None = None
    json_object: bool = False
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    disable_any_whitespace: bool = True
    in_reasoning: bool = False
    reasoning_end: list[list[int]] = field(default_factory=list)
    reasoning_start: int | None = None

    def __post_init__(self) -> None:
        if self.json is not None and not isinstance(self.json, str):
            self.json = jsonlib.dumps(self.json, ensure_ascii=False)
        if isinstance(self.choice, tuple):  # a str is not a list of choices: list("ab") made "a" and "b" the choices
            self.choice = list(self.choice)
        self.reasoning_end = [list(seq) for seq in self.reasoning_end or []]
        self.validate()

    @property
    def kind(self) -> str:
        """json, json_object, regex, choice or grammar."""
        return next(k for k in _STRUCTURED_KINDS if getattr(self, k) not in (None, False))

    @property
    def spec(self) -> str:
        """The constraint as one string (the grammar cache's key, with `kind` and the whitespace rule)."""
        value = getattr(self, self.kind)
        return jsonlib.dumps(value) if self.kind == "choice" else "" if self.kind == "json_object" else value

    def validate(self) -> None:
        def bad(msg: str) -> None:
            raise SamplingParamsError(msg, "structured_outputs")

        given = [k for k in _STRUCTURED_KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            bad(f"structured_outputs takes exactly one of {', '.join(_STRUCTURED_KINDS)}; got "
                f"{', '.join(given) if given else 'none'}")
        if self.json is not None:
            try:
                schema = jsonlib.loads(self.json)
            except ValueError:
                bad("structured_outputs.json must be a JSON schema (an object), given as an object or JSON text")
            if not isinstance(schema, (dict, bool)):
                bad("structured_outputs.json must be a JSON schema: an object (or true / false)")
        if self.json_object is not False and self.json_object is not True:
            bad("structured_outputs.json_object must be true or false")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                bad(f"structured_outputs.{name} must be a non-empty string")
        if self.choice is not None and (not isinstance(self.choice, list) or not self.choice
                                        or any(not isinstance(c, str) or not c for c in self.choice)):
            bad("structured_outputs.choice must be a non-empty list of non-empty strings")
        if any(not seq or any(not isinstance(t, int) or t < 0 for t in seq) for seq in self.reasoning_end):
            bad("reasoning_end must hold non-empty lists of token ids")
        if self.in_reasoning and not self.reasoning_end:
            bad("in_reasoning needs reasoning_end: a reasoning that never ends would never be constrained")


_STRUCTURED_KINDS = ("json", "json_object", "regex", "choice", "grammar")


@dataclass
class SamplingParams:
    """How to pick tokens for one request.

    temperature == 0 means greedy. top_k <= 0, top_p == 1 and min_p == 0 disable those filters;
    min_p keeps tokens whose probability is at least min_p times the most likely token's (vLLM's).
    presence/frequency penalties follow OpenAI semantics and apply to generated tokens only;
    repetition_penalty follows Hugging Face and vLLM: every token seen in the prompt or the output
    so far has its logit divided by it when positive, multiplied by it when negative (> 1 discourages
    repeats).
    min_tokens: the end-of-sequence and stop_token_ids are masked, and stop strings are not looked
    for, until this many tokens have been generated (vLLM's semantics).
    logprobs: None for none, else how many top alternatives to return per token (0 = only the chosen one,
    -1 = the whole vocabulary); the engine refuses more than its max_logprobs (--max-logprobs, default 20).
    prompt_logprobs: None for none, else the same for every prompt token after the first (vLLM's name
    and semantics): the logprob of the token given the ones before it, from the raw model distribution
    (no penalties, no temperature). A request that asks computes its whole prompt (no prefix-cache hits).
    detokenize: False returns token ids only (text stays ""), as vLLM's flag of that name; stop
    strings need text, so they are refused without it.
    structured_outputs: constrains the output to a JSON schema, a regex, a choice or a grammar
    (StructuredOutputsParams, or a dict of its fields); the engine compiles it on admission and
    refuses what xgrammar cannot enforce. A constrained request ends when its grammar is complete (at
    an end-of-sequence token, even under ignore_eos or min_tokens).
    logit_bias: token id -> a value in [-100, 100] added to that token's logit before sampling
    (OpenAI semantics: -100 in effect bans the token, +100 in effect forces it). It applies with
    the penalties, so logprobs see it too; the engine checks the ids against the vocabulary.
    allowed_token_ids: None, or the only token ids the request may produce (vLLM's): every other
    token's logit is -inf after logit_bias, so logprobs see the restricted distribution too. It
    cannot be combined with structured_outputs (the two masks could leave no token).
    bad_words: words the output must not contain (vLLM's): the engine tokenizes each as it starts a text
    and after a space (`bad_words_token_ids`), and the sampler bans a sequence's last token whenever the
    output so far ends with the tokens before it (a one-token word is banned everywhere). Like vLLM's,
    it bans these tokenizations only: the same text spelled with other tokens passes.
    """

    n: int = 1
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    detokenize: bool = True
    logit_bias: dict[int, float] | None = None
    repetition_penalty: float = 1.0
    min_p: float = 0.0
    min_tokens: int = 0
    structured_outputs: StructuredOutputsParams | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = field(default_factory=list)
    # set by the engine from bad_words and its tokenizer, not by callers
    bad_words_token_ids: list[list[int]] = field(default_factory=list)
    # set by the engine from the checkpoint (generation_config / tokenizer), not by callers: the ids
    # that end a request unless ignore_eos; min_tokens masks them
    eos_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.logit_bias = _bias_dict(self.logit_bias)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        for name in ("stop", "stop_token_ids"):  # list(5) is a TypeError that names nothing; list("12") is ["1", "2"]
            value = getattr(self, name)
            if value is not None and not isinstance(value, (list, tuple)):
                what = "a string or a list of strings" if name == "stop" else "a list of token ids"
                raise SamplingParamsError(f"{name} must be {what}, got {value!r}", name)
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.eos_token_ids = list(self.eos_token_ids or [])
        if self.bad_words is not None and not isinstance(self.bad_words, (list, tuple)):  # list("ab") is two words
            raise SamplingParamsError(f"bad_words must be a list of strings, got {self.bad_words!r}", "bad_words")
        self.bad_words = list(self.bad_words or [])
        self.bad_words_token_ids = [list(seq) for seq in self.bad_words_token_ids or []]
        if isinstance(self.allowed_token_ids, tuple):
            self.allowed_token_ids = list(self.allowed_token_ids)
        if isinstance(self.structured_outputs, dict):
            try:
                self.structured_outputs = StructuredOutputsParams(**self.structured_outputs)
            except TypeError as e:
                raise SamplingParamsError(f"structured_outputs: {e}", "structured_outputs") from None
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def for_choice(self, index: int) -> "SamplingParams":
        """The engine request of sample `index` of these params: n=1 and, with a seed, `engine_seed(seed,
        index)`. The HTTP server's choice i and LLM.generate's sample i both run with these, so the same
        seed gives the same n samples through either API. A copy, not `dataclasses.replace`: n=1 and
        the engine seed are valid by construction, and validating again walked a long
        allowed_token_ids once more for every choice."""
        choice = copy.copy(self)
        choice.n, choice.seed = 1, None if self.seed is None else engine_seed(self.seed, index)
        return choice

    def validate(self) -> None:
        def bad(param: str, msg: str) -> None:
            raise SamplingParamsError(msg, param)

        # Python callers' types first: a str or None compared with a bound raised a TypeError naming no
        # field, and a truthy "no" or 1 passed as a flag; bool is an int to Python, never a count here
        for name in _NUMBER_FIELDS:
            value = getattr(self, name)
            if not _is_number(value):
                bad(name, f"{name} must be a number, got {value!r}")
        for name in _FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):
                bad(name, f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in _INT_FIELDS:
            if isinstance(getattr(self, name), bool):
                bad(name, f"{name} must be an integer, got {getattr(self, name)!r}")
        if not (isinstance(self.n, int) and 1 <= self.n <= MAX_N):
            bad("n", f"n must be an integer in [1, {MAX_N}], got {self.n!r}")
        if self.max_tokens is not None and not (isinstance(self.max_tokens, int) and self.max_tokens >= 1):
            bad("max_tokens", f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not (0.0 <= self.temperature <= 2.0):
            bad("temperature", f"temperature must be in [0, 2], got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            bad("top_p", f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            bad("top_k", f"top_k must be -1 (disabled) or a positive integer, got {self.top_k!r}")
        for name in ("logprobs", "prompt_logprobs"):  # the upper bound is the engine's (--max-logprobs)
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value >= -1):
                bad(name, f"{name} must be an integer >= 0, or -1 for the whole vocabulary, got {value!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not (-2.0 <= getattr(self, name) <= 2.0):
                bad(name, f"{name} must be in [-2, 2], got {getattr(self, name)!r}")
        if not (isinstance(self.repetition_penalty, (int, float)) and math.isfinite(self.repetition_penalty)
                and 0.0 < self.repetition_penalty <= 100.0):
            bad("repetition_penalty", f"repetition_penalty must be in (0, 100], got {self.repetition_penalty!r}")
        if not (isinstance(self.min_p, (int, float)) and 0.0 <= self.min_p <= 1.0):
            bad("min_p", f"min_p must be in [0, 1], got {self.min_p!r}")
        if not (isinstance(self.min_tokens, int) and self.min_tokens >= 0):
            bad("min_tokens", f"min_tokens must be an integer >= 0, got {self.min_tokens!r}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            bad("min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if any(not isinstance(s, str) for s in self.stop):
            bad("stop", "stop must be a string or a list of strings")
        if "" in self.stop:
            bad("stop", "stop cannot contain an empty string")
        if len(self.stop) > MAX_STOP_STRINGS:  # each is matched against every new token's text
            bad("stop", f"stop takes at most {MAX_STOP_STRINGS} strings, got {len(self.stop)}")
        if self.stop and not self.detokenize:
            bad("stop", "stop strings need detokenize=True")
        if any(not isinstance(t, int) or isinstance(t, bool) or t < 0 for t in self.stop_token_ids):
            bad("stop_token_ids", "stop_token_ids must be non-negative integers")
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            bad("structured_outputs", "structured_outputs must be a StructuredOutputsParams (or a dict of its fields)")
        if self.seed is not None and not (isinstance(self.seed, int) and -(2**63) <= self.seed < 2**64):
            # what a torch generator takes (and the server's API): a signed or unsigned 64-bit seed
            bad("seed", f"seed must be an integer in [-2**63, 2**64 - 1], got {self.seed!r}")
        if self.allowed_token_ids is not None:
            ids = self.allowed_token_ids
            if not isinstance(ids, list) or not ids:
                bad("allowed_token_ids", "allowed_token_ids must be a non-empty list of token ids (None allows every token)")
            if len(ids) > MAX_ALLOWED_TOKEN_IDS:
                bad("allowed_token_ids", f"allowed_token_ids takes at most {MAX_ALLOWED_TOKEN_IDS} ids, got {len(ids)}")
            # builtins' C loops: a list may hold the whole vocabulary, and each choice validates it again
            if set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= 2**63:
                bad("allowed_token_ids", "allowed_token_ids must hold non-negative vocabulary ids")
            if self.structured_outputs is not None:
                bad("allowed_token_ids", "allowed_token_ids cannot be combined with a structured output: the grammar "
                                         "and the list could leave no token to sample")
        if any(not isinstance(w, str) or not w.strip() for w in self.bad_words):
            bad("bad_words", "bad_words must be a list of non-empty strings")
        if len(self.bad_words) > MAX_BAD_WORD_SEQUENCES:
            bad("bad_words", f"bad_words takes at most {MAX_BAD_WORD_SEQUENCES} words, got {len(self.bad_words)}")
        if self.logit_bias and len(self.logit_bias) > MAX_LOGIT_BIAS_ENTRIES:
            bad("logit_bias", f"logit_bias takes at most {MAX_LOGIT_BIAS_ENTRIES} token ids, got {len(self.logit_bias)}")
        for token, value in (self.logit_bias or {}).items():
            if not 0 <= token < 2**63:  # the wire (msgpack) and torch hold 64-bit signed ids
                bad("logit_bias", f"logit_bias token ids must be non-negative vocabulary ids, got {token}")
            if not (math.isfinite(value) and -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS):
                bad("logit_bias", f"logit_bias values must be in [-100, 100], got {value!r} for token {token}")


ENGINE_SEEDS = 2**63  # the engine takes seeds in [0, 2^63): a signed 64-bit int on every wire and tensor


def engine_seed(seed: int, index: int) -> int:
    """The engine's seed for choice `index` of a request seeded with `seed`, which the APIs take in
    [-2^63, 2^64): signed and unsigned 64-bit seeds, as clients draw them. (seed + index) mod 2^63:
    deterministic and distinct for the choices of one request; seeds 2^63 apart sample alike, so a
    negative seed samples as its unsigned two's complement does (-1 as 2^64 - 1)."""
    return (seed + index) % ENGINE_SEEDS


_NUMBER_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")
_FLAG_FIELDS = ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "detokenize")
_INT_FIELDS = ("n", "max_tokens", "top_k", "seed", "logprobs", "prompt_logprobs", "min_tokens")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bias_dict(bias: Any) -> dict[int, float] | None:
    """{id: value} from a dict (int or decimal-string keys, as JSON has them) or [id, value] pairs
    (the wire form); None or empty -> None."""
    if not bias:
        return None
    if len(bias) > MAX_LOGIT_BIAS_ENTRIES:  # before any entry is read
        raise SamplingParamsError(f"logit_bias takes at most {MAX_LOGIT_BIAS_ENTRIES} token ids, got {len(bias)}",
                                  "logit_bias")
    pairs = bias.items() if isinstance(bias, dict) else bias
    out: dict[int, float] = {}
    try:
        for token, value in pairs:
            if isinstance(token, bool) or isinstance(value, bool):
                raise TypeError
            if isinstance(token, str) and not (token.isascii() and token.isdigit() and str(int(token)) == token):
                raise ValueError  # "05", "+5", " 5", "1_0": int() takes them, OpenAI's keys are plain ids
            out[int(token)] = float(value)
    except (TypeError, ValueError):
        raise SamplingParamsError("logit_bias must map token ids (integers) to numbers", "logit_bias") from None
    return out


def params_to_plain(params: SamplingParams) -> dict[str, Any]:
    """The fields as msgpack-safe plain data (logit_bias as [id, value] pairs: msgpack maps need
    string keys); SamplingParams(**plain) is the inverse."""
    # the fields as they are, not dataclasses.asdict, which copies every list item by item: a
    # whole-vocabulary allowed_token_ids took 350 ms a choice (its lists are shared, never mutated)
    d = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    if params.structured_outputs is not None:
        d["structured_outputs"] = dataclasses.asdict(params.structured_outputs)
    if d["logit_bias"]:
        d["logit_bias"] = [[k, v] for k, v in d["logit_bias"].items()]
    return d
