"""Pair models benchmark: quality on the test split and on-device speed; one results JSON per run.

Quality (per task): the cross-encoder teacher vs the DSE student (every trained alpha; the dev-chosen one is the
headline) vs the plain SRA student with cosine vs the bi-encoder teacher (all-MiniLM-L6-v2) with cosine.
Cosine baselines on binary tasks use a threshold tuned on dev; SICK-E has no cosine baseline (3 classes).
Also: the STS-B test Spearman of the encoder's own cosine and of its 256-bit random-projection Hamming codes,
before (SRA student) and after pair fine-tuning (the DSE run's encoder).

    python benchmarks/pairs.py quality --task stsb --teacher T --run R --student S

Speed (run it on an otherwise idle machine): pairs/s of the cross-encoder (torch, batch 32) vs the bundle's pair head
(onnxruntime, fp32 and int8, precomputed vectors); one query against an N-sentence catalog (wiki sentences
encoded by the int8 bundle): encode + exhaustive head vs encode + Hamming top-1000 + head rerank, recall@10 of the
latter against the former; the cross-encoder's time for the same query is N / its pairs/s (extrapolated).

    python benchmarks/pairs.py speed --teacher T --bundle B --catalog 100000 --threads 1

Seeds (DvBERT (Cheng, 2021) vs DSE): for every seed, a DSE student (alphas picked on dev) and a DvBERT student
(K teacher views, teacher annealing) from the same SRA student; test metrics per seed, mean, sample std, min, max,
and the per-seed DvBERT - DSE difference.

    python benchmarks/pairs.py seeds --task stsb --student S --teachers T0,T1,T0:ba --workdir W --seeds 0,1,2,3,4

DiPair: `dipair-speed` (head pairs/s vs the cross-encoder, head and cache sizes; on an idle machine)
and `dipair-quality` (test metrics of one or more DiPair runs: several runs with different --n/--m/--d/--select are
the ablation table; vs the cross-encoder and a DSE run; SRA cosine before/after).

    python benchmarks/pairs.py dipair-speed --teacher T --n 8 --m 8 --d 128 --threads 1
    python benchmarks/pairs.py dipair-quality --task stsb --teacher T --dse-run R --runs D1 D2 ...

`bundle-quality`: exported bundles' test metrics through the runtime (the head, and a DiPair bundle's head + Hamming
blend), fp32 and int8 folders.

    python benchmarks/pairs.py bundle-quality --task stsb --teacher T --bundles B1 B2 ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ondevice import layouts
from ondevice.eval.pair_tasks import describe_splits
from ondevice.results import flat_metadata, spread, write_flat

ROOT = Path(__file__).resolve().parents[1]


def _meta(argv: list[str], threads: int | None) -> dict:
    return flat_metadata("benchmarks/pairs.py", argv, threads)


def _write(result: dict, kind: str) -> Path:
    """One flat results file per run (tables.py reads this layout), never overwriting an earlier one."""
    path = write_flat(result, f"pairs_{kind}_{result.get('task', 'all')}")
    print(f"wrote {os.path.relpath(path, ROOT)}")
    return path


def _cosine(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    from ondevice.pairs.metrics import cosines

    return cosines(u, v)


def _cosine_metrics(spec, encode, dev, test) -> dict:
    """Cosine of an encoder's vectors as the pair score; binary thresholds tuned on dev."""
    from ondevice.pairs.metrics import cosine_metrics

    return cosine_metrics(spec, encode, dev, test)


def _blend_parts(logits, encode, d) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """One pass over a split: the head's first logit per pair and the pairs' sentence vectors (u, v)."""
    from ondevice.pairs.metrics import pair_vectors

    return np.asarray(logits(d.a, d.b), np.float64)[:, 0], pair_vectors(encode, d.a, d.b)


def _cosine_similarity(uv) -> np.ndarray:
    return _cosine(*uv)


def _hamming_similarity(codes):
    """Minus the Hamming distance of the pairs' packed codes (`codes`: vectors -> packed codes)."""
    from ondevice.pairs.blend import minus_hamming

    return lambda uv: minus_hamming(codes(uv[0]), codes(uv[1]))


def _blend_from_parts(spec, dev, test, parts: dict, similarity, kind: str = "cosine") -> dict:
    """`ondevice.pairs.blend.fit_blend` on dev (z-scores by dev, w and a binary threshold chosen there) from
    `_blend_parts` of both splits, and the test scores of the blend and of the similarity alone."""
    from ondevice.pairs.blend import fit_blend
    from ondevice.pairs.metrics import best_threshold, evaluate_scores

    (hd, uvd), (ht, uvt) = parts["dev"], parts["test"]
    cd, ct = similarity(uvd), similarity(uvt)
    blend, dv = fit_blend(spec, hd, cd, dev.gold, kind)
    cos_t = best_threshold(cd, dev.gold) if spec.kind == "binary" else None
    return {"weight": blend.weight, "weights_tried": dv["weights_tried"],
            "dev": {spec.metric: dv[spec.metric], "head_alone": dv["head_alone"], "cosine_alone": dv["similarity_alone"]},
            "test": evaluate_scores(spec, blend.keys(ht, ct), test.gold, blend.threshold),
            "cosine_alone_test": evaluate_scores(spec, ct, test.gold, cos_t)}


def _blend_metrics(spec, logits, encode, dev, test, codes=None) -> dict:
    """The head's score and its encoder's cosine blended (`_blend_from_parts`); with `codes` (vectors -> packed codes)
    minus the codes' Hamming distance in place of the cosine."""
    if spec.kind == "classes":
        return {"note": "no blend for a 3-class task"}
    parts = {"dev": _blend_parts(logits, encode, dev), "test": _blend_parts(logits, encode, test)}
    if codes is None:
        return _blend_from_parts(spec, dev, test, parts, _cosine_similarity)
    return _blend_from_parts(spec, dev, test, parts, _hamming_similarity(codes), "minus_hamming")


