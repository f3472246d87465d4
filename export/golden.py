"""Golden files: sentences, token ids, embeddings, codes and top-10 results that other runtimes must reproduce.

Sentences are generated in code (seeded) from the bundle's own vocabulary plus hand-picked hard cases, so no
third-party text ever lands in a bundle. Embeddings and codes come from the fp32 graph run one sentence at a
time (batch of one, as on a device).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.bits import hamming_reference
from ondevice.io import atomic_path, write_text
from ondevice.tokenizer import Tokenizer

TOP_K = 10
NUM_QUERIES = 100

# Each exercises one rule of the tokenizer spec (NFKC, simple lowercase, categories) or an edge of the graph.
SPECIAL = [
    "", " ", "   \t\n  ", "\u00a0\u2003\u3000", "\u2028line\u2029separators\u2028",
    "Café crème brûlée à la française", "naïve coöperation façade", "Ærøskøbing Åland Øresund",
    "e\u0301te\u0301 (combining acute accents)", "Cafe\u0301 vs Caf\u00e9", "ǅemal ǈubljana ǋegoš",
    "ΟΔΥΣΣΕΥΣ ΣΟΦΟΣ", "Σίσυφος και Ὀδυσσεύς", "İstanbul İZMİR ISPARTA", "ß STRASSE Straße", "ﬁnance ﬂow ﬀ",
    "東京は日本の首都です。", "北京 上海 广州", "한국어 문장입니다", "Привет, мир! Как дела?", "مرحبا بالعالم",
    "שלום עולם", "नमस्ते दुनिया", "I ❤️ pizza 🍕🍕 and 👩‍👩‍👧 families", "thumbs 👍🏽 up", "😀", "flags 🇫🇷🇯🇵",
    "Hello, world!!!", "What?! No... way; really: yes.", "(parentheses) [brackets] {braces} <angles>",
    "quotes \"double\" 'single' «guillemets» „low“", "dash-separated em—dash en–dash", "a/b\\c|d_e~f^g`h",
    "@user #hashtag $100 %50 &co *star +plus =eq", "...", "!!!???", "-", "—",
    "3.14159 is pi and 2.71828 is e", "42,000 people in 1999", "½ ¾ ² ³ ① ⅷ", "١٢٣ ٤٥٦ Arabic-Indic digits",
    "１２３ ＡＢＣ fullwidth", "call +1 (555) 010-9999 at 10:30pm", "v2.0.1-rc3", "0", "007",
    "ALL CAPS SENTENCE", "MiXeD cAsE wOrDs", "tab\tseparated\twords", "new\nline\r\nbreaks",
    "zero\u200bwidth\u200cjoiners\u200d", "soft\u00adhyphen", "control\x00\x07chars\x1f", "\ufeffbyte order mark",
    "private \ue000 use",
]


def hamming_topk(queries: np.ndarray, catalog: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference top-k by Hamming distance, ties by smaller row: (distances int32 (q, k), rows int64 (q, k)).

    Plain numpy, independent of the search kernels, because the golden files are what those kernels are tested by.
    """
    dist = hamming_reference(queries, catalog)
    rows = np.argsort(dist, axis=1, kind="stable")[:, : min(k, dist.shape[1])]  # stable: smaller row first on ties
    return np.take_along_axis(dist, rows, axis=1).astype(np.int32), rows.astype(np.int64)


def _sentence(rng: np.random.Generator, words: Sequence[str], length: int) -> str:
    """Words joined by spaces, with occasional capitals, punctuation and numbers as real text has."""
    out = []
    for _ in range(length):
        roll = rng.random()
        if roll < 0.05:
            out.append(str(int(rng.integers(0, 10000))))
        elif roll < 0.1:
            out.append(str(rng.choice([",", ".", "!", "?", ";", ":", "'s", "-", "(", ")"])))
        else:
            w = str(words[int(rng.integers(0, len(words)))])
            out.append(w.capitalize() if rng.random() < 0.1 else w)
    return " ".join(out)


def golden_sentences(tokenizer: Tokenizer, n: int = 1000, seed: int = 0, extra: Sequence[str] = ()) -> list[str]:
    """`n` or more deterministic sentences: the hard cases, `extra`, long ones, then seeded vocabulary text."""
    rng = np.random.default_rng(seed)
    words = [w for w in tokenizer.vocab[2:] if w.strip()] or ["word"]
    m = tokenizer.max_tokens
    long = [_sentence(rng, words, m + 1), _sentence(rng, words, m + 37), _sentence(rng, words, 3 * m),
            " ".join(["repeat"] * (4 * m)), "x" * 5000, ", ".join(["comma"] * m)]
    out = list(SPECIAL) + list(extra) + long
    while len(out) < n:
        out.append(_sentence(rng, words, int(rng.integers(1, min(m, 40) + 1))))
    return out


def _jsonl(sentences: Sequence[str]) -> str:
    # ensure_ascii=False keeps UTF-8 readable; U+2028/U+2029 are escaped so no line reader splits inside a string
    lines = (json.dumps(s, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
             for s in sentences)
    return "".join(line + "\n" for line in lines)


def _save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.lib.format.write_array(fh, np.ascontiguousarray(array), version=(1, 0), allow_pickle=False)


def write_golden(directory: str | Path, sentences: Sequence[str], tokenizer: Tokenizer,
                 run_ids: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]], seed: int = 0) -> dict:
    """Write golden/ under `directory` using `run_ids(ids, lengths) -> (embeddings, codes)`; returns a summary."""
    folder = Path(directory) / layouts.GOLDEN
    folder.mkdir(parents=True, exist_ok=True)
    ids = [tokenizer.ids(s) for s in sentences]
    embs, codes = [], []
    for row in ids:
        e, c = run_ids(np.asarray([row], dtype=np.int64), np.asarray([len(row)], dtype=np.int64))
        embs.append(e[0])
        codes.append(c[0])
    embeddings = np.asarray(embs, dtype="<f4")
    codes_arr = np.asarray(codes, dtype=np.uint8)
    rng = np.random.default_rng(seed + 1)
    queries = np.sort(rng.choice(len(sentences), size=min(NUM_QUERIES, len(sentences)), replace=False)).astype("<i8")
    dist, top = hamming_topk(codes_arr[queries], codes_arr, TOP_K)
    write_text(folder / "sentences.jsonl", _jsonl(sentences))
    write_text(folder / "token_ids.txt", "".join(" ".join(map(str, row)) + "\n" for row in ids))
    for name, array in [("embeddings", embeddings), ("codes", codes_arr), ("catalog_codes", codes_arr),
                        ("queries", queries), ("topk_ids", top.astype("<i8")), ("topk_dist", dist.astype("<i4"))]:
        _save_npy(folder / f"{name}.npy", array)
    return {"sentences": len(sentences), "catalog": "the golden sentences themselves (catalog row i = sentence i)",
            "queries": len(queries), "top_k": TOP_K, "ties": "smaller catalog row first",
            "computed_by": "fp32 ONNX graph, one sentence per run"}
