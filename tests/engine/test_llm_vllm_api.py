"""The Python API in vLLM's shape: n samples per prompt, `RequestOutput.outputs` of CompletionOutputs,
`use_tqdm`; moeserve's flat fields stay the first sample's."""
from __future__ import annotations

import dataclasses
import sys

import pytest

from moeserve import SamplingParams
from moeserve.outputs import CompletionOutput, Logprob
from moeserve.sampling_params import engine_seed

SEEDED = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=6, ignore_eos=True)


def test_greedy_n_gives_n_identical_samples_equal_to_n_1(llm):
    one = llm.generate("Hello", SamplingParams(temperature=0.0, max_tokens=5), use_tqdm=False)[0]
    out = llm.generate("Hello", SamplingParams(n=3, temperature=0.0, max_tokens=5), use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert [c.token_ids for c in out.outputs] == [one.token_ids] * 3 and out.token_ids == one.token_ids
    assert len({c.text for c in out.outputs}) == 1 and out.text == one.text


def test_sample_i_runs_as_the_servers_choice_i(llm):
    """Sample i of n with seed s is the engine request the HTTP server makes of choice i
    (SamplingParams.for_choice: seed engine_seed(s, i)): an n=1 call with that seed gives its tokens."""
    outs = llm.generate(["Hello", "World"], SEEDED, use_tqdm=False)
    for out, prompt in zip(outs, ["Hello", "World"]):
        samples = [c.token_ids for c in out.outputs]
        assert len(set(map(tuple, samples))) == 3  # different samples, not one repeated
        alone = [llm.generate(prompt, dataclasses.replace(SEEDED, n=1, seed=engine_seed(11, i)), use_tqdm=False)[0]
                 .token_ids for i in range(3)]
        assert samples == alone
    assert [c.token_ids for c in llm.generate("Hello", SEEDED, use_tqdm=False)[0].outputs] == \
        [c.token_ids for c in outs[0].outputs]  # reproducible across calls and batches


def test_outputs_have_vllms_fields_and_the_flat_fields_are_the_first_sample(llm):
    params = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=4, logprobs=2, ignore_eos=True)
    text_out, ids_out = llm.generate(["Hello", {"prompt_token_ids": [5, 6, 7]}], params, use_tqdm=False)
    assert text_out.prompt == "Hello" and ids_out.prompt is None and ids_out.prompt_token_ids == [5, 6, 7]
    assert text_out.prompt_token_ids == llm.tokenizer.encode("Hello") and text_out.finished
    assert text_out.request_id != ids_out.request_id
    for out in (text_out, ids_out):
        first = out.outputs[0]
        assert isinstance(first, CompletionOutput) and len(out.outputs) == 2
        assert (out.text, out.token_ids, out.finish_reason, out.stop_reason) == \
            (first.text, first.token_ids, first.finish_reason, first.stop_reason)
        for c in out.outputs:
            assert c.finish_reason == "length" and len(c.token_ids) == 4 and len(c.logprobs) == 4 and c.finished()
            assert c.text == llm.tokenizer.decode(c.token_ids)
            assert c.cumulative_logprob == pytest.approx(sum(e[c.token_ids[k]].logprob for k, e in enumerate(c.logprobs)))
        # moeserve's flat logprobs: (chosen logprob, [(id, logprob), ...]) of the first sample
        for token, entry, (lp, top) in zip(first.token_ids, first.logprobs, out.logprobs):
            assert entry[token].logprob == lp and entry[token].decoded_token == llm.tokenizer.decode([token])
            assert [(t, entry[t].logprob, entry[t].rank) for t, _ in top] == [(t, v, r) for r, (t, v) in enumerate(top, 1)]
            assert isinstance(entry[token], Logprob) and set(entry) == {token} | {t for t, _ in top}
            # the chosen token's rank is never unknown: its alternative's place, or past them all
            alternatives = [t for t, _ in top]
            if token in alternatives:
                assert entry[token].rank == alternatives.index(token) + 1
            else:
                assert entry[token].rank > len(top)
    assert llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].cumulative_logprob is None


def test_prompt_logprobs_are_vllms_dicts_of_logprobs(llm):
    """vLLM's RequestOutput.prompt_logprobs: None for the first prompt token, then {token id: Logprob}
    holding the prompt token (first, with its rank over the vocabulary) and its top alternatives
    (ranks 1..N); the engine's (logprob, top, rank) entries in `sequences[0]` give the numbers."""
    out = llm.generate("Hello world again", SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=2),
                       use_tqdm=False)[0]
    ids, entries = out.prompt_token_ids, out.sequences[0].prompt_logprobs
    assert len(out.prompt_logprobs) == len(ids) > 1 and out.prompt_logprobs[0] is None
    for token, position, (lp, top, rank) in zip(ids[1:], out.prompt_logprobs[1:], entries[1:]):
        assert isinstance(position, dict) and next(iter(position)) == token
        assert all(isinstance(v, Logprob) for v in position.values())
        assert set(position) == {token} | {t for t, _ in top} and len(top) == 2
        if token not in {t for t, _ in top}:
            assert position[token] == Logprob(lp, rank, llm.tokenizer.decode([token]))
        assert [(position[t].logprob, position[t].rank) for t, _ in top] == [(v, r) for r, (_, v) in enumerate(top, 1)]
    plain = llm.generate("Hello", SamplingParams(max_tokens=1), use_tqdm=False)[0]
    assert plain.prompt_logprobs is None