def _blends(spec, model, dev, test, a) -> dict:
    """`blend` (cosine) and, with `a.blend_bits`, `blend_hamming`: the same blend with the Hamming distance of that many
    random-projection bits of the model's vectors (fitted on the task's train sentences, seed 0), which a rerank of
    search candidates already has. The head and the encoder run once per split for both."""
    if spec.kind == "classes":
        return {"blend": {"note": "no blend for a 3-class task"}}
    parts = {"dev": _blend_parts(model.logits, model.vectors, dev), "test": _blend_parts(model.logits, model.vectors, test)}
    out = {"blend": _blend_from_parts(spec, dev, test, parts, _cosine_similarity)}
    if a.blend_bits:
        from ondevice.binarize import Binarizer
        from ondevice.eval.pair_tasks import load_pairs

        train = load_pairs(a.task, "train", a.data)
        binarizer = Binarizer.fit(model.vectors(list(dict.fromkeys([*train.a, *train.b]))), "random", a.blend_bits, seed=0)
        out["blend_hamming"] = {"bits": a.blend_bits, "method": "random",
                                **_blend_from_parts(spec, dev, test, parts, _hamming_similarity(binarizer.transform),
                                                   "minus_hamming")}
    return out


def _hamming_stsb(encode, data: str, fit_texts: list[str], bits: int = 256, seed: int = 0) -> dict:
    from ondevice.binarize import Binarizer
    from ondevice.bits import hamming_reference
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.metrics import pair_vectors, spearman

    test = load_pairs("stsb", "test", data)
    u, v = pair_vectors(encode, test.a, test.b)
    b = Binarizer.fit(encode(fit_texts), method="random", bits=bits, seed=seed)
    cu, cv = b.transform(u), b.transform(v)
    ham = np.array([hamming_reference(cu[i : i + 1], cv[i : i + 1])[0, 0] for i in range(len(cu))])
    return {"cosine_spearman": round(100 * spearman(_cosine(u, v), test.gold), 2),
            "hamming_spearman": round(100 * spearman(-ham, test.gold), 2), "bits": bits, "fit_sentences": len(fit_texts)}


