"""Structured outputs' grammars: a StructuredOutputsParams compiled by xgrammar for one vocabulary.

xgrammar is an optional dependency (`pip install 'moeserve[structured]'`); without it a constrained
request is refused with a 400 that says so, and everything else runs. A compiler is made once per
(checkpoint, vocabulary size) and process and shared: the engine core compiles each request on
admission (so whatever xgrammar cannot compile is a 400 naming the reason, never a failure inside a
step), and the sampler in the same process finds it in xgrammar's cache. JSON schemas are checked for
keywords xgrammar would not enforce first (engine/json_schema_check.py).
"""
from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from moeserve.engine.json_schema_check import UnsupportedSchema, check_json_schema
from moeserve.sampling_params import StructuredOutputsParams

XGRAMMAR_MISSING = ("structured outputs (response_format json_object / json_schema, structured_outputs, tool_choice "
                    "'required' or a named tool) need xgrammar, which is not installed on this server: "
                    "pip install 'moeserve[structured]'")
# a JSON object and nothing else, for response_format json_object (xgrammar's built-in grammar is any JSON value)
_ANY_OBJECT = '{"type": "object"}'
# xgrammar's errors start with "[HH:MM:SS] /path/file.cc:LINE: "; the rest is the reason
_ERROR_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


class GrammarError(ValueError):
    """The constraint cannot be compiled (or xgrammar is missing); the message says why."""


def import_xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        raise GrammarError(XGRAMMAR_MISSING) from None
    return xgrammar


def clean_error(e: Exception) -> str:
    """xgrammar's message without its time stamp and source location, on one line."""
    text = " ".join(_ERROR_PREFIX.sub("", line.strip()) for line in str(e).strip().splitlines() if line.strip())
    return text[:300] or type(e).__name__


class GrammarCompiler:
    """Compiles StructuredOutputsParams for one tokenizer and vocabulary (the model's logits width,
    which may exceed the tokenizer's size). xgrammar caches compiled grammars by their text."""

    def __init__(self, tokenizer: Any, vocab_size: int, max_threads: int = 4):
        self.xgr = import_xgrammar()
        info = self.xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.vocab_size = vocab_size
        self._compiler = self.xgr.GrammarCompiler(info, max_threads=max_threads, cache_enabled=True,
                                                  cache_limit_bytes=256 * 2**20)

    def compile(self, spec: StructuredOutputsParams) -> Any:
        """The xgrammar CompiledGrammar of `spec`; GrammarError says what could not be compiled."""
        kind = spec.kind
        try:
            if kind == "json":
                check_json_schema(json.loads(spec.json))
                return self._compiler.compile_json_schema(spec.json, any_whitespace=not spec.disable_any_whitespace)
            if kind == "json_object":
                return self._compiler.compile_json_schema(_ANY_OBJECT, any_whitespace=not spec.disable_any_whitespace)
            if kind == "regex":
                return self._compiler.compile_regex(spec.regex)
            if kind == "choice":
                return self._compiler.compile_grammar(choice_grammar(spec.choice))
            return self._compiler.compile_grammar(spec.grammar)
        except UnsupportedSchema as e:
            raise GrammarError(f"the JSON schema cannot be enforced: {e}") from None
        except (RuntimeError, ValueError, TypeError) as e:  # xgrammar raises RuntimeError with the parser's reason
            raise GrammarError(f"the {_WHAT[kind]} could not be compiled: {clean_error(e)}") from None


_WHAT = {"json": "JSON schema", "json_object": "JSON object grammar", "regex": "regex", "choice": "choice",
         "grammar": "grammar"}


def choice_grammar(choices: list[str]) -> str:
    """EBNF for exactly one of `choices` (JSON string escapes, which xgrammar's EBNF reads)."""
    # ensure_ascii=False: xgrammar reads a \uXXXX escape as one code point, so the surrogate pair json.dumps
    # writes for a character beyond the BMP (an emoji) became two invalid 3-byte sequences; literal UTF-8 is exact
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


_COMPILERS: dict[tuple[str, int], GrammarCompiler] = {}
_LOCK = threading.Lock()
# grammars compiled at once off the step loop, by the server's engine loop and by a sampling rank in
# another process (xgrammar uses threads of its own within one compile)
COMPILE_THREADS = 2


def shared_compiler(model_dir: str, vocab_size: int, tokenizer: Any = None) -> GrammarCompiler:
    """This process's compiler for the checkpoint at `model_dir` (made on first use; the tokenizer is
    read from the checkpoint unless given). Raises GrammarError without xgrammar or a tokenizer."""
    key = (str(Path(model_dir)), vocab_size)
    with _LOCK:
        compiler = _COMPILERS.get(key)
        if compiler is None:
            import_xgrammar()
            if tokenizer is None:
                tokenizer = _load_tokenizer(str(model_dir))
            compiler = _COMPILERS[key] = GrammarCompiler(tokenizer, vocab_size)
        return compiler


def _load_tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as e:
        raise GrammarError(f"structured outputs need the checkpoint's tokenizer: {e}") from None
