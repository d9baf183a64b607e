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
