"""Structured outputs below the server: the schema keyword check, compiling (and its errors), the
bitmask the sampler applies, and the matchers beside the sampler, with the built-in tokenizer."""
from __future__ import annotations

import enum
import json
import sys
from typing import Literal

import pytest
import torch

from moeserve.core.step_plan import NewRequest
from moeserve.engine import grammar
from moeserve.engine.builtin_model import VOCAB_SIZE, build_tokenizer, builtin_model_dir
from moeserve.engine.grammar import GrammarError, shared_compiler
from moeserve.engine.grammar_book import GrammarBook, bitmask_words
from moeserve.engine.json_schema_check import FORMATS, UnsupportedSchema, check_json_schema
from moeserve.engine.sampler import Sampler, apply_token_bitmask
from moeserve.sampling_params import SamplingParams, SamplingParamsError, StructuredOutputsParams

pytest.importorskip("xgrammar")
MODEL_DIR = str(builtin_model_dir())
EOS = [0, 2]  # <|endoftext|>, <|im_end|>


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def compiler():
    return shared_compiler(MODEL_DIR, VOCAB_SIZE)


def allowed(mask_row: torch.Tensor) -> set[int]:
    bits = ((mask_row.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).flatten()
    return set(bits.nonzero().flatten().tolist())


# ---- what a schema may say ----------------------------------------------------------------------------
ENFORCED = [  # (keyword's schema, the same without it): xgrammar's grammar must differ
    ({"type": "integer", "minimum": 3, "maximum": 9}, {"type": "integer"}),
    ({"type": "integer", "exclusiveMinimum": 3}, {"type": "integer"}),
    ({"type": "integer", "multipleOf": 3}, {"type": "integer"}),
    ({"type": "string", "minLength": 2, "maxLength": 4}, {"type": "string"}),
    ({"type": "string", "pattern": "^a+$"}, {"type": "string"}),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, {"type": "array", "items": {"type": "integer"}}),
    ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2},
     {"type": "object", "additionalProperties": {"type": "integer"}}),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, {"type": "object"}),
    ({"type": "object", "patternProperties": {"^a": {"type": "integer"}}}, {"type": "object"}),
    ({"enum": ["x", "y"]}, {}),
    ({"const": 5}, {}),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": False}, {"type": "array"}),
] + [({"type": "string", "format": f}, {"type": "string"}) for f in sorted(FORMATS)]


@pytest.mark.parametrize("with_kw,without", ENFORCED, ids=lambda s: json.dumps(s)[:50])
def test_every_allowed_keyword_constrains(with_kw, without):
    import xgrammar as xgr

    check_json_schema(with_kw)
    assert str(xgr.Grammar.from_json_schema(json.dumps(with_kw))) != str(xgr.Grammar.from_json_schema(json.dumps(without)))


@pytest.mark.parametrize("schema,named", [
    ({"not": {"type": "string"}}, "not"),
    ({"type": "object", "properties": {"a": {"if": {"type": "string"}}}}, "#/properties/a"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf"),
    ({"type": "string", "format": "iri"}, "iri"),
    ({"allOf": [{"type": "integer"}, {"minimum": 3}]}, "allOf"),
    ({"$defs": {"x": {"dependentRequired": {"a": ["b"]}}}}, "#/$defs/x"),
    ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties"),
    ({"properties": []}, "properties"),
    # keywords xgrammar knows but drops where they meet another (its grammar is that of the other alone)
    ({"type": "object", "properties": {"a": {"$ref": "http://example.com/a.json"}}}, "http://example.com"),
    ({"$ref": "#anchor"}, "#anchor"),
    ({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 3}, "maxLength"),
    ({"type": "string", "enum": ["aaaa", "bb"], "maxLength": 3}, "maxLength"),
    ({"type": "integer", "const": "a"}, "'type'"),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}], "maxLength": 2}, "maxLength"),
    ({"allOf": [{"type": "string"}], "maxLength": 2}, "maxLength"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "maxLength"),
    ({"type": "string", "format": "email", "pattern": "^a"}, "pattern"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}, "'b'"),
    ({"maxLength": 2}, "maxLength"),
    ({"type": "array", "items": {"minimum": 3}}, "minimum"),
    ({"minItems": 2}, "minItems"),
])
def test_keywords_a_grammar_would_ignore_are_refused(schema, named):
    with pytest.raises(UnsupportedSchema, match=named.replace("$", r"\$")):
        check_json_schema(schema)