def quality(a: argparse.Namespace, argv: list[str]) -> dict:
    import torch

    from ondevice.corpus import read_corpus
    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.crossencoder import CrossEncoderTeacher, evaluate_teacher
    from ondevice.pairs.train import PairStudent
    from ondevice.student import Student
    from ondevice.teacher import Teacher, cached_vectors

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = task_spec(a.task)
    out = {**_meta(argv, a.threads), "task": a.task, "split_rules": describe_splits()}
    dev, test = load_pairs(a.task, "dev", a.data), load_pairs(a.task, "test", a.data)
    out["sizes"] = {"dev": len(dev), "test": len(test)}
    if a.teacher:
        teacher = CrossEncoderTeacher.load(a.teacher)
        t0 = time.time()
        out["cross_encoder"] = {**evaluate_teacher(teacher, test),
                                "dev": teacher.info.get("dev"), "config": teacher.info["config"],
                                "train_seconds": teacher.info.get("train_seconds"), "seconds": round(time.time() - t0, 1)}
    else:
        out["cross_encoder"] = {"note": "not measured in this run (no --teacher)"}
    run = Path(a.run)
    sel = json.loads((run / "selection.json").read_text()) if (run / "selection.json").is_file() else None
    alphas = {}
    for sub in sorted(run.glob("alpha-*")) if sel else [run]:
        if not (sub / "pair_head.json").is_file():
            continue
        ps = PairStudent.load(sub)
        alphas[sub.name] = {"test": ps.evaluate(test), "dev": json.loads((sub / "dev.json").read_text()),
                            "data": json.loads((sub / "data.json").read_text())}
    out["dse"] = {"selection": sel, "alphas": alphas,
                  "chosen": alphas[sel["chosen_dir"]] if sel else next(iter(alphas.values()))}
    head = spec.metric
    if head in out["cross_encoder"]:
        out["dse"]["ratio_to_cross_encoder"] = round(out["dse"]["chosen"]["test"][head] / out["cross_encoder"][head], 4)
    out["dse"]["config"] = json.loads(((run / sel["chosen_dir"]) if sel else run).joinpath("dse_config.json").read_text())
    sra = Student.load(a.student)
    out["sra_student_cosine"] = ({"note": "not measured in this run (--skip-sra-cosine)"} if a.skip_sra_cosine
                                 else _cosine_metrics(spec, sra.encode, dev, test))
    if a.skip_bi_encoder:
        out["bi_encoder_teacher_cosine"] = {"note": "not measured in this run (--skip-bi-encoder)"}
    else:
        bi = Teacher("all-MiniLM-L6-v2")
        out["bi_encoder_teacher_cosine"] = _cosine_metrics(
            spec, lambda t: np.asarray(cached_vectors(bi, t, progress=False)), dev, test)
    chosen_dir = run / sel["chosen_dir"] if sel else run
    if out["dse"]["config"].get("freeze_encoder"):
        out["encoder_after_pair_finetuning"] = {
            "note": "encoder frozen in this run: its weights, vectors and codes are those of the SRA student "
                    "(bit-identical weights; tests/test_pairs_train.py)"}
        return out
    fit = read_corpus(a.corpus, 10000) if a.corpus else list(dict.fromkeys(load_pairs(a.task, "train", a.data).a))
    out["encoder_after_pair_finetuning"] = {
        "sra_student": _hamming_stsb(sra.encode, a.data, fit),
        "dse_encoder": _hamming_stsb(PairStudent.load(chosen_dir).vectors, a.data, fit),
        "fit_texts": a.corpus or f"{a.task} train first sentences",
    }
    return out


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def speed(a: argparse.Namespace, argv: list[str]) -> dict:
    import torch

    from ondevice.corpus import read_corpus
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.index import HammingIndex
    from ondevice.pairs.crossencoder import CrossEncoderTeacher
    from ondevice.runtime import Bundle

    torch.set_num_threads(a.threads)
    out = {**_meta(argv, a.threads)}
    if a.teacher:
        teacher = CrossEncoderTeacher.load(a.teacher)
        task = teacher.spec.name
        out["cross_encoder_weights"] = "fine-tuned teacher " + a.teacher
    else:  # same architecture and cost as a fine-tuned teacher: MiniLM-L6 + a fresh 1-logit layer
        from sentence_transformers import CrossEncoder

        from ondevice.teacher import resolve_teacher

        base = CrossEncoder(str(resolve_teacher("all-MiniLM-L6-v2")), num_labels=1, max_length=128, device="cpu",
                            local_files_only=True, activation_fn=torch.nn.Identity())
        teacher = type("Untrained", (), {"logits": lambda self, x, y, batch_size=32: base.predict(
            list(zip(x, y)), batch_size=batch_size, show_progress_bar=False)})()
        task = a.task
        out["cross_encoder_weights"] = "packaged all-MiniLM-L6-v2 with a fresh 1-logit layer (speed only)"
    out["task"] = task
    test = load_pairs(task, "test", a.data)
    n = min(a.ce_pairs, len(test))
    pa, pb = test.a[:n], test.b[:n]
    teacher.logits(pa[:32], pb[:32], batch_size=32)  # warm-up
    ce_s = _median_time(lambda: teacher.logits(pa, pb, batch_size=32), a.repeats)
    ce_pps = n / ce_s
    out["cross_encoder"] = {"pairs": n, "batch": 32, "seconds_median": ce_s, "pairs_per_s": round(ce_pps, 1)}

    int8 = Bundle.load(a.bundle, precision="int8", threads=a.threads)
    fp32 = Bundle.load(a.bundle, precision="fp32", threads=a.threads)
    sizes = {p: {"pair_head.onnx": (Path(b.path) / "pair_head.onnx").stat().st_size,
                 "encoder.onnx": (Path(b.path) / "encoder.onnx").stat().st_size} for p, b in (("int8", int8), ("fp32", fp32))}
    out["sizes_bytes"] = sizes
    catalog = read_corpus(a.corpus, a.catalog)
    t = time.perf_counter()
    vectors, codes = int8.embed(catalog, batch_size=256)
    out["catalog"] = {"sentences": len(catalog), "source": a.corpus, "encode_seconds": round(time.perf_counter() - t, 1),
                      "bits": int8.bits}
    index = HammingIndex(bits=int8.bits, threads=a.threads)
    index.add(codes)
    int8.attach_index(index)

    head_rows = {}
    for name, b in (("int8", int8), ("fp32", fp32)):
        scorer = b.pair_head(threads=a.threads)
        q = b.encode([test.a[0]])
        scorer.logits(q, vectors[:1000])
        s = _median_time(lambda scorer=scorer, q=q: scorer.logits(q, vectors), a.repeats)
        head_rows[name] = {"pairs": len(vectors), "seconds_median": s, "pairs_per_s": round(len(vectors) / s, 1),
                           "x_cross_encoder": round(len(vectors) / s / ce_pps, 1)}
    out["head"] = head_rows

    queries = list(dict.fromkeys(test.b))[: a.queries]
    scorer = int8.pair_head(threads=a.threads)
    recalls, t_exh, t_fast, t_enc = [], [], [], []
    for qtext in queries:
        t0 = time.perf_counter()
        _, exh = int8.rerank(qtext, vectors, k=10)
        t_exh.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _, fast = scorer.search_rerank(qtext, vectors, k=10, shortlist=a.shortlist)
        t_fast.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        int8.encode([qtext])
        t_enc.append(time.perf_counter() - t0)
        recalls.append(len(set(exh.tolist()) & set(fast.tolist())) / 10)
    ce_query = len(vectors) / ce_pps
    fast_s, exh_s = float(np.median(t_fast)), float(np.median(t_exh))
    out["one_query"] = {
        "queries": len(queries), "catalog": len(vectors), "shortlist": a.shortlist,
        "encode_seconds_median": float(np.median(t_enc)),
        "exhaustive_head_seconds_median": exh_s, "hamming_plus_head_seconds_median": fast_s,
        "cross_encoder_seconds_extrapolated": round(ce_query, 1),
        "x_cross_encoder_exhaustive_head": round(ce_query / exh_s, 1),
        "x_cross_encoder_hamming_plus_head": round(ce_query / fast_s, 1),
        "recall_at_10_vs_exhaustive_head": round(float(np.mean(recalls)), 4),
        "recall_at_10_min": round(float(np.min(recalls)), 2),
    }
    return out


