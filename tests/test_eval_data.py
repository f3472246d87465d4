"""Every benchmark reader on tiny fixtures written here, with the quirks their SOURCE.md files list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.eval import data as D


def write(root: Path, rel: str, content: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def test_stsb_extra_columns_and_unicode(tmp_path: Path) -> None:
    write(tmp_path, "stsb/sts-test.csv",
          "main-captions\tMSRvid\t2012test\t0024\t2.500\tA girl is styling her hair.\tA girl is brushing her hair.\n"
          "main-news\theadlines\t2015\t0001\t4.000\tCafé \"quoted\" text\tSecond one\tsource-a\tsource-b\n"
          "main-forums\tdeft\t2014\t0002\t0.000\tx\ty\n")
    pairs = D.read_stsb(tmp_path, "test")
    assert pairs.a == ["A girl is styling her hair.", 'Café "quoted" text', "x"]
    assert pairs.b == ["A girl is brushing her hair.", "Second one", "y"]  # extra columns ignored
    np.testing.assert_allclose(pairs.gold, [2.5, 4.0, 0.0])


def test_stsb_bad_row_and_split(tmp_path: Path) -> None:
    write(tmp_path, "stsb/sts-dev.csv", "g\tf\ty\tid\tnot-a-score\ta\tb\n")
    with pytest.raises(OndeviceError, match="sts-dev.csv:1"):
        D.read_stsb(tmp_path, "dev")
    with pytest.raises(OndeviceError, match="unknown STS-B split"):
        D.read_stsb(tmp_path, "validation")


def test_sick_header(tmp_path: Path) -> None:
    write(tmp_path, "sick/SICK_trial.txt",
          "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
          "4\tThe young boys are playing\tThere is no boy playing\t3.6\tCONTRADICTION\n"
          "24\tA man is cutting\tA man is slicing\t4.9\tENTAILMENT\n")
    pairs = D.read_sick(tmp_path, "trial")
    assert pairs.a == ["The young boys are playing", "A man is cutting"]
    np.testing.assert_allclose(pairs.gold, [3.6, 4.9])


def test_mrpc_bom_and_header_tokenized_copy(tmp_path: Path) -> None:
    write(tmp_path, "mrpc/msr_paraphrase_test.txt",
          "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
          "1\t1089874\t1089925\tPCCW 's chief\tCurrent Chief\n"
          "0\t3019446\t3019327\tThe world 's\tDomestic sales\n")
    pairs = D.read_mrpc(tmp_path, "test")
    assert pairs.a == ["PCCW 's chief", "The world 's"]
    assert pairs.gold.tolist() == [1, 0]


def test_mrpc_prefers_raw_copy_with_bom_no_header(tmp_path: Path) -> None:
    write(tmp_path, "mrpc/msr_paraphrase_test.txt", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ttok 's\tb\n")
    write(tmp_path, "mrpc/raw_untokenized/msr_paraphrase_test.txt", "\ufeff1\t1\t2\tPCCW's chief, Mike.\tb\n")
    assert D.read_mrpc(tmp_path, "test").a == ["PCCW's chief, Mike."]
    assert D.read_mrpc(tmp_path, "test", tokenized=True).a == ["tok 's"]


def test_qqp_malformed_glued_label(tmp_path: Path) -> None:
    write(tmp_path, "qqp/qqp_glue_train_subset_23k.tsv",
          "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration is enough? 0\n"
          "18\t37\t38\tWhy are so many Quora users posting questions?\tWhy do people ask Quora questions?\t1\n")
    pairs = D.read_qqp(tmp_path)
    assert pairs.b == ["Which level of prepration is enough?", "Why do people ask Quora questions?"]
    assert pairs.gold.tolist() == [0, 1]


def test_binary_tasks_keep_empty_lines(tmp_path: Path) -> None:
    write(tmp_path, "senteval_classification/CR/custrev.pos", "great phone .\n\nlove it\n")
    write(tmp_path, "senteval_classification/CR/custrev.neg", "bad battery\n")
    ds = D.read_binary(tmp_path, "cr")
    assert ds.texts == ["great phone .", "", "love it", "bad battery"]  # the empty line counts, as in SentEval
    assert ds.labels.tolist() == [1, 1, 1, 0]


def test_binary_subj_label_is_subjective(tmp_path: Path) -> None:
    write(tmp_path, "senteval_classification/SUBJ/subj.subjective", "i think so\n")
    write(tmp_path, "senteval_classification/SUBJ/subj.objective", "it is 5 km long\nthe film opens in may\n")
    ds = D.read_binary(tmp_path, "subj")
    assert ds.labels.tolist() == [1, 0, 0]


def test_sst_binary_and_fine_formats(tmp_path: Path) -> None:
    write(tmp_path, "senteval_classification/SST/binary/sentiment-train",
          "hide new secretions from the parental units \t0\ncrème brûlée , wonderful\t1\n")
    write(tmp_path, "senteval_classification/SST/fine/sentiment-test",
          "1 no movement , no yuks , not much of anything .\n4 a gem\n")
    b = D.read_sst(tmp_path, "train")
    assert b.texts == ["hide new secretions from the parental units", "crème brûlée , wonderful"]
    assert b.labels.tolist() == [0, 1]
    f = D.read_sst(tmp_path, "test", fine=True)
    assert f.texts == ["no movement , no yuks , not much of anything .", "a gem"]
    assert f.labels.tolist() == [1, 4]


def test_trec_latin1(tmp_path: Path) -> None:
    write(tmp_path, "senteval_classification/TREC/train_5500.label",
          "NUM:dist How far is it from Denver to Aspen ?\n".encode("ascii")
          + "HUM:ind Who is Se\xf1or Fr\xf0ed ?\n".encode("latin-1"))
    write(tmp_path, "senteval_classification/TREC/TREC_10.label", "LOC:city What county is Modesto in ?\n")
    tr = D.read_trec(tmp_path, "train")
    assert tr.texts == ["How far is it from Denver to Aspen ?", "Who is Se\xf1or Fr\xf0ed ?"]
    assert [D.TREC_CLASSES[i] for i in tr.labels] == ["NUM", "HUM"]
    assert D.read_trec(tmp_path, "test").labels.tolist() == [D.TREC_CLASSES.index("LOC")]


def test_trec_unknown_class(tmp_path: Path) -> None:
    write(tmp_path, "senteval_classification/TREC/TREC_10.label", "XYZ:foo What ?\n")
    with pytest.raises(OndeviceError, match="unknown coarse class"):
        D.read_trec(tmp_path, "test")


def test_snli_unique_sentences_trailing_spaces(tmp_path: Path) -> None:
    for split in ("dev", "test"):
        write(tmp_path, f"snli/s1.{split}", "Two women are embracing . \nTwo women are embracing . \n")
        write(tmp_path, f"snli/s2.{split}", f"The sisters hug . \nA {split} hypothesis . \n")
    assert D.read_snli_sentences(tmp_path) == [
        "Two women are embracing .", "The sisters hug .", "A dev hypothesis .", "A test hypothesis .",
    ]


def test_missing_set_is_data_missing(tmp_path: Path) -> None:
    (tmp_path / "stsb").mkdir()
    with pytest.raises(D.DataMissing, match="skipping stsb-test"):
        D.read_stsb(tmp_path, "test")
    with pytest.raises(D.DataMissing, match="skipping mr"):
        D.read_binary(tmp_path, "mr")


def test_bad_data_dir(tmp_path: Path) -> None:
    with pytest.raises(OndeviceError, match="data folder not found"):
        D.check_data_dir(tmp_path / "nope")
    (tmp_path / "unrelated").mkdir()
    with pytest.raises(OndeviceError, match="holds none of the benchmark folders"):
        D.check_data_dir(tmp_path)
    (tmp_path / "sick").mkdir()
    assert D.check_data_dir(tmp_path) == tmp_path


def test_held_out_texts_cover_dev_and_test_but_not_stsb_train():
    from ondevice.corpus import default_data_dir
    from ondevice.eval.data import held_out_texts, read_stsb, train_split_sentences

    data = default_data_dir()
    if not (data / "stsb").is_dir():
        pytest.skip("shared data not present")
    held = held_out_texts(data)
    test = read_stsb(data, "test")
    assert all(s.strip() in held for s in test.a + test.b)
    train = train_split_sentences(data)
    assert train and not (set(train) & held) and len(set(train)) == len(train)
