"""A message's content reaches the chat template in the form the template reads, as vLLM's
--chat-template-content-format auto decides: a list of text parts for a template that loops over a
message's content, a string for the rest. A parts template given a string loops over its characters
and renders no text at all; the server and LLM.chat rendered every template that way before."""
from __future__ import annotations

import asyncio

import pytest
from family_tokenizers import save_tokenizer
from server_fakes import FakeEngine, make_app

from moeserve.engine import chat_prompt
from moeserve.server.config_file import ServerConfig

PARTS = ("{% for m in messages %}<{{ m['role'] }}>{% for part in m['content'] %}{% if part['type'] == 'text' %}"
         "{{ part['text'] }}{% endif %}{% endfor %}</{{ m['role'] }}>{% endfor %}")
VIA_VARIABLE = ("{% for m in messages %}{% set content = m.content %}<{{ m.role }}>{% for p in content %}{{ p.text }}|"
                "{% endfor %}{% endfor %}")
BOTH = ("{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
        "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}{% endfor %}")
STRING = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "user", "content": "three"}]


@pytest.mark.parametrize("template, fmt", [(PARTS, "openai"), (VIA_VARIABLE, "openai"), (BOTH, "openai"),
                                           (STRING, "string"), ("{% for m in messages %}{{ m.content | upper }}"
                                                                "{% endfor %}", "string"), ("{% for", "string"),
                                           # transformers' own tags: loop controls and the assistant-mask block
                                           ("{% for m in messages %}{% generation %}{% for p in m.content %}{{ p.text }}"
                                            "{% break %}{% endfor %}{% endgeneration %}{% endfor %}", "openai")])
def test_the_format_a_template_reads(template, fmt):
    assert chat_prompt.content_format(template) == fmt


def _tokens(tokenizer, template: str, form: str = "auto", messages=MESSAGES) -> str:
    tokenizer.chat_template = template
    text, _ = chat_prompt.render(tokenizer, chat_prompt.template_turns(messages), add_generation_prompt=False,
                                 continue_final_message=False, variables={}, content_form=form)
    return text


def test_a_parts_template_sees_each_part(tmp_path):
    tokenizer = save_tokenizer("glm4_moe", tmp_path)
    assert _tokens(tokenizer, PARTS) == "<system>Be brief.</system><user>onetwo</user><assistant>no</assistant><user>three</user>"
    # the form it was given before: strings, looped over character by character, no text at all
    assert _tokens(tokenizer, PARTS, "string") == "<system></system><user></user><assistant></assistant><user></user>"
    assert _tokens(tokenizer, STRING) == "<system>Be brief.<user>one\ntwo<assistant>no<user>three"
    assert _tokens(tokenizer, STRING, "openai").startswith("<system>[{")  # forced: what the flag says
    # a developer message becomes a system one for a template without the role: its parts join the first
    developer = [{"role": "system", "content": "A."}, {"role": "developer", "content": [{"type": "text", "text": "B."}]},
                 {"role": "user", "content": "hi"}]
    assert _tokens(tokenizer, PARTS, messages=developer) == "<system>A.B.</system><user>hi</user>"


def test_the_server_renders_a_parts_template_and_takes_the_flag(tmp_path):
    tokenizer = save_tokenizer("glm4_moe", tmp_path)
    tokenizer.chat_template = PARTS
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    want = tokenizer.encode("<user>hello there</user>", add_special_tokens=False)

    async def tokens(config: ServerConfig) -> list[int]:
        http, client, _ = await make_app(FakeEngine(max_waiting=10), tokenizer=tokenizer, config=config)
        try:
            r = await http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False})
            assert r.status_code == 200, r.text
            return r.json()["tokens"]
        finally:
            await http.aclose()
            await client.shutdown(1.0)

    assert asyncio.run(tokens(ServerConfig())) == want
    forced = asyncio.run(tokens(ServerConfig(chat_template_content_format="string")))
    assert forced == tokenizer.encode("<user></user>", add_special_tokens=False)


def test_a_bad_format_is_refused():
    from moeserve.errors import ConfigError

    with pytest.raises(ConfigError, match="chat-template-content-format"):
        ServerConfig(chat_template_content_format="list").validate()