def seeds(a: argparse.Namespace, argv: list[str]) -> dict:
    """DvBERT vs DSE over several seeds: train each (or reuse finished runs in --workdir), test metrics, mean and spread."""
    import torch

    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.crossencoder import evaluate_teacher
    from ondevice.pairs.dvbert import _RESUME_KEYS as DVBERT_KEYS
    from ondevice.pairs.dvbert import DvBERTConfig, finished, train_dvbert
    from ondevice.pairs.metrics import evaluate_scores
    from ondevice.pairs.train import DSEConfig, PairStudent, train_dse_alphas
    from ondevice.pairs.views import MeanTeacher, open_view, parse_teachers, parse_view
    from ondevice.trainloop import same_settings

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = task_spec(a.task)
    seed_list = [int(x) for x in a.seeds.split(",") if x.strip()]
    views = parse_teachers(a.teachers, a.both_orders)
    if not views:
        raise SystemExit("--teachers needs at least one teacher dir")
    dse_teacher = a.dse_teacher or parse_view(views[0])[0]
    alphas = [float(x) for x in a.dse_alphas.split(",") if x.strip()]
    work = Path(a.workdir)
    test = load_pairs(a.task, "test", a.data)
    out = {**_meta(argv, a.threads), "task": a.task, "metric": spec.metric, "seeds": seed_list, "test_pairs": len(test),
           "dvbert_teachers": views, "dse_teacher": dse_teacher, "dse_alphas": alphas, "workdir": str(work)}
    common = {"task": a.task, "data": a.data, "student": a.student, "epochs": a.epochs, "batch_size": a.batch_size,
              "lr": a.lr, "max_train_pairs": a.max_train_pairs, "threads": a.threads, "device": a.device,
              # the same transfer set for both students, each scored by its own teacher(s)
              "augment_random": a.augment_random, "augment_neighbors": a.augment_neighbors,
              "augment_tasks": a.augment_tasks, "augment_edits": a.augment_edits}
    dv_augment = {} if a.dvbert_augment else {"augment_random": 0, "augment_neighbors": 0, "augment_tasks": "",
                                                "augment_edits": 0}
    out["dvbert_augment"] = bool(a.dvbert_augment)
    rows: dict[str, dict] = {"dse": {}, "dvbert": {}}
    for seed in seed_list:
        dse_dir = work / f"dse-seed{seed}"
        dcfg = DSEConfig(teacher=dse_teacher, seed=seed, **common)
        # a rerun continues (or reuses) what the last one left; a first run starts (resume=True refuses an empty folder)
        started = any((sub / "checkpoint").exists() or (sub / "train_log.jsonl").is_file() for sub in dse_dir.glob("alpha-*"))
        sel = train_dse_alphas(dcfg, dse_dir, alphas, resume=started, progress=not a.quiet)
        chosen = dse_dir / sel["chosen_dir"]
        rows["dse"][seed] = {"test": PairStudent.load(chosen).evaluate(test), "dev": sel["dev"][f"{sel['chosen_alpha']:g}"],
                             "chosen_alpha": sel["chosen_alpha"],
                             # every alpha's test figures too: DSE's paper compares alphas on them
                             "alphas_test": {f"{x:g}": PairStudent.load(dse_dir / f"alpha-{x:g}").evaluate(test) for x in alphas}}
        dv_dir = work / f"dvbert-seed{seed}"
        vcfg = DvBERTConfig(teachers=views, anneal=a.anneal, head=a.head, seed=seed, **{**common, **dv_augment})
        if finished(dv_dir, vcfg.epochs):
            same_settings(dv_dir, vcfg, layouts.DVBERT_CONFIG, "DvBERT config", DVBERT_KEYS)
        else:
            train_dvbert(vcfg, dv_dir, resume=(dv_dir / "checkpoint").exists(), progress=not a.quiet)
        rows["dvbert"][seed] = {"test": PairStudent.load(dv_dir).evaluate(test),
                                "dev": json.loads((dv_dir / "dev.json").read_text())}
        if not a.quiet:
            print(f"seed {seed}: DSE {rows['dse'][seed]['test'][spec.metric]}, DvBERT {rows['dvbert'][seed]['test'][spec.metric]}",
                  flush=True)
    out["runs"] = {m: {str(k): v for k, v in r.items()} for m, r in rows.items()}
    metrics = [k for k, v in next(iter(rows["dse"].values()))["test"].items() if isinstance(v, (int, float))]
    out["summary"] = {m: {k: spread([r[s]["test"][k] for s in seed_list]) for k in metrics} for m, r in rows.items()}
    diff = [rows["dvbert"][s]["test"][spec.metric] - rows["dse"][s]["test"][spec.metric] for s in seed_list]
    dev_diff = [rows["dvbert"][s]["dev"][spec.metric] - rows["dse"][s]["dev"][spec.metric] for s in seed_list]
    # dev picked the epoch (both) and the alpha (DSE), so dev figures are the selected ones, optimistic for both
    out["summary_dev"] = {m: {spec.metric: spread([r[s]["dev"][spec.metric] for s in seed_list])} for m, r in rows.items()}
    out["dvbert_minus_dse"] = {"metric": spec.metric, "per_seed": spread(diff), "dev_per_seed": spread(dev_diff)}
    d, e = out["summary"]["dvbert"][spec.metric], out["summary"]["dse"][spec.metric]
    widest = max(d["std"] or 0.0, e["std"] or 0.0)
    out["dvbert_minus_dse"]["beyond_seed_spread"] = bool(d["mean"] - e["mean"] > widest) if len(seed_list) > 1 else None
    out["dvbert_config"] = vcfg.to_dict()
    out["dse_alphas_test"] = {f"{x:g}": {spec.metric: spread([rows["dse"][s]["alphas_test"][f"{x:g}"][spec.metric]
                                                               for s in seed_list])} for x in alphas}
    if not a.skip_teachers:
        out["teachers_test"] = {}
        loaded = {v: open_view(v, a.task, a.data, device=a.device) for v in dict.fromkeys(parse_view(p)[0] for p in views)}
        for v, teacher in loaded.items():
            out["teachers_test"][v] = evaluate_teacher(teacher, test)
        if spec.kind == "regression":  # the views' mean logit: what DvBERT's loss averages over, as one teacher
            mean = MeanTeacher([(p, o, loaded[p]) for p, o in map(parse_view, views)], a.data)
            out["teachers_mean_test"] = evaluate_scores(spec, mean.logits(test.a, test.b), test.gold, None)
    return out


def _ce_pairs_per_s(a: argparse.Namespace, task: str) -> tuple[dict, str]:
    """Cross-encoder pairs/s (torch, batch 32) on the task's test pairs: a fine-tuned teacher or the same-cost MiniLM."""
    import torch

    from ondevice.eval.pair_tasks import load_pairs

    if a.teacher:
        from ondevice.pairs.crossencoder import CrossEncoderTeacher

        teacher, weights = CrossEncoderTeacher.load(a.teacher), "fine-tuned teacher " + a.teacher
        task = teacher.spec.name
    else:
        from sentence_transformers import CrossEncoder

        from ondevice.teacher import resolve_teacher

        base = CrossEncoder(str(resolve_teacher("all-MiniLM-L6-v2")), num_labels=1, max_length=128, device="cpu",
                            local_files_only=True, activation_fn=torch.nn.Identity())
        teacher = type("Untrained", (), {"logits": lambda self, x, y, batch_size=32: base.predict(
            list(zip(x, y)), batch_size=batch_size, show_progress_bar=False)})()
        weights = "packaged all-MiniLM-L6-v2 with a fresh 1-logit layer (speed only)"
    test = load_pairs(task, "test", a.data)
    n = min(a.ce_pairs, len(test))
    teacher.logits(test.a[:8], test.b[:8], batch_size=32)  # warm-up
    s = _median_time(lambda: teacher.logits(test.a[:n], test.b[:n], batch_size=32), a.repeats)
    return {"pairs": n, "batch": 32, "seconds_median": s, "pairs_per_s": round(n / s, 1), "weights": weights}, task