def test_vllms_prompt_types_and_get_tokenizer(llm):
    from moeserve.inputs import TextPrompt, TokensPrompt

    tokenizer = llm.get_tokenizer()
    assert tokenizer is llm.tokenizer
    ids = tokenizer.encode("Hello")
    params = SamplingParams(temperature=0.0, max_tokens=3)
    by_ids, by_text = llm.generate([TokensPrompt(prompt_token_ids=ids), TextPrompt(prompt="Hello")], params,
                                   use_tqdm=False)
    assert by_ids.prompt_token_ids == by_text.prompt_token_ids == ids and by_ids.token_ids == by_text.token_ids


def test_no_sampling_params_samples_with_the_checkpoints_generation_config(llm, monkeypatch, tmp_path):
    """vLLM's generation_config "auto": generate / chat without SamplingParams use the sampling fields
    that generation_config.json sets (max_new_tokens as max_tokens)."""
    from moeserve.engine.generation_defaults import generation_defaults

    (tmp_path / "generation_config.json").write_text(
        '{"temperature": 0.6, "top_p": 0.95, "top_k": 50, "max_new_tokens": 7, "eos_token_id": 2}')
    assert generation_defaults(str(tmp_path)) == {"temperature": 0.6, "top_p": 0.95, "top_k": 50, "max_tokens": 7}
    assert generation_defaults(str(tmp_path / "none")) == {}
    assert llm.get_default_sampling_params() == SamplingParams()  # the built-in model's config sets none
    monkeypatch.setattr(llm, "_defaults", {"temperature": 0.0, "max_tokens": 3})
    greedy = llm.generate("Hello", SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True), use_tqdm=False)[0]
    out = llm.generate("Hello", use_tqdm=False)[0]
    assert out.token_ids == greedy.token_ids[:len(out.token_ids)] and len(out.token_ids) <= 3
    assert llm.chat([{"role": "user", "content": "Hi"}], use_tqdm=False)[0].outputs[0].finish_reason in ("stop", "length")


def test_a_list_of_params_may_give_each_prompt_its_own_n(llm):
    outs = llm.generate(["Hello", "World"], [SamplingParams(n=2, max_tokens=2), SamplingParams(n=1, max_tokens=3)],
                        use_tqdm=False)
    assert [len(o.outputs) for o in outs] == [2, 1] and len(outs[1].token_ids) == 3
    assert llm.engine.scheduler.requests == {}


def test_n_above_max_n_is_refused_naming_sampling_params(llm, monkeypatch):
    engine = llm.engine
    monkeypatch.setattr(engine, "config", dataclasses.replace(
        engine.config, scheduler=dataclasses.replace(engine.config.scheduler, max_n=2)))
    with pytest.raises(ValueError, match=r"sampling_params: n is 3; .* at most 2 .*\(max_n\)"):
        llm.generate("Hello", SamplingParams(n=3))
    assert llm.engine.scheduler.requests == {}


class _Bar:
    made: list[_Bar] = []

    def __init__(self, **kwargs):
        self.kwargs, self.n, self.closed = kwargs, 0, False
        _Bar.made.append(self)

    def update(self, k: int) -> None:
        self.n += k

    def close(self) -> None:
        self.closed = True


