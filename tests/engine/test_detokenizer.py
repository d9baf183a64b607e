import pytest

from moeserve.engine.builtin_model import build_tokenizer
from moeserve.engine.detokenizer import IncrementalDetokenizer, find_stop


def test_incremental_decode_equals_full_decode_including_multibyte():
    tok = build_tokenizer()
    text = "Hello, world! 言語モデル and 语言模型; def main():\n    return 0"
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add([i]) for i in ids]
    assert "".join(pieces) == tok.decode(ids) == detok.text
    assert all("\ufffd" not in p for p in pieces)


def test_find_stop_sees_strings_spanning_steps():
    assert find_stop("abcXY", 1, ["XY"]) == (3, "XY")
    assert find_stop("abcXY", 1, ["ab"]) is None  # lies wholly before the new text: found earlier
    assert find_stop("hello world", 5, ["o w", "wor"]) == (4, "o w")


def multibyte_bpe():
    """A byte-level BPE built as the built-in one is, trained here on text with CJK: some of its tokens
    hold complete characters and then the start of an unfinished one (the built-in tokenizer, trained on
    English prose, has none: its non-ASCII tokens are single bytes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["Hello there 言語モデル and 语言模型, モデルの言語 Hi"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def _token_ending_inside_a_character(tok, whole_characters_first: bool = True) -> int:
    """A token whose bytes hold complete characters, then the start of an unfinished one (or, with
    whole_characters_first=False and no such token, one lone lead byte)."""
    lone = None
    for i in range(len(tok)):
        text = tok.decode([i])
        if text.endswith("\ufffd") and text.rstrip("\ufffd").strip():
            return i
        if lone is None and text == "\ufffd" and tok.convert_ids_to_tokens(i) in ("ã", "ä", "å", "æ", "ç", "è", "é"):
            lone = i  # the lead byte of a three-byte character (U+3000..U+9FFF: CJK)
    if not whole_characters_first and lone is not None:
        return lone
    raise AssertionError("the tokenizer has no such token")


def test_flush_gives_held_back_tokens_the_text_decode_gives_them():
    # "モ" was once lost along with the unfinished character after it, and bytes that never form a
    # character dropped, where decode and /detokenize write U+FFFD
    tok = multibyte_bpe()
    odd = _token_ending_inside_a_character(tok)
    ids = tok.encode("Hello there")
    detok = IncrementalDetokenizer(tok)
    for i in ids + [odd]:
        detok.add([i])
    assert detok.text == tok.decode(ids)  # held back while the character may still complete
    assert detok.flush() == tok.decode([odd])
    assert detok.text == tok.decode(ids + [odd]) and detok.text.endswith("\ufffd")
    assert detok.flush() == ""  # nothing is added twice


def test_flush_leaves_out_a_hidden_end_token():
    tok = multibyte_bpe()
    odd = _token_ending_inside_a_character(tok)
    detok = IncrementalDetokenizer(tok, skip_special_tokens=False)
    detok.add(tok.encode("Hi"))
    detok.add([odd])
    eos = tok.encode("Hi")[0]  # any token: what matters is that flush does not decode it
    detok.token_ids.append(eos)
    detok.flush(hidden_tail=1)
    assert detok.text == tok.decode(tok.encode("Hi") + [odd])


def sentencepiece_tokenizer():
    """A SentencePiece-style tokenizer (Metaspace: "▁" marks a word's leading space, which decode
    drops at the start of the text), as Mixtral's and Llama's are; trained here, nothing downloaded."""
    from tokenizers import SentencePieceBPETokenizer
    from transformers import PreTrainedTokenizerFast

    sp = SentencePieceBPETokenizer()
    corpus = ["The capital of France is Paris, and the experts route tokens."] * 20
    sp.train_from_iterator(corpus, vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"], min_frequency=1)
    return PreTrainedTokenizerFast(tokenizer_object=sp, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_the_first_output_token_keeps_its_leading_space_after_the_prompt():
    """Decoded after the prompt's last tokens, " Paris" follows "is" with its space, as vLLM and OpenAI
    return it; alone, decode drops a SentencePiece token's leading space."""
    tok = sentencepiece_tokenizer()
    prompt = tok.encode("The capital of France is", add_special_tokens=False)
    out = tok.encode(" Paris, and the experts", add_special_tokens=False)
    assert not tok.decode(out).startswith(" ")  # what the output decodes to alone
    detok = IncrementalDetokenizer(tok, prompt_ids=prompt)
    pieces = [detok.add([i]) for i in out]
    full = tok.decode(prompt + out)
    assert "".join(pieces) == detok.text == full[len(tok.decode(prompt)):] == " Paris, and the experts"
    assert tok.decode(prompt) + detok.text == full  # prompt + completion is the whole text
    assert IncrementalDetokenizer(tok).add(out[:1]) == tok.decode(out[:1])  # no prompt: no context