def dipair_speed(a: argparse.Namespace, argv: list[str]) -> dict:
    """DiPair head pairs/s (onnxruntime, fp32 and int8 graphs, one query's states against P cached items) vs the
    cross-encoder; head and per-item cache sizes. Without --run the head has random weights of the given shape
    (its cost does not depend on the weights)."""
    import torch

    from ondevice.pairs.dipair import (
        DiPairHeadConfig,
        build_head,
        build_projection,
        head_weights,
        load_head_weights,
    )
    from ondevice.pairs.dipair_export import build_head_graph, build_int8_head_graph

    torch.set_num_threads(a.threads)
    out = {**_meta(argv, a.threads)}
    ce, task = _ce_pairs_per_s(a, a.task)
    out["task"], out["cross_encoder"] = task, ce
    if a.run:
        cfg, w = load_head_weights(a.run)
        out["head_weights"] = "trained: " + a.run
    else:
        cfg = DiPairHeadConfig(in_dim=1024, n=a.n, m=a.m, d=a.d, layers=a.layers, heads=a.heads, ffn=a.ffn,
                               vec_dim=384 if a.pooled_slot else 0)
        torch.manual_seed(0)
        w = {f"proj.{k}": v.numpy() for k, v in build_projection(cfg).state_dict().items()}
        w.update({k: v.numpy() for k, v in build_head(cfg).state_dict().items()})
        out["head_weights"] = "random (speed and size only)"
    from ondevice.ort_session import cpu_session, session_options

    options = session_options(a.threads)
    rng = np.random.default_rng(0)
    sa = np.tanh(rng.normal(0, 0.8, (1, cfg.n, cfg.d))).astype(np.float32)
    sb = np.tanh(rng.normal(0, 0.8, (a.pairs, cfg.m, cfg.d))).astype(np.float32)
    rows = {}
    for name, graph in (("fp32", build_head_graph(cfg, w)), ("int8", build_int8_head_graph(cfg, w))):
        data = graph.SerializeToString()
        sess = cpu_session(data, options)

        def run(sess=sess):
            for s in range(0, a.pairs, a.batch):
                b = sb[s : s + a.batch]
                sess.run(["logits"], {"states_a": np.broadcast_to(sa, (len(b), cfg.n, cfg.d)).copy(), "states_b": b})
        run()
        t = _median_time(run, a.repeats)
        rows[name] = {"pairs": a.pairs, "batch": a.batch, "seconds_median": t, "pairs_per_s": round(a.pairs / t, 1),
                      "x_cross_encoder": round(a.pairs / t / ce["pairs_per_s"], 1), "onnx_bytes": len(data)}
    out["head"] = rows
    out["shape"] = {"n": cfg.n, "m": cfg.m, "d": cfg.d, "layers": cfg.layers, "heads": cfg.heads, "ffn": cfg.ffn,
                    "pooled_slot": cfg.pooled,
                    "head_parameters_without_projection": int(sum(v.size for v in head_weights(w).values())),
                    "cache_bytes_per_item_int8": cfg.cache_bytes(True), "cache_bytes_per_item_fp32": cfg.cache_bytes(False)}
    return out


def _oov_differs(tokenizer, data) -> np.ndarray:
    """Per pair: whether its two sides hold different sets of words outside the encoder's vocabulary."""
    from ondevice.tokenizer import tokenize

    vocab = set(tokenizer.vocab)

    def oov(text: str) -> frozenset:
        return frozenset(w for w in tokenize(text) if w not in vocab)

    return np.array([oov(x) != oov(y) for x, y in zip(data.a, data.b)], bool)


def _oov_split(spec, logits: np.ndarray, data, threshold, differs: np.ndarray) -> dict:
    """Test metrics on the pairs whose sides differ in out-of-vocabulary words and on the rest (same threshold): how
    much of a student's gap to its teacher comes from words its vocabulary lacks."""
    from ondevice.pairs.metrics import evaluate_scores

    gold = np.asarray(data.gold)
    return {part: evaluate_scores(spec, logits[mask], gold[mask], threshold)
            for part, mask in (("oov_differs", differs), ("rest", ~differs))}


def _student_setting(student: str, seed: int) -> str:
    """A DiPair run's --student as grouping sees it: the encoder of a DSE run trained with the same seed stands for that
    DSE setting (its config without seed and threads), so DiPair runs started from each seed's DSE run are seeds of one
    setting; any other student is its path."""
    config = Path(student).parent / "dse_config.json"
    if Path(student).name == "student" and config.is_file():
        dse = json.loads(config.read_text())
        if dse.get("seed") == seed:
            return "DSE run " + json.dumps({k: v for k, v in dse.items() if k not in ("seed", "threads")}, sort_keys=True)
    return student


def _setting_key(config: dict) -> str:
    """What makes DiPair runs one setting: their config but the seed and threads (the data folder by its real path: a
    run started from another checkout names it through another link)."""
    key = {k: v for k, v in config.items() if k not in ("seed", "threads")}
    key["data"] = os.path.realpath(config.get("data", ""))
    key.setdefault("loss", "bce")  # runs from before --loss trained with BCE
    if "student" in config:
        key["student"] = _student_setting(config["student"], config.get("seed"))
    return json.dumps(key, sort_keys=True)