def test_use_tqdm_takes_a_bool_or_a_callable_that_counts_prompts(llm, monkeypatch):
    llm.generate(["Hello", "World"], SamplingParams(n=2, max_tokens=2), use_tqdm=_Bar)
    bar = _Bar.made[-1]
    assert bar.kwargs["total"] == 2 and bar.n == 2 and bar.closed  # prompts, not samples
    for flag in (True, False):
        assert llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm=flag)[0].finished
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # tqdm not installed: no bar, no error
    assert llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm=True)[0].finished
    with pytest.raises(TypeError, match="use_tqdm must be"):
        llm.generate("Hello", SamplingParams(max_tokens=2), use_tqdm="yes")
    assert llm.engine.scheduler.requests == {}


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
# prints every field a turn may carry, the tools and a template variable: what reaches the template
FIELDS_TEMPLATE = ("{% for t in tools or [] %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}<{{ m.role }}|"
                   "{{ m.name or '' }}|{{ m.tool_call_id or '' }}|{{ (m.tool_calls or []) | map(attribute='function') | "
                   "map(attribute='arguments') | map(attribute='x') | join(',') }}>{{ m.content }}{% endfor %}"
                   "{{ flavour }}{% if add_generation_prompt %}<assistant>{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
HISTORY = [{"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "r"}], "name": "ann"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"x": 7}'}}]},
           {"role": "tool", "content": "42", "tool_call_id": "c1"}]


def test_chat_renders_as_the_server_and_generates_as_generate(llm):
    from types import SimpleNamespace

    from moeserve.server.chat import render_messages
    from moeserve.server.config_file import ServerConfig
    from moeserve.server.protocol import ChatCompletionRequest, validate

    out = llm.chat(CHAT, GREEDY, use_tqdm=False)[0]
    served = render_messages(SimpleNamespace(tokenizer=llm.tokenizer, config=ServerConfig()), validate(ChatCompletionRequest, {"messages": CHAT}))
    assert out.prompt_token_ids == served and out.prompt == llm.tokenizer.decode(served)
    assert out.token_ids == llm.generate([served], GREEDY, use_tqdm=False)[0].token_ids


def test_chat_tools_history_and_template_kwargs_reach_the_template_as_the_servers(llm, monkeypatch):
    from types import SimpleNamespace

    from moeserve.server.chat import render_messages
    from moeserve.server.config_file import ServerConfig
    from moeserve.server.protocol import ChatCompletionRequest, validate

    out = llm.chat(HISTORY, GREEDY, use_tqdm=False, chat_template=FIELDS_TEMPLATE, tools=TOOLS,
                   chat_template_kwargs={"flavour": "plain"})[0]
    assert out.prompt == "[lookup]<user|ann||>q\nr<assistant|||7><tool||c1|>42plain<assistant>"
    monkeypatch.setattr(llm.tokenizer, "chat_template", FIELDS_TEMPLATE)  # the server renders the tokenizer's
    req = validate(ChatCompletionRequest, {"messages": HISTORY, "tools": TOOLS, "chat_template_kwargs": {"flavour": "plain"}})
    assert render_messages(SimpleNamespace(tokenizer=llm.tokenizer, config=ServerConfig()), req) == out.prompt_token_ids
    cont = llm.chat(HISTORY[:1] + [{"role": "assistant", "content": "The answ"}], GREEDY, use_tqdm=False,
                    add_generation_prompt=False, continue_final_message=True)[0]
    assert cont.prompt.endswith("The answ") and "<assistant>" not in cont.prompt


def test_chat_takes_a_list_of_conversations_each_with_its_params(llm):
    convs = [CHAT, CHAT[1:], CHAT]
    outs = llm.chat(convs, [GREEDY, GREEDY, SamplingParams(n=2, temperature=0.0, max_tokens=4, ignore_eos=True)],
                    use_tqdm=False)
    alone = [llm.chat(c, GREEDY, use_tqdm=False)[0] for c in convs[:2]]
    assert [o.prompt_token_ids for o in outs] == [alone[0].prompt_token_ids, alone[1].prompt_token_ids,
                                                 alone[0].prompt_token_ids]
    assert [o.token_ids for o in outs] == [alone[0].token_ids, alone[1].token_ids, alone[0].token_ids]
    assert [c.token_ids for c in outs[2].outputs] == [alone[0].token_ids] * 2


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(messages=[]), TypeError, "messages must be a conversation"),
    (dict(messages="Say hi"), TypeError, "messages must be a conversation"),
    (dict(messages=[CHAT[0], [CHAT[1]]]), TypeError, "not a mix"),
    (dict(messages=[{"role": "user"}]), ValueError, r"messages\[0\] \(user\) has no content"),
    (dict(messages=[{"role": "robot", "content": "x"}]), ValueError, r"messages\[0\]\['role'\] must be one of"),
    (dict(messages=[{"role": "user", "content": 5}]), ValueError, "must be a string or a list of content parts"),
    (dict(messages=[{"role": "user", "content": "x", "extra": 1}]), ValueError, r"unknown keys \['extra'\]"),
    (dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), ValueError,
     "'image_url' part; only text parts"),
    (dict(messages=[CHAT, [{"role": "user", "content": None}]]), ValueError, r"conversation 1: messages\[0\]"),
    (dict(messages=CHAT, continue_final_message=True), ValueError, "needs add_generation_prompt=False"),
    (dict(messages=CHAT, add_generation_prompt="yes"), TypeError, "add_generation_prompt must be True or False"),
    (dict(messages=CHAT, tools=[{"type": "code_interpreter"}]), ValueError, "tools.0 must be"),
    (dict(messages=CHAT, chat_template_kwargs={"add_generation_prompt": False}), ValueError, "argument of LLM.chat"),
    (dict(messages=CHAT, chat_template_kwargs={"tokenize": True}), ValueError, "only add template variables"),
    (dict(messages=CHAT, chat_template="{{ messages[0].nope.deeper }}"), ValueError, "chat template rejected"),
    (dict(messages=CHAT, chat_template=5), TypeError, "chat_template must be"),
    (dict(messages=[CHAT, CHAT], sampling_params=[GREEDY]), ValueError, "got 2 prompts but 1 sampling_params"),
])
def test_bad_chat_arguments_name_themselves_and_queue_nothing(llm, kwargs, error, match):
    with pytest.raises(error, match=match):
        llm.chat(use_tqdm=False, **kwargs)
    assert llm.engine.scheduler.requests == {}
    assert llm.chat(CHAT, GREEDY, use_tqdm=False)[0].finish_reason == "length"
