"""Build a tiny seeded random student + binarizer and export a bundle with golden files and fp32 weights.

Used by tests/test_android_parity.py and handy for trying the Java core without training anything:

    .venv/bin/python android_demo/tools/make_parity_bundle.py /tmp/parity   # -> /tmp/parity/bundle

The sentences mix scripts, case, NFKC-sensitive forms, emoji (surrogate pairs), combining marks, punctuation and
separators, but only characters assigned by Unicode 13, which every JDK >= 16 and Python >= 3.9 know.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np

SEED = 6
WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "slow", "big", "small", "red",
    "blue", "house", "tree", "car", "road", "city", "river", "walks", "eats", "sleeps", "runs", "jumps",
    "sees", "likes", "old", "new", "happy", "sad", "bird", "fish", "sun", "moon", "search", "phone",
    "offline", "tiny", "model"]
EXTRA = [
    "Café", "naïve", "façade", "Straße", "İstanbul", "ΟΔΟΣ", "Ωμέγα", "Москва", "Київ", "東京", "北京市", "서울",
    "ｆｕｌｌｗｉｄｔｈ", "ﬁle", "Ⅻ", "x²", "½", "①", "™", "e\u0301", "n\u0303", "क्षत्रिय", "عربى", "עברית",
    "ไทย", "😀", "👍🏽", "❤️", "🇫🇷", "👩\u200d💻", "\u00a0", "\u200b", "\t", "—", "…", "«", "»", "¿", "¡",
    "3.14", "1,000", "$5", "€10", "#tag", "@user", "C++", "e-mail", "don't", "O'Neil", "ǅ", "Σ", "ς", "ß", "ẞ",
    "\u1e9e", "ŉ", "İ", "I", "ı", "𝐁𝐨𝐥𝐝", "𝔉𝔯𝔞𝔨𝔱𝔲𝔯", "Ⓐ", "㎏", "ﾊﾝｶｸ", "〜", "\u3000", "\u2028", "\x00",
]


def sentences(n: int = 1200, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "!!!", "Hello, World!", "ΣΊΣΥΦΟΣ", "İİ", "😀😀", "a" * 300, " ".join(["word"] * 200)]
    while len(out) < n:
        parts = [rng.choice(WORDS if rng.random() < 0.75 else EXTRA) for _ in range(rng.randint(1, 18))]
        seps = [rng.choice([" ", " ", " ", "", ", ", "-", "\n"]) for _ in parts]
        text = "".join(p + s for p, s in zip(parts, seps)).strip(" ")
        if rng.random() < 0.5:
            text = text.capitalize()
        if rng.random() < 0.2:
            text = text.upper()
        out.append(text + rng.choice([".", "!", "?", "", " 🙂"]))
    return out


# Architectures: "tiny" for quick checks, "default" = what `ondevice distill` trains by default (vocabulary
# 50,000, embedding 50, hidden 256, 384-d output) with 2048-bit codes, as an app would ship it.
SIZES = {"tiny": {"vocab": 400, "embedding_dim": 16, "hidden_size": 24, "output_dim": 32, "max_tokens": 40, "bits": 72},
         "default": {"vocab": 50_000, "embedding_dim": 50, "hidden_size": 256, "output_dim": 384, "max_tokens": 128,
                     "bits": 2048}}


def build_student(workdir: Path, texts: list[str], pooling: str = "meanmax", size: str = "tiny"):
    """A random student over the vocabulary of `texts` (padded with made-up words to the size's vocabulary)."""
    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import Tokenizer, build_vocab, count_tokens

    arch = SIZES[size]
    counts = count_tokens(texts)
    vocab = build_vocab(counts, known=lambda t: counts[t] > 1, max_size=arch["vocab"])
    vocab += [f"zz{i}" for i in range(arch["vocab"] - len(vocab))] if size != "tiny" else []
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=arch["embedding_dim"], hidden_size=arch["hidden_size"],
                        pooling=pooling, output_dim=arch["output_dim"], max_tokens=arch["max_tokens"])
    emb = np.random.default_rng(SEED).normal(0, 0.5, (len(vocab), cfg.embedding_dim)).astype(np.float32)
    student = Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=cfg.max_tokens), emb, seed=SEED)
    student.save(workdir / "student")
    return student