def dipair_quality(a: argparse.Namespace, argv: list[str]) -> dict:
    """Test metrics of DiPair runs (one per --runs folder: the N, M, D ablation when several) vs the cross-encoder and
    the DSE run; held-out SRA cosine before/after and the STS-B cosine/Hamming of the fine-tuned encoder."""
    import torch

    from ondevice.corpus import read_corpus
    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.crossencoder import evaluate_teacher
    from ondevice.pairs.dipair_train import DiPairStudent
    from ondevice.pairs.train import PairStudent, chosen_run
    from ondevice.pairs.views import open_teacher

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = task_spec(a.task)
    out = {**_meta(argv, a.threads), "task": a.task}
    test = load_pairs(a.task, "test", a.data)
    dev = load_pairs(a.task, "dev", a.data) if a.blend else None
    head = spec.metric
    teacher = open_teacher(a.teacher, a.task, a.data) if a.teacher else None
    if teacher is not None:
        out["cross_encoder"] = evaluate_teacher(teacher, test)
    dse = []
    for d in a.dse_run or []:
        run = chosen_run(d)
        student = PairStudent.load(run)
        split = {}
        if a.oov_split:
            differs = _oov_differs(student.student.tokenizer, test)
            split["oov_split"] = _oov_split(spec, student.logits(test.a, test.b), test, student.head_cfg.threshold, differs)
        dse.append({"run": str(run), "test": student.evaluate(test), **split,
                    **({"soup": json.loads((run / "soup.json").read_text())} if (run / "soup.json").is_file() else {}),
                    **(_blends(spec, student, dev, test, a) if a.blend else {})})
    if dse:
        # Several DSE runs (seeds): each DiPair row is compared with their mean, and the summary sets both spreads side by side.
        out["dse"] = dse[0] if len(dse) == 1 else {"run": dse[0]["run"], "runs": dse, "test": {
            head: round(float(np.mean([d["test"][head] for d in dse])), 2)}}
    rows = []
    for r in a.runs:
        ds = DiPairStudent.load(r)
        row = {"run": r, "config": json.loads((Path(r) / "dipair_config.json").read_text()), "test": ds.evaluate(test),
               "dev": json.loads((Path(r) / "dev.json").read_text()),
               "sra_cosine": json.loads((Path(r) / "sra_cosine.json").read_text()),
               "train_log": [json.loads(line) for line in (Path(r) / "train_log.jsonl").read_text().splitlines()],
               "cache_bytes_per_item_int8": ds.cfg.cache_bytes(True)}
        if (Path(r) / "soup.json").is_file():  # a folder of `ondevice pairs soup`: what it compared, kept or not
            row["soup"] = json.loads((Path(r) / "soup.json").read_text())
        if "cross_encoder" in out:
            row["ratio_to_cross_encoder"] = round(row["test"][head] / out["cross_encoder"][head], 4)
        if "dse" in out:
            row["minus_dse_points"] = round(row["test"][head] - out["dse"]["test"][head], 2)
        if a.blend:
            row.update(_blends(spec, ds, dev, test, a))
        if a.oov_split:
            differs = _oov_differs(ds.student.tokenizer, test)
            row["oov_split"] = _oov_split(spec, ds.logits(test.a, test.b), test, ds.cfg.threshold, differs)
            if teacher is not None:  # the cross-encoder on the same split (it reads word pieces: no word is out of its vocabulary)
                from ondevice.pairs.logits import teacher_logits

                row["oov_split_cross_encoder"] = _oov_split(spec, teacher_logits(teacher, test.a, test.b, progress=False),
                                                            test, teacher.info.get("threshold"), differs)
            row["oov_differs_pairs"] = int(differs.sum())
        if not a.skip_hamming:
            fit = read_corpus(a.corpus, 10000) if a.corpus else list(dict.fromkeys(load_pairs(a.task, "train", a.data).a))
            row["encoder_stsb"] = _hamming_stsb(ds.vectors, a.data, fit)
        rows.append(row)
    out["dipair"] = rows
    # each run's own teacher (a cross-encoder, or several views as their mean) on test, beside --teacher's
    own = [r["config"]["teacher"] for r in rows]
    own += [json.loads((Path(d["run"]) / "dse_config.json").read_text()).get("teacher", "") for d in dse]
    out["run_teachers_test"] = {t: evaluate_teacher(open_teacher(t, a.task, a.data), test)
                                for t in dict.fromkeys(own) if t and t != a.teacher}
    # DiPair runs that differ only in their seed are seeds of one setting: their mean and spread are a result (the
    # rows of an ablation are not).
    settings = {_setting_key(r["config"]) for r in rows}
    seeds = len(rows) > 1 and len(settings) == 1
    if seeds or len(dse) > 1:
        paired = None
        if seeds:  # each DiPair seed against the DSE run of the same seed, where both were given
            dse_seeds = [json.loads((Path(d["run"]) / "dse_config.json").read_text()).get("seed") for d in dse]
            paired = paired_by_seed([(r["config"].get("seed"), r["test"][head]) for r in rows],
                                    [(sd, d["test"][head]) for sd, d in zip(dse_seeds, dse)])
        out["summary"] = dipair_summary(head, [r["test"][head] for r in rows] if seeds else [],
                                        [d["test"][head] for d in dse], out.get("cross_encoder", {}).get(head), paired)
        if a.blend and spec.kind != "classes":
            out["summary_blend"] = dipair_summary(head, [r["blend"]["test"][head] for r in rows] if seeds else [],
                                                  [d["blend"]["test"][head] for d in dse], out.get("cross_encoder", {}).get(head))
            if a.blend_bits:
                out["summary_blend_hamming"] = dipair_summary(
                    head, [r["blend_hamming"]["test"][head] for r in rows] if seeds else [],
                    [d["blend_hamming"]["test"][head] for d in dse], out.get("cross_encoder", {}).get(head))
            out["summary_cosine_alone"] = dipair_summary(
                head, [r["blend"]["cosine_alone_test"][head] for r in rows] if seeds else [],
                [d["blend"]["cosine_alone_test"][head] for d in dse], out.get("cross_encoder", {}).get(head))
    return out


