"""The student's tokenizer: a small, exactly specified rule set that other runtimes (Java) reimplement.

Spec, version 1 (see `SPEC` and README "Tokenizer"):
1. Normalize the text with Unicode NFKC.
2. Lowercase code point by code point with the simple (1:1) Unicode lowercase mapping; no context rules
   (a final capital sigma becomes U+03C3, U+0130 becomes U+0069).
3. Scan code points: a code point of general category L* (letters), M* (marks) or Nd (decimal digits) is a word
   character; maximal runs of word characters form one token. A code point of category Z* (separators) or C*
   (control, format, private use, surrogate, unassigned) only separates tokens. Every other code point
   (punctuation P*, symbols S*, Nl, No) is a token by itself.
4. Keep the first `max_tokens` tokens.
5. Ids: the vocabulary maps a token to its line number in vocab.txt; 0 is [PAD], 1 is [UNK]; a token not in the
   vocabulary becomes 1. A text with no tokens becomes the single id 1, so every text has at least one id.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.errors import OndeviceError
from ondevice.io import write_json, write_text

PAD, UNK = "[PAD]", "[UNK]"
PAD_ID, UNK_ID = 0, 1
SPEC_VERSION = 1
MAX_TOKENS = 1 << 20  # tokens kept per text: far beyond any sentence


def _simple_lower(ch: str) -> str:
    low = ch.lower()
    # str.lower applies full case mapping; only U+0130 lowers to two code points, its simple mapping is 'i'.
    return low if len(low) == 1 else ("i" if ch == "\u0130" else ch)


# ASCII is NFKC-stable and str.lower is its simple lowercase; its letters and digits are word characters, space
# and controls (Zs, Cc) separate, and every other printable character (P*, S*) is a token by itself.
_ASCII_TOKENS = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")


def tokenize(text: str, max_tokens: int | None = None) -> list[str]:
    """Split `text` into lowercase tokens by the version-1 spec above."""
    # The same rules as _tokenize_unicode, in C for the common all-ASCII text (~10x faster; tested equal).
    tokens = _ASCII_TOKENS.findall(text.lower()) if text.isascii() else _tokenize_unicode(text)
    return tokens if max_tokens is None else tokens[:max_tokens]


def _tokenize_unicode(text: str) -> list[str]:
    tokens: list[str] = []
    word: list[str] = []
    for ch in unicodedata.normalize("NFKC", text):
        ch = _simple_lower(ch)
        cat = unicodedata.category(ch)[0]
        if cat in "LM" or unicodedata.category(ch) == "Nd":
            word.append(ch)
            continue
        if word:
            tokens.append("".join(word))
            word = []
        if cat not in "ZC":
            tokens.append(ch)
    if word:
        tokens.append("".join(word))
    return tokens


def pad_ids(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id rows with PAD_ID: int64 ids (n, longest) and int64 lengths (n,)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    out = np.full((len(rows), int(lengths.max(initial=1))), PAD_ID, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


@dataclass
class TokenizerSpec:
    """What a runtime needs to reproduce the ids: saved as tokenizer.json beside vocab.txt."""

    version: int = SPEC_VERSION
    normalization: str = "NFKC"
    lowercase: str = "simple-per-codepoint"
    word_categories: str = "L*,M*,Nd"
    separator_categories: str = "Z*,C*"
    max_tokens: int = 128
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    empty_text: str = "single-unk"


class Tokenizer:
    """Maps texts to id arrays with a fixed vocabulary."""

    def __init__(self, vocab: Sequence[str], max_tokens: int = 128):
        if len(vocab) < 2 or vocab[PAD_ID] != PAD or vocab[UNK_ID] != UNK:
            raise OndeviceError(f"vocabulary must start with {PAD} and {UNK}; re-create the student")
        if max_tokens < 1:
            raise OndeviceError(f"max_tokens must be >= 1, got {max_tokens}")
        self.vocab = list(vocab)
        self.index = {tok: i for i, tok in enumerate(self.vocab)}
        self.max_tokens = max_tokens

    @property
    def spec(self) -> TokenizerSpec:
        return TokenizerSpec(max_tokens=self.max_tokens)

    def __len__(self) -> int:
        return len(self.vocab)

    def ids(self, text: str) -> list[int]:
        """Token ids of one text (never empty)."""
        out = [self.index.get(t, UNK_ID) for t in tokenize(text, self.max_tokens)]
        return out or [UNK_ID]

    def batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded int64 ids (n, longest) and int64 lengths (n,)."""
        return pad_ids([self.ids(t) for t in texts])

    def save(self, directory: str | Path) -> None:
        """Write vocab.txt (one token per line, line number = id) and tokenizer.json."""
        directory = Path(directory)
        write_text(directory / layouts.VOCAB, "\n".join(self.vocab) + "\n")
        write_json(directory / layouts.TOKENIZER_JSON, self.spec)

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Read vocab.txt and tokenizer.json written by `save`."""
        directory = Path(directory)
        files = {}
        for name in (layouts.TOKENIZER_JSON, layouts.VOCAB):
            path = directory / name
            if not path.is_file():
                raise OndeviceError(f"{name} not found in {directory}; re-create the student")
            files[name] = path.read_bytes()
        return cls.from_bytes(files[layouts.VOCAB], files[layouts.TOKENIZER_JSON], str(directory))

    @classmethod
    def from_bytes(cls, vocab: bytes, spec: bytes, where: str = "tokenizer") -> Tokenizer:
        """Build from the bytes of vocab.txt and tokenizer.json (a bundle parses exactly the bytes it hashed)."""
        try:
            raw = json.loads(spec.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, or an over-long integer
            raise OndeviceError(f"tokenizer.json in {where} is not valid JSON ({type(exc).__name__}); re-create it") from None
        if not isinstance(raw, dict):
            raise OndeviceError(f"tokenizer.json in {where} must be a JSON object; re-create it")
        if raw.get("version") != SPEC_VERSION:
            raise OndeviceError(
                f"tokenizer spec version {raw.get('version')!r} in {where} is not supported "
                f"(this ondevice reads version {SPEC_VERSION}); upgrade ondevice or re-export"
            )
        max_tokens = raw.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
            raise OndeviceError(f"tokenizer.json in {where} has max_tokens {max_tokens!r}; it must be an integer "
                                f"in 1..{MAX_TOKENS}; re-create it")
        differ = [k for k, v in vars(TokenizerSpec(max_tokens=max_tokens)).items() if k in raw and raw[k] != v]
        if differ:  # another rule set would give other ids: refuse rather than tokenize differently
            raise OndeviceError(f"tokenizer.json in {where} describes rules this ondevice does not implement "
                                f"({', '.join(differ)}); re-export with this ondevice")
        try:
            lines = vocab.decode("utf-8").split("\n")
        except UnicodeDecodeError as exc:
            raise OndeviceError(f"vocab.txt in {where} is not UTF-8 (byte {exc.start}); re-create it") from None
        if lines and lines[-1] == "":
            lines.pop()
        if len(set(lines)) != len(lines):
            seen: set[str] = set()
            dup = next(t for t in lines if t in seen or seen.add(t))
            raise OndeviceError(f"vocab.txt in {where} lists {dup!r} twice; re-create it")
        return cls(lines, max_tokens=max_tokens)


def as_texts(texts: str | Sequence[str]) -> list[str]:
    """`texts` as a list of str (a str is one text); anything else is a one-line error."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, (bytes, bytearray, memoryview)) or not hasattr(texts, "__iter__") or isinstance(texts, dict):
        raise OndeviceError(f"texts must be a str or a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    bad = [type(t).__name__ for t in out if not isinstance(t, str)]
    if bad:
        raise OndeviceError(f"texts must all be str, got a {bad[0]}; decode bytes first")
    return out


def count_tokens(texts: Iterable[str], max_tokens: int | None = None) -> dict[str, int]:
    """Token frequencies over a corpus."""
    counts: dict[str, int] = {}
    for text in texts:
        for tok in tokenize(text, max_tokens):
            counts[tok] = counts.get(tok, 0) + 1
    return counts


def build_vocab(counts: dict[str, int], known: callable, max_size: int) -> list[str]:
    """[PAD], [UNK], then up to `max_size` corpus tokens that `known(token)` accepts, most frequent first.

    Ties in frequency are broken by the token's code points, so the vocabulary is deterministic.
    """
    words = sorted((t for t in counts if known(t) and t not in (PAD, UNK)), key=lambda t: (-counts[t], t))
    if not words:
        raise OndeviceError(
            "no corpus word is in the word vectors; check --word-vectors matches the corpus language"
        )
    return [PAD, UNK] + words[:max_size]