def test_a_prompt_ending_inside_a_character_gives_no_context():
    tok = multibyte_bpe()
    odd = _token_ending_inside_a_character(tok)
    ids = tok.encode("Hello there")
    detok = IncrementalDetokenizer(tok, prompt_ids=tok.encode("Hi") + [odd])
    assert "".join(detok.add([i]) for i in ids) == tok.decode(ids)


def test_flush_without_a_tokenizer_is_empty():
    detok = IncrementalDetokenizer(None)
    detok.add([1, 2])
    assert detok.flush() == "" and detok.text == ""


@pytest.mark.slow
def test_a_request_ending_on_such_a_token_ends_with_what_decode_gives():
    from moeserve import LLM, SamplingParams

    llm = LLM(max_model_len=64, kv_cache_blocks=16)
    try:
        # the built-in tokenizer's only such tokens are lone lead bytes: two of them never form a character
        odd = _token_ending_inside_a_character(llm.tokenizer, whole_characters_first=False)
        params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True, logit_bias={odd: 100.0})
        out = llm.generate(["Hello"], params)[0]
        assert out.token_ids == [odd, odd] and out.finish_reason == "length"
        assert out.text == llm.tokenizer.decode([odd, odd]) == "\ufffd\ufffd"
    finally:
        llm.shutdown()


@pytest.mark.slow
def test_the_builtin_model_ends_generation_at_its_chat_end_of_turn():
    # its chat template closes every turn with <|im_end|>: a reply ends there, as ChatML models' do
    from moeserve import LLM, SamplingParams

    llm = LLM(max_model_len=64, kv_cache_blocks=16)
    try:
        im_end = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
        out = llm.generate(["Hello"], SamplingParams(temperature=0.0, max_tokens=4, logit_bias={im_end: 100.0}))[0]
        assert out.token_ids == [im_end] and out.finish_reason == "stop" and out.text == ""
    finally:
        llm.shutdown()


def byte_fallback_tokenizer():
    """A Llama/Mixtral-style tokenizer: words as "▁"-pieces, other text as <0xNN> byte tokens that the
    ByteFallback decoder joins (and turns into U+FFFD, the whole run, when any byte is invalid)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}, "▁Hello": 259, "▁": 260}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_a_run_of_byte_token_characters_decodes_as_decode_does():
    """Emoji as byte tokens, one at a time: a window starting inside a character made the whole byte
    run U+FFFD, held back for good ("😀" and then 20 "\\ufffd" for six emoji)."""
    tok = byte_fallback_tokenizer()
    emoji = [3 + b for b in "😀".encode()] * 6 + [3 + b for b in "é".encode()] + [3 + b for b in "語".encode()] * 2
    prompt = [259, 260] + [3 + b for b in "😀".encode()]  # "Hello 😀"
    detok = IncrementalDetokenizer(tok, prompt_ids=prompt)
    pieces = [detok.add([i]) for i in emoji]
    full = tok.decode(prompt + emoji)
    assert "".join(pieces) == detok.text == full[len(tok.decode(prompt)):] == "😀" * 6 + "é" + "語語"
    assert detok.flush() == ""