def bundle_quality(a: argparse.Namespace, argv: list[str]) -> dict:
    """Test metrics of exported pair bundles through the runtime (`ondevice.pairs.bundle_eval`): the head and, for a
    DiPair bundle with one, the head + Hamming blend it ranks by; each row with its manifest's dev blend. Bundles that
    are seeds of one setting: mean and spread of both."""
    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.io import read_json
    from ondevice.pairs.bundle_eval import evaluate_pair_bundle
    from ondevice.pairs.crossencoder import evaluate_teacher
    from ondevice.pairs.views import open_teacher

    spec = task_spec(a.task)
    out = {**_meta(argv, a.threads), "task": a.task}
    test = load_pairs(a.task, "test", a.data)
    if a.teacher:
        out["cross_encoder"] = evaluate_teacher(open_teacher(a.teacher, a.task, a.data), test)
    rows = []
    dev = None
    for b in a.bundles:
        for precision in a.precision:
            row = evaluate_pair_bundle(b, test, precision=precision, threads=a.threads)
            manifest = read_json(Path(row["bundle"]) / "manifest.json", "bundle manifest")  # loaded and verified just now
            block = manifest.get("dipair") or manifest.get("pairs")
            row.update({"run": (block.get("run") or {}).get("config"), "dev_blend": (block.get("blend") or {}).get("dev"),
                        "blend_constants": {k: v for k, v in (block.get("blend") or {}).items()
                                            if k in ("weight", "head_mean", "head_std", "sim_mean", "sim_std", "threshold")},
                        "encoder": block.get("encoder"),
                        "bytes": {"bundle": sum(e["bytes"] for e in manifest["files"].values())
                                            + (Path(row["bundle"]) / "manifest.json").stat().st_size,
                                  "head": sum(manifest["files"][block[f]]["bytes"] for f in ("file", "weights") if f in block)}})
            if row["head_kind"] == "pairs" and spec.kind != "classes":  # what the bundle's cosine gives without the head
                from ondevice.pairs.metrics import cosine_metrics
                from ondevice.runtime import Bundle

                dev = dev or load_pairs(a.task, "dev", a.data)
                row["cosine"] = cosine_metrics(spec, Bundle.load(row["bundle"], threads=a.threads).encode, dev, test)
            if "cross_encoder" in out:
                for part in ("head", "blend"):
                    if part in row:
                        row[part]["ratio_to_cross_encoder"] = round(row[part][spec.metric] / out["cross_encoder"][spec.metric], 4)
            rows.append(row)
    out["bundles"] = rows
    ce = out.get("cross_encoder", {}).get(spec.metric)
    # per head kind (DiPair `dipair`, DSE `pairs`) and precision: mean and spread of the head and of the blend
    out["summary"] = {}
    for kind in dict.fromkeys(r["head_kind"] for r in rows):
        for precision in a.precision:
            mine = [r for r in rows if r["head_kind"] == kind and r["precision"] == precision]
            out["summary"].setdefault(kind, {})[precision] = {
                part: {**spread([r[part][spec.metric] for r in mine]),
                       **({"ratio_of_mean": round(float(np.mean([r[part][spec.metric] for r in mine])) / ce, 4)} if ce else {})}
                for part in ("head", "blend") if mine and all(part in r for r in mine)}
    if {"dipair", "pairs"} <= set(out["summary"]):  # DiPair's lead over DSE, each as it ranks on device
        out["dipair_minus_dse"] = {p: {part: round(out["summary"]["dipair"][p][part]["mean"] - out["summary"]["pairs"][p][part]["mean"], 2)
                                       for part in ("head", "blend") if part in out["summary"]["dipair"][p]
                                       and part in out["summary"]["pairs"][p]} for p in a.precision}
    return out


def paired_by_seed(dipair: list[tuple[int, float]], dse: list[tuple[int, float]]) -> dict | None:
    """DiPair - DSE seed by seed, for the seeds both have ((seed, metric) pairs); None with fewer than two."""
    theirs = dict(dse)
    both = sorted(seed for seed, _ in dipair if seed in theirs)
    if len(both) < 2:
        return None
    mine = dict(dipair)
    diffs = [round(mine[seed] - theirs[seed], 2) for seed in both]
    return {"seeds": both, "differences": diffs, "median": round(float(np.median(diffs)), 3),
            "min": min(diffs), "max": max(diffs)}