def build_binarizer(workdir: Path, student, texts: list[str], bits: int = 72):
    """A random-projection binarizer (72 bits: not a multiple of 64, so word padding is exercised)."""
    from ondevice.binarize import Binarizer

    binarizer = Binarizer.fit(student.encode(texts), "random", bits, seed=SEED)
    binarizer.save(workdir / "binarizer")
    return binarizer


LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def build(workdir: Path, pooling: str = "meanmax", n: int = 1200, exporter: str = "cli", size: str = "tiny",
          projection: str = "auto") -> Path:
    """Export workdir/bundle and return its path.

    exporter "cli": the real `ondevice export --precision fp32 --golden --with-weights`, with our sentences as
    --golden-sentences (those without line breaks) on top of the exporter's own golden set, and `--projection`.
    exporter "dev": a quick stand-in with the same layout but no encoder.onnx/encoder.pt, golden values from
    torch; used to check the Java forward pass for every pooling without paying for several ONNX exports.
    """
    workdir = Path(workdir)
    texts = sentences(n)
    student = build_student(workdir, texts, pooling, size)
    binarizer = build_binarizer(workdir, student, texts, SIZES[size]["bits"])
    out = workdir / "bundle"
    if exporter == "dev":
        _write_dev_bundle(out, student, binarizer, texts)
        return out
    from ondevice.cli import main

    extra = workdir / "golden_sentences.txt"
    extra.write_text("".join(t + "\n" for t in texts if t.strip() and not any(c in LINE_BREAKS for c in t)),
                     encoding="utf-8")
    rc = main(["export", "--student", str(workdir / "student"), "--binarizer", str(workdir / "binarizer"),
               "--out", str(out), "--precision", "fp32", "--golden", "--golden-sentences", str(extra),
               "--with-weights", "--projection", projection, "--seed", str(SEED)])
    if rc != 0:
        raise RuntimeError(f"ondevice export failed with exit code {rc}")
    return out


def _write_dev_bundle(out: Path, student, binarizer, texts: list[str]) -> None:
    """Stand-in for `ondevice export --golden --with-weights` (same layout, no encoder.onnx/.pt)."""
    from safetensors.numpy import save_file

    from ondevice.bits import hamming_reference
    from ondevice.io import sha256_file, write_json

    out.mkdir(parents=True)
    (out / "golden").mkdir()
    student.tokenizer.save(out)
    binarizer.save(out)
    save_file({k: v.detach().numpy().copy() for k, v in student.model.state_dict().items()}, str(out / "student.safetensors"))
    emb = student.encode(texts)
    codes = binarizer.transform(emb)
    rng = np.random.default_rng(SEED)
    catalog = np.concatenate([codes[: len(codes) // 2], codes[:50]])  # duplicates: ties broken by smaller id
    queries = rng.choice(len(codes), 64, replace=False).astype(np.int64)
    d = hamming_reference(codes[queries], catalog)
    order = np.lexsort((np.broadcast_to(np.arange(d.shape[1]), d.shape), d), axis=1)[:, :10]
    g = out / "golden"
    (g / "sentences.jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    (g / "token_ids.txt").write_text("".join(" ".join(map(str, student.tokenizer.ids(t))) + "\n" for t in texts))
    np.save(g / "embeddings.npy", emb.astype(np.float32))
    np.save(g / "codes.npy", codes)
    np.save(g / "catalog_codes.npy", catalog)
    np.save(g / "queries.npy", queries)
    np.save(g / "topk_ids.npy", order.astype(np.int64))
    np.save(g / "topk_dist.npy", np.take_along_axis(d, order, axis=1).astype(np.int32))
    files = {p.relative_to(out).as_posix(): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
             for p in sorted(out.rglob("*")) if p.is_file()}
    cfg = student.config
    write_json(out / "manifest.json", {
        "format": "ondevice-bundle", "format_version": 1, "files": files, "dim": cfg.output_dim,
        "bits": binarizer.bits, "code_bytes": binarizer.code_bytes, "bit_order": "little", "precision": "fp32",
        "tokenizer": student.tokenizer.spec, "student": cfg, "binarizer": binarizer.config,
    })


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("parity"),
                pooling=sys.argv[2] if len(sys.argv) > 2 else "meanmax"))
