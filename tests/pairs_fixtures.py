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


def make_cross_encoder_base(root: Path) -> Path:
    """A 1-layer, 16-d random BERT (word-level vocab) to fine-tune as a cross-encoder."""
    import torch
    import transformers

    path = root / "base"
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!", "?", ","] + WORDS
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(str(path))
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(str(path))
    return path


class PairEnv:
    """Everything a pair test needs, built once per session: data, base model, teacher, student, DSE run, bundle."""

    def __init__(self, root: Path):
        self.root = root
        self.data = make_pair_data(root / "data")
        self.base = make_cross_encoder_base(root)
        self.student = make_student(root)
        self._teacher = None
        self._run = None
        self._bundle = None
        self._plain = None

    def teacher(self) -> Path:
        from ondevice.pairs.crossencoder import CrossEncoderConfig, fine_tune

        if self._teacher is None:
            fine_tune(CrossEncoderConfig(task="stsb", data=str(self.data), base=str(self.base), epochs=2, batch_size=8,
                                         lr=2e-3, logging_steps=3), self.root / "teacher", progress=False)
            self._teacher = self.root / "teacher"
        return self._teacher

    def dse_config(self, **kw):
        from ondevice.pairs.train import DSEConfig

        base = {"task": "stsb", "data": str(self.data), "student": str(self.student), "teacher": str(self.teacher()),
                "alpha": 0.5, "head_hidden": 8, "epochs": 2, "batch_size": 16, "lr": 3e-3, "augment_random": 40}
        base.update(kw)
        return DSEConfig(**base)

    def run(self) -> Path:
        from ondevice.pairs.train import train_dse

        if self._run is None:
            train_dse(self.dse_config(), self.root / "run", progress=False)
            self._run = self.root / "run"
        return self._run

    def bundle(self) -> Path:
        from ondevice.pairs.export import export_pair_bundle

        if self._bundle is None:
            export_pair_bundle(self.run(), self.root / "bundle", bits=64, precision="both", golden=True,
                               with_weights=True)
            self._bundle = self.root / "bundle"
        return self._bundle

    def plain_bundle(self, student: Path | None = None, out: Path | None = None) -> Path:
        """An fp32 bundle of `student` (default: the env's) with no pair head, as `ondevice export` writes it."""
        from ondevice.export.bundle import ExportConfig, export

        from ondevice.binarize import Binarizer
        from ondevice.eval.pair_tasks import load_pairs
        from ondevice.pairs.augment import training_sentences
        from ondevice.student import Student

        if student is None and self._plain is not None:
            return self._plain
        model = Student.load(student or self.student)
        texts = training_sentences(load_pairs("stsb", "train", self.data))
        binarizer = Binarizer.fit(model.encode(texts), method="random", bits=64, seed=0)
        folder = export(model, binarizer, out or self.root / "plain", ExportConfig(precision="fp32", golden=True,
                        golden_count=40), student_dir=student or self.student)[0]
        if student is None:
            self._plain = folder
        return folder


def make_artifacts(env: PairEnv, tiny_teacher: Path, root: Path) -> dict[str, Path]:
    """One artifact of every kind ondevice.layouts knows, each written by its real writer (tiny sizes)."""
    import numpy as np

    from ondevice.binarize import Binarizer
    from ondevice.index import HammingIndex
    from ondevice.pairs.dipair_train import DiPairConfig, train_dipair
    from ondevice.pairs.dvbert import DvBERTConfig, train_dvbert
    from ondevice.pretrained import parse_spec
    from ondevice.scale.shards import build_shards

    rng = np.random.default_rng(0)
    Binarizer.fit(rng.normal(size=(200, 16)).astype(np.float32), "random", 64, seed=0).save(root / "binarizer")
    codes = rng.integers(0, 256, (50, 8), dtype=np.uint8)
    index = HammingIndex(64)
    index.add(codes)
    index.save(root / "codes.idx")
    build_shards(codes, root / "shards", 2)
    common = {"task": "stsb", "data": str(env.data), "student": str(env.student), "augment_random": 20}
    train_dvbert(DvBERTConfig(**common, teachers=[str(env.teacher())], epochs=1, head_hidden=8, max_train_pairs=48),
                 root / "dvbert", progress=False)
    train_dipair(DiPairConfig(**common, teacher=str(env.teacher()), sra_teacher=str(tiny_teacher), n=4, m=4, d=8,
                              ffn=16, stage1_epochs=1, stage2_epochs=0, batch_size=16, layers=1, max_train_pairs=48),
                 root / "dipair", progress=False)
    return {"student": env.student, "binarizer": root / "binarizer", "index": root / "codes.idx",
            "sharded-index": root / "shards", "bundle": parse_spec("pretrained"), "bundles": env.bundle(),
            "cross-encoder": env.teacher(), "dse-run": env.run(), "dvbert-run": root / "dvbert",
            "dipair-run": root / "dipair", "hf-model": tiny_teacher}
