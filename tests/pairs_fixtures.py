"""A tiny fake copy of the shared pair data (same file formats), made in code: gold = word overlap."""

from __future__ import annotations

import random
from pathlib import Path

from conftest import WORDS


def _pair(rng: random.Random) -> tuple[str, str, float]:
    a = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
    b = [w if rng.random() < rng.random() else rng.choice(WORDS) for w in a]
    overlap = len(set(a) & set(b)) / len(set(a) | set(b))
    return " ".join(a).capitalize() + ".", " ".join(b).capitalize() + ".", overlap


def make_pair_data(root: Path, n: int = 120, seed: int = 0) -> Path:
    """STS-B, SICK, MRPC, QQP and SST-2 files with `n` rows per split under `root`."""
    rng = random.Random(seed)
    (root / "stsb").mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        rows = []
        for i in range(n):
            a, b, s = _pair(rng)
            rows.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{5 * s:.3f}\t{a}\t{b}")
        (root / "stsb" / f"sts-{split}.csv").write_text("\n".join(rows) + "\n")
    (root / "sick").mkdir(exist_ok=True)
    for name in ("SICK_train.txt", "SICK_trial.txt"):
        rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        for i in range(n):
            a, b, s = _pair(rng)
            label = "ENTAILMENT" if s > 0.6 else ("NEUTRAL" if s > 0.25 else "CONTRADICTION")
            rows.append(f"{i}\t{a}\t{b}\t{1 + 4 * s:.2f}\t{label}")
        (root / "sick" / name).write_text("\n".join(rows) + "\n")
    raw = root / "mrpc" / "raw_untokenized"
    raw.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = []
        for i in range(n):
            a, b, s = _pair(rng)
            rows.append(f"{int(s > 0.4)}\t{i}\t{i + 1}\t{a}\t{b}")
        (raw / f"msr_paraphrase_{split}.txt").write_text("\ufeff" + "\n".join(rows) + "\n")
    (root / "qqp").mkdir(exist_ok=True)
    rows = []
    for i in range(3 * n):
        a, b, s = _pair(rng)
        rows.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}?\t{b}?\t{int(s > 0.4)}")
    (root / "qqp" / "qqp_glue_train_subset_23k.tsv").write_text("\n".join(rows) + "\n")
    sst = root / "senteval_classification" / "SST" / "binary"
    sst.mkdir(parents=True, exist_ok=True)
    good, bad = WORDS[:15], WORDS[15:]
    for split in ("train", "dev", "test"):
        rows = []
        for _ in range(n):
            label = rng.random() < 0.5
            words = [rng.choice(good if label else bad) for _ in range(rng.randint(3, 8))]
            rows.append(f"{' '.join(words)}\t{int(label)}")
        (sst / f"sentiment-{split}").write_text("\n".join(rows) + "\n")
    return root


def make_student(root: Path, seed: int = 0, output_dim: int = 16) -> Path:
    """A tiny random student (word vocab of the fake data) saved to root/student."""
    import numpy as np

    from ondevice.student import Student, StudentConfig
    from ondevice.tokenizer import Tokenizer

    vocab = ["[PAD]", "[UNK]", ".", "?", *WORDS]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=8, hidden_size=8, pooling="mean", output_dim=output_dim,
                        max_tokens=32)
    emb = np.random.default_rng(seed).normal(0, 0.5, (len(vocab), 8)).astype(np.float32)
    Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=32), emb, seed=seed).save(root / "student")
    return root / "student"