def dipair_summary(metric: str, dipair: list[float], dse: list[float], cross_encoder: float | None,
                   paired: dict | None = None) -> dict:
    """Mean and spread of the DiPair seeds' and the DSE runs' test metric, the difference of means, the mean's ratio
    to the cross-encoder (each part where its runs were given), and `paired` (paired_by_seed) where given."""
    summary: dict = {"metric": metric}
    if paired:
        summary["paired_by_seed"] = paired
    if dipair:
        summary["dipair"] = spread(dipair)
        if cross_encoder:
            summary["mean_ratio_to_cross_encoder"] = round(summary["dipair"]["mean"] / cross_encoder, 4)
    if dse:
        summary["dse"] = spread(dse)
        if cross_encoder:
            summary["dse_mean_ratio_to_cross_encoder"] = round(summary["dse"]["mean"] / cross_encoder, 4)
    if dipair and dse:
        summary["difference_of_means"] = round(summary["dipair"]["mean"] - summary["dse"]["mean"], 3)
    return summary


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from ondevice.corpus import WIKI_RELPATH, default_data_dir
    from ondevice.pairs.dipair_train import DiPairConfig  # dipair-speed's random head: `pairs dipair`'s shape

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--task", required=True)
    q.add_argument("--teacher", default=None, help="cross-encoder teacher dir (its row is skipped without one)")
    q.add_argument("--run", required=True)
    q.add_argument("--skip-bi-encoder", action="store_true", help="leave out the all-MiniLM-L6-v2 cosine row")
    q.add_argument("--skip-sra-cosine", action="store_true", help="leave out the SRA student's cosine row")
    q.add_argument("--student", required=True, help="the SRA student the DSE run started from")
    q.add_argument("--corpus", default=None, help="sentences to fit the 256-bit random projection on (default: task train)")
    q.add_argument("--threads", type=int, default=0)
    s = sub.add_parser("speed")
    s.add_argument("--teacher", default=None, help="cross-encoder teacher dir; default: the packaged MiniLM as a "
                   "cross-encoder with an untrained output layer (same cost)")
    s.add_argument("--task", default="stsb", help="test pairs and queries of this task (without --teacher)")
    s.add_argument("--bundle", required=True, help="`ondevice pairs export --precision both` folder")
    s.add_argument("--catalog", type=int, default=100000)
    s.add_argument("--queries", type=int, default=20)
    s.add_argument("--shortlist", type=int, default=1000)
    s.add_argument("--ce-pairs", type=int, default=256)
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--threads", type=int, default=1)
    v = sub.add_parser("seeds", help="DvBERT vs DSE over several seeds (mean and spread of test metrics)")
    v.add_argument("--task", required=True)
    v.add_argument("--student", required=True, help="the SRA student both start from")
    v.add_argument("--teachers", required=True, help="DvBERT teacher views, comma-separated (DIR, DIR:ba or "
                   "bi-encoder[:MODEL_DIR])")
    v.add_argument("--both-orders", action="store_true", help="add the (b, a) view of every teacher")
    v.add_argument("--dse-teacher", default=None, help="DSE's teacher (default: the first of --teachers)")
    v.add_argument("--dse-alphas", default="0,0.5,1", help="DSE alphas per seed, dev picks one (as `pairs train`)")
    v.add_argument("--seeds", default="0,1,2,3,4")
    v.add_argument("--workdir", required=True, help="run folders dse-seed<S>/ and dvbert-seed<S>/ (finished ones are reused)")
    v.add_argument("--anneal", default="linear")
    v.add_argument("--head", default="auto")
    v.add_argument("--epochs", type=int, default=4)
    v.add_argument("--batch-size", type=int, default=32)
    v.add_argument("--lr", type=float, default=5e-4)
    v.add_argument("--augment-random", type=int, default=5000, help="augmentation pairs of both students (DSE's "
                   "transfer set; DvBERT's are scored by all its teachers)")
    v.add_argument("--augment-neighbors", type=int, default=1)
    v.add_argument("--augment-tasks", default="", help="other tasks' train text as augmentation (e.g. sick,mrpc,qqp)")
    v.add_argument("--augment-edits", type=int, default=0, help="edited copies of every training pair")
    v.add_argument("--dvbert-augment", action=argparse.BooleanOptionalAction, default=True,
                   help="DvBERT trains on the augmentation pairs too (--no-dvbert-augment: training pairs only, as "
                        "until commit 383dddd, 2026-11-26)")
    v.add_argument("--max-train-pairs", type=int, default=None)
    v.add_argument("--skip-teachers", action="store_true", help="leave out the teachers' own test metrics")
    v.add_argument("--threads", type=int, default=0)
    v.add_argument("--device", default="cpu", help="torch device the students train on (cpu, cuda, auto)")
    v.add_argument("--quiet", action="store_true")
    ds = sub.add_parser("dipair-speed")
    ds.add_argument("--teacher", default=None, help="cross-encoder teacher dir (default: the same-cost packaged MiniLM)")
    ds.add_argument("--task", default="stsb")
    ds.add_argument("--run", default=None, help="`ondevice pairs dipair` run folder whose trained head to time (default: a random head)")
    shape = DiPairConfig.flat_defaults()
    for name in ("n", "m", "d", "layers", "heads", "ffn"):
        ds.add_argument(f"--{name}", type=int, default=shape[name])
    ds.add_argument("--pooled-slot", action=argparse.BooleanOptionalAction, default=shape["pooled_slot"],
                    help="random head with a pooled slot (384-d sentence vectors)")
    ds.add_argument("--pairs", type=int, default=100000, help="cached items one query is scored against")
    ds.add_argument("--batch", type=int, default=256, help="pairs per head call (256 keeps the activations in cache)")
    ds.add_argument("--ce-pairs", type=int, default=256)
    ds.add_argument("--repeats", type=int, default=3)
    ds.add_argument("--threads", type=int, default=1)
    dq = sub.add_parser("dipair-quality")
    dq.add_argument("--task", required=True)
    dq.add_argument("--teacher", default=None)
    dq.add_argument("--dse-run", nargs="+", default=None,
                    help="DSE run(s) to compare with (selection.json parent or an alpha folder); several (seeds): their mean")
    dq.add_argument("--runs", nargs="+", required=True, help="DiPair run folders (several: the N, M, D ablation table)")
    dq.add_argument("--skip-hamming", action="store_true", help="leave out the STS-B cosine/Hamming of each encoder")
    dq.add_argument("--blend-bits", type=int, default=0, help="with --blend: also blend with minus the Hamming distance "
                                                                "of this many random-projection bits (fitted on task train text)")
    dq.add_argument("--blend", action="store_true", help="also each run's encoder cosine alone and blended with its head "
                                                         "(z-scores, the cosine's weight chosen on dev), DiPair and DSE alike")
    dq.add_argument("--oov-split", action="store_true", help="also every model's test metrics on the pairs whose sides "
                    "differ in words outside the run's vocabulary, and on the rest")
    dq.add_argument("--corpus", default=None)
    dq.add_argument("--threads", type=int, default=0)
    bq = sub.add_parser("bundle-quality")
    bq.add_argument("--task", required=True)
    bq.add_argument("--bundles", nargs="+", required=True, help="pair bundle folders (`pairs export` / `pairs dipair-export`)")
    bq.add_argument("--precision", nargs="+", default=["int8", "fp32"], choices=["int8", "fp32"])
    bq.add_argument("--teacher", default=None, help="cross-encoder teacher dir: its test score and each ratio to it")
    bq.add_argument("--threads", type=int, default=1)
    for x in (q, s, v, ds, dq, bq):
        x.add_argument("--data", default=str(default_data_dir()))
    s.add_argument("--corpus", default=str(default_data_dir() / WIKI_RELPATH))
    a = p.parse_args(argv)
    result = {"quality": quality, "speed": speed, "seeds": seeds, "dipair-speed": dipair_speed,
              "dipair-quality": dipair_quality, "bundle-quality": bundle_quality}[a.mode](a, argv)
    _write(result, a.mode)
    print(json.dumps({k: v for k, v in result.items() if k not in ("versions", "split_rules")}, indent=1, default=float)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
