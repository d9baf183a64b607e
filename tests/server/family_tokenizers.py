"""Tiny character-level tokenizers with the special tokens and the chat-template format of gpt-oss, GLM-4.5
and MiniMax-M2, each shipped the way that family ships its template, for tests of the chat endpoint:

    gpt_oss     chat_template.jinja (the openai/gpt-oss releases): the harmony format, with the variables
                and calls the release's template uses (reasoning_effort, strftime_now, raise_exception)
    glm4_moe    "chat_template" in tokenizer_config.json: [gMASK]<sop>, <|user|> / <|assistant|>, <think>
                switched by the enable_thinking variable
    minimax_m2  named templates ("default" and "tool_use": tokenizer_config.json's list form, which a
                tokenizer loads as a dict): ]~!b[ ]~b]role ... [e~[

The templates are short ones written for these tests in each format, not the releases' files. Every
printable ASCII character is one token; the special tokens are whole tokens (103-110 tokens in all).
"""
from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

HARMONY = (
    '{%- if reasoning_effort is not defined %}{%- set reasoning_effort = "medium" %}{%- endif -%}'
    '<|start|>system<|message|>Current date: {{ strftime_now("%Y") }}\nReasoning: {{ reasoning_effort }}<|end|>'
    '{%- for m in messages %}'
    '{%- if m.role in ["system", "developer"] %}<|start|>developer<|message|># Instructions\n\n{{ m.content }}<|end|>'
    '{%- elif m.role == "assistant" %}'
    '{%- if "<|channel|>" in m.content %}{{ raise_exception("pass analysis in the thinking field, not <|channel|> '
    'tags in the content") }}{%- endif %}'
    '<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>'
    '{%- else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{%- endif %}'
    '{%- endfor %}'
    '{%- if add_generation_prompt %}<|start|>assistant{%- endif %}'
)
GLM = (
    '[gMASK]<sop>{%- for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{%- endfor %}'
    '{%- if add_generation_prompt %}<|assistant|>'
    '{%- if enable_thinking is defined and not enable_thinking %}{{ "\\n" }}<think></think>{%- endif %}{%- endif %}'
)
MINIMAX = (
    '{%- for m in messages %}]~!b[]~b]{{ "ai" if m.role == "assistant" else m.role }}\n{{ m.content }}[e~[{{ "\\n" }}'
    '{%- endfor %}{%- if add_generation_prompt %}]~b]ai{{ "\\n" }}<think>{{ "\\n" }}{%- endif %}'
)


@dataclass(frozen=True)
class Family:
    specials: tuple[str, ...]
    end_tokens: tuple[str, ...]  # generation_config.json eos ids
    template: str
    shipped: str  # "file", "config" or "named"


FAMILIES = {
    "gpt_oss": Family(("<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>", "<|call|>",
                       "<|endoftext|>"), ("<|return|>", "<|call|>", "<|endoftext|>"), HARMONY, "file"),
    "glm4_moe": Family(("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>",
                        "</think>", "<|endoftext|>"), ("<|endoftext|>", "<|user|>", "<|observation|>"), GLM, "config"),
    "minimax_m2": Family(("]~!b[", "]~b]", "[e~[", "<think>", "</think>"), ("[e~[",), MINIMAX, "named"),
}


def save_tokenizer(family: str, path: Path):
    """Write `family`'s tokenizer (and its template, where that family keeps it) into `path`, and
    generation_config.json's eos ids; -> the tokenizer as transformers loads it back."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    spec = FAMILIES[family]
    vocab = {"<unk>": 0}
    for c in string.printable:
        if c not in "\t\r\x0b\x0c":
            vocab[c] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token=spec.end_tokens[0])
    tokenizer.add_special_tokens({"additional_special_tokens": list(spec.specials)})
    if spec.shipped == "named":
        tokenizer.chat_template = {"default": spec.template, "tool_use": spec.template + "{{ tools | length }}"}
    path = Path(path)
    tokenizer.save_pretrained(path)
    if spec.shipped == "file":
        (path / "chat_template.jinja").write_text(spec.template)
    elif spec.shipped == "config":
        config = json.loads((path / "tokenizer_config.json").read_text())
        (path / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": spec.template}))
    loaded = AutoTokenizer.from_pretrained(path)
    generation = path / "generation_config.json"
    config = json.loads(generation.read_text()) if generation.exists() else {}
    eos = [loaded.convert_tokens_to_ids(t) for t in spec.end_tokens]
    generation.write_text(json.dumps(config | {"eos_token_id": eos}))
    return loaded
