import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.student import Student, StudentConfig, cosine_loss
from ondevice.tokenizer import PAD, UNK, Tokenizer

torch = pytest.importorskip("torch")


def _student(pooling="mean", seed=0):
    vocab = [PAD, UNK, "the", "cat", "sat", "dog", "."]
    cfg = StudentConfig(vocab_size=len(vocab), embedding_dim=4, hidden_size=5, pooling=pooling, output_dim=6)
    emb = np.random.default_rng(seed).normal(size=(len(vocab), 4)).astype(np.float32)
    return Student.from_embeddings(cfg, Tokenizer(vocab, max_tokens=8), emb, seed=seed)


@pytest.mark.parametrize("pooling", ["mean", "max", "last", "meanmax"])
def test_padding_and_batching_do_not_change_vectors(pooling):
    s = _student(pooling)
    texts = ["the cat sat .", "dog", "the dog sat on the cat .", ""]
    batched = s.encode(texts, batch_size=4)
    single = np.concatenate([s.encode([t]) for t in texts])
    assert batched.shape == (4, 6)
    np.testing.assert_allclose(batched, single, atol=1e-6)
    assert np.all(np.abs(batched) < 1)  # tanh output


def test_embedding_init_and_parameter_counts():
    s = _student()
    assert np.allclose(s.model.embedding.weight.detach().numpy()[2],
                       np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)[2])
    assert s.num_parameters() - s.num_parameters(embeddings=False) == 7 * 4
    assert s.model.proj.bias is None


def test_save_load_round_trip(tmp_path):
    s = _student("meanmax")
    s.save(tmp_path)
    back = Student.load(tmp_path)
    texts = ["the cat", "sat dog ."]
    np.testing.assert_array_equal(back.encode(texts), s.encode(texts))
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.glob("*.pkl"))


def test_load_errors(tmp_path):
    with pytest.raises(OndeviceError, match="not a student dir"):
        Student.load(tmp_path)
    _student().save(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(OndeviceError, match="corrupt"):
        Student.load(tmp_path)


def test_cosine_loss_values():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert float(cosine_loss(a, a)) == pytest.approx(0.0)
    assert float(cosine_loss(a, -a)) == pytest.approx(1.0)
    assert float(cosine_loss(a, torch.tensor([[0.0, 2.0], [0.0, 1.0]]))) == pytest.approx(0.5)


def test_similarity_matching_loss_against_a_loop():
    torch = pytest.importorskip("torch")
    from ondevice.student import similarity_matching_loss

    rng = np.random.default_rng(0)
    s, t = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    sn, tn = s / np.linalg.norm(s, axis=1, keepdims=True), t / np.linalg.norm(t, axis=1, keepdims=True)
    want = np.mean([(sn[i] @ sn[j] - tn[i] @ tn[j]) ** 2 for i in range(5) for j in range(5) if i != j])
    got = similarity_matching_loss(torch.tensor(s), torch.tensor(t)).item()
    assert got == pytest.approx(want, rel=1e-9)
    # scale-free (cosines), zero for a rescaled teacher, zero for a batch of one
    assert similarity_matching_loss(torch.tensor(3 * t), torch.tensor(t)).item() == pytest.approx(0.0, abs=1e-12)
    assert similarity_matching_loss(torch.tensor(s[:1]), torch.tensor(t[:1])).item() == 0.0


@pytest.mark.parametrize("name", ["model.safetensors", "vocab.txt", "config.json", "distill_config.json"])
def test_a_linked_file_in_a_student_folder_is_refused(tmp_path, name):
    """A student someone sends must not make ondevice read other files of this machine through a symbolic link."""
    import shutil

    from ondevice.distill import DistillConfig, apply_init

    s = tmp_path / "S"
    _student().save(s)
    (s / "distill_config.json").write_text("{}")
    Student.load(s)  # the plain folder loads
    (tmp_path / "elsewhere").mkdir()
    shutil.move(s / name, tmp_path / "elsewhere" / name)  # same bytes, so only the link is wrong
    (s / name).symlink_to(tmp_path / "elsewhere" / name)
    with pytest.raises(OndeviceError, match=rf"^student {s}: {name} is a symbolic link; .*copy the file in instead"):
        Student.load(s)
    with pytest.raises(OndeviceError, match=f"{name} is a symbolic link"):  # `ondevice distill --init-from S`
        apply_init(DistillConfig(corpus="c.txt", teacher="t", init_from=str(s)))
    (tmp_path / "alias").symlink_to(s)  # the folder itself may be a link: only what is inside it may not
    (s / name).unlink()
    shutil.move(tmp_path / "elsewhere" / name, s / name)
    Student.load(tmp_path / "alias")
