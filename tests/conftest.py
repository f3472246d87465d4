"""Shared fixtures: a tiny random BERT teacher, a tiny word-vector file and a small corpus, all made here."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "slow", "big", "small", "red", "blue", "house", "tree", "car", "road", "city", "river", "walks", "eats", "sleeps", "runs", "jumps", "sees", "likes", "old", "new", "happy", "sad", "bird", "fish", "sun", "moon"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache dir, so nothing leaks between tests or into ~/.cache."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path_factory.mktemp("cache")))


def make_sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ""]))
    return out


@pytest.fixture(scope="session")
def tiny_teacher(tmp_path_factory) -> Path:
    """A 1-layer, 16-d random BERT with a word-level vocab, saved as a local HF model dir."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("teacher")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "!", "?", ","] + WORDS
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 ignores vocab_file here (every word became [UNK]); the vocab dict is honoured
    tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    ids = tok("the cat sat on the mat")["input_ids"]
    assert ids[1:-1] == [vocab.index(w) for w in ["the", "cat", "sat", "on", "the", "mat"]], ids  # real words, distinct ids
    tok.save_pretrained(str(path))
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_word_vectors(tmp_path_factory) -> Path:
    """GloVe-style text (no header), 8-d, covering the corpus words and punctuation."""
    path = tmp_path_factory.mktemp("wv") / "vectors.txt"
    rng = np.random.default_rng(0)
    lines = [w + " " + " ".join(f"{x:.5f}" for x in rng.normal(size=8)) for w in WORDS + [".", "!", "?"]]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(make_sentences(240)) + "\n")
    return path


@pytest.fixture(scope="session")
def pair_env(tmp_path_factory):
    """Tiny pair data, cross-encoder teacher, student, DSE run and bundle (built lazily, once per session)."""
    pytest.importorskip("sentence_transformers")
    from pairs_fixtures import PairEnv

    return PairEnv(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory):
    """One local Ray for the whole session (a start costs seconds): 2 CPUs, token auth off, temporary HOME."""
    import shutil
    import tempfile

    ray = pytest.importorskip("ray", reason="ray is not installed: the Ray tests need `pip install 'ondevice[scale]'`")
    home = tmp_path_factory.mktemp("rayhome")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must stay under 107 bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("RAY_AUTH_MODE", "disabled")  # recent Ray turns token auth on for local clusters by default
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("RAY_worker_niceness", "0")  # Ray renices workers by +15; on a busy machine they would starve
        ray.init(num_cpus=2, object_store_memory=100 << 20, include_dashboard=False, log_to_driver=False,
                 _temp_dir=temp)
        try:
            yield ray
        finally:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)
