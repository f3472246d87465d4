import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ondevice.errors import OndeviceError
from ondevice.tokenizer import PAD, UNK, Tokenizer, _tokenize_unicode, build_vocab, count_tokens, tokenize


@pytest.mark.parametrize("text,expected", [
    ("Hello, World!", ["hello", ",", "world", "!"]),
    ("It's 3.14", ["it", "'", "s", "3", ".", "14"]),
    ("", []),
    (" \t\n ", []),
    ("ΣΑΣ", ["σασ"]),                         # per-code-point lowering: no final-sigma context rule
    ("İstanbul", ["istanbul"]),               # U+0130 lowers to plain i
    ("ﬁne café", ["fine", "café"]),           # NFKC folds the ligature, keeps the accent
    ("e\u0301t\u00e9", ["ét\u00e9"]),         # NFKC composes, combining marks stay in words
    ("x² ½", ["x2", "1", "⁄", "2"]),          # NFKC turns superscripts/fractions into digits
    ("日本語 😀!", ["日本語", "😀", "!"]),
    ("a\u200bb", ["a", "b"]),                 # format characters (Cf) only separate
])
def test_tokenize_spec_cases(text, expected):
    assert tokenize(text) == expected


def test_max_tokens_truncates():
    assert tokenize("a b c d", max_tokens=2) == ["a", "b"]


def test_ids_unk_and_empty():
    tok = Tokenizer([PAD, UNK, "cat", "."], max_tokens=3)
    assert tok.ids("Cat dog.") == [2, 1, 3]
    assert tok.ids("") == [1]
    assert tok.ids("cat cat cat cat") == [2, 2, 2]
    ids, lengths = tok.batch(["cat", "cat . cat", ""])
    assert ids.dtype == np.int64 and ids.shape == (3, 3)
    assert lengths.tolist() == [1, 3, 1]
    assert ids[0].tolist() == [2, 0, 0]


def test_build_vocab_is_frequency_then_codepoint_ordered():
    counts = count_tokens(["b a a", "c b a", "z"])
    vocab = build_vocab(counts, lambda t: t != "z", max_size=2)
    assert vocab == [PAD, UNK, "a", "b"]


def test_build_vocab_rejects_no_known_words():
    with pytest.raises(OndeviceError, match="word vectors"):
        build_vocab({"x": 1}, lambda t: False, 10)


def test_save_load_round_trip(tmp_path):
    tok = Tokenizer([PAD, UNK, "hello", "wörld"], max_tokens=7)
    tok.save(tmp_path)
    back = Tokenizer.load(tmp_path)
    assert back.vocab == tok.vocab and back.max_tokens == 7


def test_bad_vocab_and_spec(tmp_path):
    with pytest.raises(OndeviceError):
        Tokenizer(["a", "b"])
    Tokenizer([PAD, UNK]).save(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"version": 99, "max_tokens": 5}')
    with pytest.raises(OndeviceError, match="version 99"):
        Tokenizer.load(tmp_path)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_fast_path_equals_the_unicode_rules(text):
    """The regex path taken for ASCII text gives exactly the tokens of the code-point-by-code-point rules."""
    assert tokenize(text) == _tokenize_unicode(text)


def test_ascii_fast_path_every_character():
    for code in range(128):
        text = f"ab{chr(code)}Cd{chr(code)}{chr(code)}9"
        assert tokenize(text) == _tokenize_unicode(text), repr(text)