def test_pydantic_schemas_pass():
    from pydantic import BaseModel, Field

    class Item(BaseModel):
        """An item."""
        sku: str = Field(pattern=r"^[A-Z]{3}$", description="stock keeping unit")
        count: int = Field(ge=1, le=9, default=1)

    class Color(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Order(BaseModel):
        items: list[Item] = Field(min_length=1, max_length=3)
        note: str | None = None
        color: Color = Field(default=Color.RED, description="the order's color")
        kind: Literal["retail", "wholesale"] = "retail"
        rush: Literal[True] = True

    check_json_schema(Order.model_json_schema())
    # keywords beside a `type` that names their kind, and type-specific ones xgrammar reads the kind of
    for schema in ({"type": ["string", "null"], "maxLength": 2}, {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                   {"items": {"type": "integer"}, "maxItems": 2}, {"enum": [1, 2], "type": "integer"}, {"$ref": "#"},
                   {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^b": True}}):
        check_json_schema(schema)


# ---- compiling ------------------------------------------------------------------------------------------
def test_compile_errors_say_why(compiler):
    for spec, words in [({"regex": "(a"}, "regex could not be compiled: Regex parsing error at position 3"),
                        ({"grammar": "root ::= foo"}, 'grammar could not be compiled: EBNF parser error at line 1, column 10: Rule "foo"'),
                        ({"json": {"type": "strin"}}, 'JSON schema could not be compiled: Unsupported type "strin"'),
                        ({"json": {"not": {}}}, "JSON schema cannot be enforced: the JSON schema keyword 'not' (at #)")]:
        with pytest.raises(GrammarError) as e:
            compiler.compile(StructuredOutputsParams(**spec))
        assert words in str(e.value) and "/project/" not in str(e.value)
    compiler.compile(StructuredOutputsParams(choice=['say "hi"', "back\\slash", "é"]))  # escapes


def test_params_check_their_shape():
    with pytest.raises(SamplingParamsError, match="exactly one"):
        StructuredOutputsParams(regex="a", choice=["b"])
    with pytest.raises(SamplingParamsError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(SamplingParamsError, match="choice"):
        StructuredOutputsParams(choice=[])
    with pytest.raises(SamplingParamsError, match="JSON schema"):
        StructuredOutputsParams(json="[1, 2]")
    big = StructuredOutputsParams(json={"type": "integer", "maximum": 10**30})  # kept as text: any number survives msgpack
    assert SamplingParams(**json.loads(json.dumps({"structured_outputs": big.__dict__}))).structured_outputs == big


def test_missing_xgrammar_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgrammar", None)
    monkeypatch.setattr(grammar, "_COMPILERS", {})
    with pytest.raises(GrammarError, match=r"pip install 'moeserve\[structured\]'"):
        shared_compiler(MODEL_DIR, VOCAB_SIZE)


# ---- the sampler's side ----------------------------------------------------------------------------------
def test_bitmask_applies_like_a_per_token_loop():
    g = torch.Generator().manual_seed(0)
    V = 70  # not a multiple of 32: the last word's high bits lie past the vocabulary
    logits = torch.randn(3, V, generator=g)
    mask = torch.randint(-2**31, 2**31 - 1, (3, bitmask_words(V)), dtype=torch.int32, generator=g)
    got = apply_token_bitmask(logits, mask)
    for r in range(3):
        for t in range(V):
            ok = (int(mask[r, t // 32]) >> (t % 32)) & 1
            assert got[r, t] == (logits[r, t] if ok else float("-inf"))


def test_sampler_keeps_to_the_mask_and_grammar_beats_min_tokens():
    sampler = Sampler(seed=0)
    eos = 5
    for rid, params in [("greedy", SamplingParams(temperature=0)), ("random", SamplingParams(temperature=1.5, top_k=50)),
                        ("min", SamplingParams(temperature=0, min_tokens=3, eos_token_ids=[eos]))]:
        sampler.add(NewRequest(rid, params))
    logits = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(3, 2, dtype=torch.int32)
    mask[0, 1] = 1 << 3  # only token 35
    mask[1, 0] = (1 << 7) | (1 << 9)
    mask[2, 0] = 1 << eos  # the grammar is complete: only the end is left, min_tokens or not
    for _ in range(20):
        out = sampler.sample(logits, ["greedy", "random", "min"], allowed=mask)
        assert out[0].token_id == 35 and out[1].token_id in (7, 9) and out[2].token_id == eos


def test_grammar_book_masks_follow_the_matcher(tok, compiler):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"],
              "additionalProperties": False}
    book = GrammarBook(MODEL_DIR, VOCAB_SIZE)
    book.add(NewRequest("j", SamplingParams(structured_outputs={"json": schema}, eos_token_ids=EOS)))
    book.add(NewRequest("free", SamplingParams()))
    assert book.bitmask(["free"]) is None
    for t in tok.encode('{"n": 7}'):
        mask = book.bitmask(["free", "j"])
        assert allowed(mask[0]) == set(range(VOCAB_SIZE)) and t in allowed(mask[1])
        book.accept_later(["free", "j"], torch.tensor([11, t]))  # as a device's tokens, taken at the next mask
    assert allowed(book.bitmask(["j"])[0]) == set(EOS)  # complete: only the end
    book.accept(["j"], [EOS[0]])
    assert allowed(book.bitmask(["j"])[0]) == set(EOS)  # terminated, if a step ran ahead
    with pytest.raises(RuntimeError, match="against its grammar"):
        book.add(NewRequest("k", SamplingParams(structured_outputs={"regex": "a+"}, eos_token_ids=EOS)))
        book.accept(["k"], [tok.convert_tokens_to_ids("}")])
    book.remove("j")
    assert len(book) == 1


def test_the_grammar_starts_after_the_reasoning(tok):
    end = tok.encode("</end>")  # several tokens: the gate matches sequences
    book = GrammarBook(MODEL_DIR, VOCAB_SIZE)
    spec = {"regex": "[0-9]+", "in_reasoning": True, "reasoning_end": [end]}
    book.add(NewRequest("r", SamplingParams(structured_outputs=spec, eos_token_ids=EOS)))
    free = tok.encode("some thoughts")
    for t in free + end[:-1]:
        assert book.bitmask(["r"]) is None
        book.accept(["r"], [t])
    book.accept(["r"], [end[-1]])
    digits = allowed(book.bitmask(["r"])[0])
    assert tok.encode("7")[0] in digits and tok.encode("a")[0] not in digits
    # the model may open its reasoning with its first token, or answer at once
    opener = tok.convert_tokens_to_ids("{")
    book.add(NewRequest("m", SamplingParams(structured_outputs={**spec, "in_reasoning": False, "reasoning_start": opener},
                                            eos_token_ids=EOS)))
    first = allowed(book.bitmask(["m"])[0])
    assert opener in first and tok.encode("7")[0] in first
    book.accept(["m"], [opener])
    assert book.bitmask(["m"]) is None  # reasoning now


def test_a_prepared_grammar_is_compiled_beside_the_steps_not_in_one(tok, monkeypatch):
    """A sampling rank in another process than the engine core compiles on a worker thread when the plan
    announces the grammar, reports it, and its matcher uses that compile: the step compiles nothing."""
    from moeserve.core.step_plan import GrammarCompile, GrammarDone

    book = GrammarBook(MODEL_DIR, VOCAB_SIZE)
    spec = StructuredOutputsParams(regex="[0-9]{2,4}")
    book.prepare([GrammarCompile("r", 1, spec), GrammarCompile("bad", 1, StructuredOutputsParams(regex="(")),
                  GrammarCompile("gone", 1, spec)])
    book.remove("gone")  # aborted while compiling: never reported
    done = []
    while book.compiling:
        done += book.take_compiled(wait_s=5)
    assert sorted(d.request_id for d in done) == ["bad", "r"] and GrammarDone("r") in done
    assert "regex could not be compiled" in next(d.error for d in done if d.request_id == "bad")

    def no_compile(*args):
        raise AssertionError("compiled inside a step")

    monkeypatch.setattr(grammar.GrammarCompiler, "compile", no_compile)
    book.add(NewRequest("r", SamplingParams(structured_outputs=spec, eos_token_ids=EOS)))
    plain = GrammarBook(MODEL_DIR, VOCAB_SIZE)
    plain.add(NewRequest("r", SamplingParams(structured_outputs=spec, eos_token_ids=EOS)))
    with pytest.raises(AssertionError, match="inside a step"):  # without prepare, the step compiles
        plain.bitmask(["r"])
    for t in tok.encode("42"):
        assert t in allowed(book.bitmask(["r"])[0])
        book.accept(["r"], [t])
    assert tok.encode("a")[0] not in allowed(book.bitmask(["r"])[0])


# ---- on a GPU (benchmarks/gpu_check.py runs these) -------------------------------------------------------
@pytest.mark.gpu
def test_bitmask_on_the_gpu_matches_the_host():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(5, 1000, generator=g)
    mask = torch.randint(-2**31, 2**31 - 1, (5, bitmask_words(1000)), dtype=torch.int32, generator=g)
    on_gpu = apply_token_bitmask(logits.cuda(), mask.pin_memory().cuda(non_blocking=True))
    assert torch.equal(on_gpu.cpu(), apply_token_bitmask(logits, mask))


@pytest.mark.gpu
def test_a_constrained_run_on_the_gpu_validates():
    """The worker's path on cuda: the host-filled mask goes to the device through pinned memory."""
    import jsonschema

    from moeserve import LLM

    schema = {"type": "object", "required": ["n", "w"], "additionalProperties": False,
              "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 99}, "w": {"type": "string", "maxLength": 12}}}
    llm = LLM(device="cuda", kernels="torch", dtype="float32")
    try:
        outs = llm.generate(["Once upon a time"] * 4, [SamplingParams(temperature=0.8, seed=i, max_tokens=64,
                                                                     structured_outputs={"json": schema}) for i in range(4)])
    finally:
        llm.shutdown()
    for out in outs:
        jsonschema.validate(json.loads(out.text), schema)
