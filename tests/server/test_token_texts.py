"""Each token's text in logprobs as vLLM shows it (engine/token_texts.py), on a SentencePiece-style
tokenizer (sentencepiece_checkpoint.py) and on the built-in byte-level one. decode([id]) alone drops a
"▁" token's space and shows U+FFFD for each byte of a split character, so token texts did not add up
to the text they scored."""
from __future__ import annotations

import pytest
from sentencepiece_checkpoint import build_tokenizer

from moeserve.engine.token_texts import TokenTexts, leading_space_marker

TEXT = "The capital of France is Paris → café 😀 ok  x"
# vLLM 0.32's texts of TEXT's tokens (convert_ids_list_to_tokens, then its logprobs processor's
# correction of a token inside a character): <s> ▁The ... ▁ <0xE2> <0x86> <0x92> ▁ca f <0xC3> <0xA9> ▁
# <0xF0> <0x9F> <0x98> <0x80> ▁ok ▁▁ x
WANT = ["<s>", " The", " capital", " of", " France", " is", " Paris", " ", "", "", "→", " ca", "f", "", "é", " ",
        "", "", "", "😀", " ok", "  ", "x"]


@pytest.fixture(scope="module")
def sp():
    return build_tokenizer()


def _entries(ids, first_scored=False):
    """(token, logprob, top) entries as the engine reports them: the first prompt token unscored."""
    return [(t, None if i == 0 and not first_scored else -1.0, [(t, -1.0)]) for i, t in enumerate(ids)]


def test_sentencepiece_spaces_and_split_characters_as_vllm_shows_them(sp):
    ids = sp.encode(TEXT)
    texts = TokenTexts(sp)
    got = list(texts.positions(_entries(ids)))
    assert [t for t, _ in got] == WANT
    assert "".join(WANT) == sp.decode(ids)  # the texts add up to the text
    assert [alts for _, alts in got[1:]] == [[t] for t in WANT[1:]]  # an alternative reads as the chosen token


def test_a_streams_later_chunk_takes_its_context_from_the_earlier_ones(sp):
    from moeserve.engine.token_texts import context_before

    ids = sp.encode(TEXT)
    entries = _entries(ids)
    texts = TokenTexts(sp)
    streamed = [t for i in range(len(entries))
                for t, _ in texts.positions(entries[i:i + 1], context_before(entries, i))]
    assert streamed == WANT


def test_a_character_no_token_completes_shows_empty_and_bytes_of_none_are_context(sp):
    texts = TokenTexts(sp)
    e2, b86, b92 = sp.convert_tokens_to_ids(["<0xE2>", "<0x86>", "<0x92>"])
    assert [t for t, _ in texts.positions([(e2, -1.0, []), (b86, -1.0, [])])] == ["", ""]
    # the first prompt token is decoded alone and is no context for the next, as in vLLM
    assert [t for t, _ in texts.positions([(e2, None, None), (b86, -1.0, []), (b92, -1.0, [])])] == ["\ufffd", "", ""]
    # an alternative is read after the chosen tokens before its position
    assert list(texts.positions([(e2, -1.0, []), (b86, -1.0, []), (b92, -1.0, [(b86, -2.0)])])) == [
        ("", []), ("", []), ("→", ["ↆ"])]  # E2 86 92 and E2 86 86


def test_spaces_are_restored_from_the_piece_only_for_metaspace_tokenizers(sp):
    import moeserve.engine.builtin_model as bm

    assert leading_space_marker(sp) == "\u2581"
    byte_level = bm.build_tokenizer()
    assert leading_space_marker(byte_level) is None
    assert leading_space_marker(object()) is None


def test_byte_level_tokens_are_their_decode_and_split_characters_as_vllm(sp):
    import moeserve.engine.builtin_model as bm

    tok = bm.build_tokenizer()
    texts = TokenTexts(tok)
    ascii_ids = tok.encode("The quick brown fox, it said.")
    assert [t for t, _ in texts.positions(_entries(ascii_ids, True))] == [tok.decode([i]) for i in ascii_ids]
    ids = tok.encode("st🙂 café")
    got = [t for t, _ in texts.positions(_entries(ids))]
    assert got == ["st", "", "", "", "🙂", " c", "af", "", "é"]  # vLLM's (its byte-level tokens alike)
    assert "".join(got) == tok.decode(ids)
