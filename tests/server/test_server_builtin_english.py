"""The built-in model speaks English through the server: greedy completions of plain prompts are
printable text, and its bits per byte on prose it was not trained on, computed from the server's echo
logprobs (as lm-eval's loglikelihood does), is at most 3.0 (the random-weight model it replaced: 5.6)."""
from __future__ import annotations

import math
import unicodedata

import openai
import pytest
from server_settings import API_KEY

PROMPTS = ["The capital of France is", "Once upon a time", "She opened the letter and", "The weather this morning was",
           "My dear friend,", "He walked into the room and"]

# Written for this test (not from any book): plain modern prose unlike the training corpus.
MARKET = ("Every Saturday morning the market fills the square in front of the old town hall. Farmers arrive before "
          "dawn to set up their tables, and by eight o'clock the air smells of fresh bread, coffee and wet flowers. "
          "People walk slowly from one stall to the next, asking about the price of apples and talking with "
          "neighbours they have not seen all week. Children run between the tables while their parents carry heavy "
          "bags of potatoes and cheese. When the church bell rings at noon, the farmers begin to pack away what is "
          "left, and the square is quiet again by one o'clock.")
# From "Persuasion", the Austen novel held out of the training corpus (scripts/train_builtin_model.py).
PERSUASION = ("There had been three alternatives, London, Bath, or another house in the country. All Anne's wishes "
              "had been for the latter. A small house in their own neighbourhood, where they might still have Lady "
              "Russell's society, still be near Mary, and still have the pleasure of sometimes seeing the lawns and "
              "groves of Kellynch, was the object of her ambition. But the usual fate of Anne attended her, in having "
              "something very opposite from her inclination fixed on. She disliked Bath, and did not think it agreed "
              "with her; and Bath was to be her home.")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def unprintable(text: str) -> list[str]:
    """Replacement characters and control characters (a newline between paragraphs is text)."""
    return [c for c in text if c == "\ufffd" or (unicodedata.category(c) in ("Cc", "Cf") and c != "\n")]


def test_unprintable_finds_what_the_random_model_wrote():
    assert unprintable(" routeP\ufffdPel bro\x7f conti\x13") == ["\ufffd", "\x7f", "\x13"]
    assert unprintable("It was a fine day.\n\nShe said so.") == []


def test_greedy_completions_are_printable_english(client, server):
    resp = client.completions.create(model=server.model, prompt=PROMPTS, max_tokens=32, temperature=0)
    texts = [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
    for prompt, text in zip(PROMPTS, texts):
        assert unprintable(text) == [], (prompt, text)
        words = text.split()
        assert len(words) >= 4, (prompt, text)
        # English words, not byte soup: mostly letters, with ordinary punctuation
        letters = sum(ch.isascii() and ch.isalpha() for ch in text)
        assert letters >= 0.7 * len(text.replace(" ", "").replace("\n", "")), (prompt, text)


def bits_per_byte(client, model: str, text: str) -> float:
    """-sum(log2 p) over every token after the first, per UTF-8 byte of the text those tokens spell."""
    choice = client.completions.create(model=model, prompt=text, max_tokens=0, echo=True, logprobs=0,
                                       temperature=0).choices[0]
    lp = choice.logprobs
    assert choice.text == text and lp.token_logprobs[0] is None
    scored_bytes = len(text[lp.text_offset[1]:].encode())
    return -sum(lp.token_logprobs[1:]) / math.log(2) / scored_bytes


@pytest.mark.parametrize("text", [MARKET, PERSUASION], ids=["modern-prose", "held-out-austen"])
def test_bits_per_byte_on_unseen_prose(client, server, text):
    bpb = bits_per_byte(client, server.model, text)
    assert bpb <= 3.0, bpb
