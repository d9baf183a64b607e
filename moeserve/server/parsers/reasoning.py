"""Reasoning parsers: split a choice's text into its reasoning and the rest (the answer).

`deepseek_r1`, `qwen3` and `glm45` write reasoning between <think> and </think>; `openai` is harmony's
analysis channel (parsers/harmony.py). Where the output starts is told by the rendered prompt: after
the last opening of an assistant turn (the family's `turn`), an unclosed <think> means the output
starts inside reasoning (DeepSeek-R1's template ends with "<think>\\n"), a closed one that it starts
with the answer (Qwen3's and GLM-4.5's templates close an empty one when thinking is turned off), and
no marker that the model decides: `deepseek_r1` reasons anyway (R1 always does, <think> or not),
`qwen3` and `glm45` reason if the output begins with <think>. Reasoning that never ends (the output
was cut) is all reasoning. The same decision, as token ids, tells the grammar of a structured
output where the answer begins (`gate`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeserve.server.parsers.base import held_back
from moeserve.server.parsers.harmony import FINAL_HEADER, HarmonyReasoningParser

REASONING, ANSWER, MODEL = "reasoning", "answer", "model"  # where the output starts


class ThinkReasoningParser:
    def __init__(self, start: str, end: str, mode: str):
        self.start, self.end, self.mode = start, end, mode

    def split(self, text: str, final: bool = False) -> tuple[str, str]:
        """(reasoning so far, the rest so far) of the text streamed so far."""
        if self.mode == ANSWER:
            return "", text
        begin = len(text) - len(text.lstrip())
        if text.startswith(self.start, begin):
            begin += len(self.start)  # written by the model (or again, after the prompt's)
        elif not final and self.start.startswith(text[begin:]):
            return "", ""  # it may still become <think>
        elif self.mode == MODEL:
            return "", text
        stop = text.find(self.end, begin)
        if stop != -1:
            return text[begin:stop], text[stop + len(self.end):]
        reasoning = text[begin:]
        return (reasoning if final else reasoning[: len(reasoning) - held_back(reasoning, (self.end,))]), ""


@dataclass(frozen=True)
class ThinkFamily:
    name: str
    turn: str  # what opens an assistant turn in the rendered prompt
    default: str  # where the output starts when that turn holds no marker
    start: str = "<think>"
    end: str = "</think>"

    @property
    def markers(self) -> tuple[str, ...]:
        return (self.start, self.end)

    def mode(self, prompt: str) -> str:
        tail = prompt[prompt.rfind(self.turn) + len(self.turn):] if self.turn in prompt else prompt
        opened, closed = tail.rfind(self.start), tail.rfind(self.end)
        if opened == -1 and closed == -1:
            return self.default
        return ANSWER if closed > opened else REASONING

    def parser(self, mode: str) -> ThinkReasoningParser:
        return ThinkReasoningParser(self.start, self.end, mode)

    def gate(self, mode: str, encode: Callable[[str], list[int]]) -> dict:
        """StructuredOutputsParams' reasoning fields: the grammar starts after the reasoning."""
        if mode == ANSWER:
            return {}
        start = encode(self.start)
        return {"in_reasoning": mode == REASONING, "reasoning_end": [encode(self.end)],
                "reasoning_start": start[0] if mode == MODEL and len(start) == 1 else None}


@dataclass(frozen=True)
class HarmonyFamily:
    name: str = "openai"
    markers: tuple[str, ...] = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>")

    def mode(self, prompt: str) -> str:
        return REASONING  # every message of the output opens with its channel

    def parser(self, mode: str) -> HarmonyReasoningParser:
        return HarmonyReasoningParser()

    def gate(self, mode: str, encode: Callable[[str], list[int]]) -> dict:
        return {"in_reasoning": True, "reasoning_end": [encode(FINAL_HEADER)]}


REASONING_FAMILIES = {
    "deepseek_r1": ThinkFamily("deepseek_r1", turn="<｜Assistant｜>", default=REASONING),
    "qwen3": ThinkFamily("qwen3", turn="<|im_start|>assistant", default=MODEL),
    "glm45": ThinkFamily("glm45", turn="<|assistant|>", default=MODEL),
    "openai": HarmonyFamily(),
}
