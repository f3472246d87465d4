"""Binarization quality on STS-B: Spearman x100 of negative Hamming distance, per method and bit count.

Fits every binarization method on the first N wiki sentences' vectors (teacher, and the distilled student when
--student is given), encodes the STS-B pairs, and reports Spearman(-Hamming, gold) beside the continuous cosine of
the same embeddings (the shape of the paper's Table 1 / Figure 3). Writes a JSON, a markdown table and a PNG plot.

    nice .venv/bin/python benchmarks/binarize_quality.py                         # teacher half
    nice .venv/bin/python benchmarks/binarize_quality.py --student ~/.cache/ondevice/bench/student-100k
    nice .venv/bin/python benchmarks/binarize_quality.py --bundle pretrained --skip-teacher   # the shipped student
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ondevice.binarize import Binarizer, methods_for
from ondevice.corpus import WIKI_RELPATH, default_data_dir, read_corpus
from ondevice.errors import OndeviceError
from ondevice.eval.data import read_stsb
from ondevice.eval.metrics import pair_scores, spearman
from ondevice.io import cache_dir, write_record, write_text
from ondevice.results import start_run, write_result

BITS = (64, 128, 256, 512, 1024, 2048)
METHODS = ("threshold", "random", "pca", "itq", "ae", "ae-sp")


def spearman100(pred: np.ndarray, gold: np.ndarray) -> float:
    return round(100.0 * spearman(pred, gold), 2)


def cosine_score(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> float:
    return spearman100(pair_scores(a, b), gold)


def hamming_score(codes_a: np.ndarray, codes_b: np.ndarray, gold: np.ndarray) -> float:
    return spearman100(pair_scores(codes_a, codes_b), gold)  # -Hamming, row i vs row i


def fit_corpus(data: Path, n: int, train_splits: str = "") -> list[str]:
    """The first n sentences to fit on: wiki alone, or the named tasks' train-split sentences first (as `ondevice
    distill --train-splits` reads them), then wiki sentences that are not evaluation text."""
    if not train_splits:
        return read_corpus(data / WIKI_RELPATH, n)
    from ondevice.distill import train_split_tasks
    from ondevice.eval.data import held_out_texts
    from ondevice.eval.pair_tasks import unlabeled_train_sentences

    first = unlabeled_train_sentences(data, train_split_tasks(train_splits))[:n]
    if len(first) == n:  # the train splits alone fill it (read_corpus refuses to read 0 sentences)
        return first
    return first + read_corpus(data / WIKI_RELPATH, n - len(first), exclude=held_out_texts(data))


def teacher_vectors(train: list[str], sts: list[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    from ondevice.teacher import Teacher, cached_vectors

    t = Teacher()
    return cached_vectors(t, train), cached_vectors(t, sts, progress=False), {"teacher": t.info.path, "pooling": t.info.pooling}


def student_vectors(student_dir: Path, train: list[str], sts: list[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """The student's vectors of the training sentences, cached like the teacher's (ondevice.vector_cache)."""
    from ondevice.io import sha256_file
    from ondevice.student import Student
    from ondevice.vector_cache import cached_rows

    student = Student.load(student_dir)
    identity = {"student_weights_sha256": sha256_file(student_dir / "model.safetensors")}
    t0 = time.time()
    x, computed = cached_rows(cache_dir() / "bench" / "student_vectors", "student", identity, train, student.encode,
                              progress=True, desc="student vectors")
    if computed:
        print(f"student encoded {len(train):,} sentences in {time.time() - t0:.0f} s", flush=True)
    return x, student.encode(sts), {"student": str(student_dir)}


def bundle_vectors(spec: str, train: list[str], sts: list[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """An exported bundle's float embeddings (e.g. `pretrained`, the shipped int8 student), cached by its identity."""
    from ondevice.pretrained import parse_spec
    from ondevice.runtime import Bundle
    from ondevice.vector_cache import cached_rows

    path = parse_spec(spec) or Path(spec)
    bundle = Bundle.load(path)
    manifest_sha = bundle.encoder_id.encoder_sha256  # the bundle's identity as an index records it (its manifest)
    t0 = time.time()
    x, computed = cached_rows(cache_dir() / "bench" / "student_vectors", "bundle", {"manifest_sha256": manifest_sha},
                              train, bundle.encode, progress=True, desc="bundle vectors")
    if computed:
        print(f"bundle encoded {len(train):,} sentences in {time.time() - t0:.0f} s", flush=True)
    return x, bundle.encode(sts), {"student": f"bundle {spec}", "bundle_manifest_sha256": manifest_sha,
                                   "precision": bundle.manifest.get("precision")}


def run_encoder(name: str, train_x: np.ndarray, sts_x: np.ndarray, gold: np.ndarray, n_pairs: int,
                args: argparse.Namespace, hyper: dict, judge=None) -> dict:
    """All methods x bit counts for one encoder's vectors (`judge`: the autoencoders' JudgePairs for select pairs)."""
    a, b = sts_x[:n_pairs], sts_x[n_pairs:]
    dim = train_x.shape[1]
    res = {"encoder": name, "dim": dim, "continuous_cosine": cosine_score(a, b, gold), "train_rows": len(train_x),
           "fit_train_splits": args.fit_train_splits, "rows": []}
    print(f"[{name}] {dim}-d, continuous cosine Spearman x100 = {res['continuous_cosine']}", flush=True)
    bit_list = sorted(set(args.bits) | ({dim} if "threshold" in args.methods else set()))
    for method in args.methods:
        for bits in bit_list:
            if method not in methods_for(bits, dim):
                continue
            kw = dict(hyper) if method in ("ae", "ae-sp") else {}
            if method in ("ae", "ae-sp") and judge is not None:
                kw["judge_pairs"] = judge
            t0 = time.time()
            binarizer = Binarizer.fit(train_x, method, bits, seed=args.seed, progress=not args.quiet, **kw)
            fit_s = time.time() - t0
            score = hamming_score(binarizer.transform(a), binarizer.transform(b), gold)
            row = {"method": method, "bits": bits, "bytes": binarizer.code_bytes, "spearman": score,
                   "ratio": round(score / res["continuous_cosine"], 4), "fit_seconds": round(fit_s, 1)}
            if method in ("ae", "ae-sp"):
                m = binarizer.config.metrics
                row["final_rec_loss"] = round(m["final_rec_loss"], 4)
                row.update({key: m[key] for key in ("init_chosen", "selected_epoch", "ae_selected_epoch", "sp_from_epoch") if key in m})
                if "selected_pairs_spearman" in m:
                    row["judge_spearman"] = round(100 * m["selected_pairs_spearman"], 2)
            res["rows"].append(row)
            # rows so far, so a long run that is stopped still leaves its finished measurements
            write_record(args.out_dir / f"partial_{name}_{args.split}{'_' + args.tag if args.tag else ''}.json", res)
            print(f"[{name}] {method:9s} {bits:5d} bits: {score:6.2f} ({row['ratio']:.4f} x cont.) fit {fit_s:.0f} s", flush=True)
    return res


def table(res: dict, bits: list[int]) -> str:
    """Markdown table: methods as rows, bit counts as columns."""
    cols = sorted({r["bits"] for r in res["rows"]} | set(bits))
    lines = [(f"**{res['encoder']}** ({res['dim']}-d, continuous cosine {res['continuous_cosine']:.2f}, "
             f"{4 * res['dim']} bytes as float32; fitted on {res['train_rows']:,} wiki sentences)"), "",
             "| method | " + " | ".join(f"{b} bits ({(b + 7) // 8} B)" for b in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for method in dict.fromkeys(r["method"] for r in res["rows"]):
        cells = {r["bits"]: f"{r['spearman']:.2f}" for r in res["rows"] if r["method"] == method}
        lines.append(f"| {method} | " + " | ".join(cells.get(b, "–") for b in cols) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results):
        for method in dict.fromkeys(r["method"] for r in res["rows"]):
            pts = sorted((r["bits"], r["spearman"]) for r in res["rows"] if r["method"] == method)
            ax.plot(*zip(*pts), marker="o", label=method)
        ax.axhline(res["continuous_cosine"], color="k", ls="--", lw=1, label="continuous cosine")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bits")
        ax.set_ylabel("STS-B Spearman x100 (-Hamming)")
        ax.set_title(f"{res['encoder']} ({res['dim']}-d)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def combine(args: argparse.Namespace) -> int:
    """Merge per-encoder rows of several result JSONs (e.g. methods run in parallel) into one table and plot."""
    merged: dict[str, dict] = {}
    metas = []
    for path in args.combine:
        blob = json.loads(path.read_text())
        metas.append(blob["meta"])
        for res in blob["results"]:
            into = merged.setdefault(res["encoder"], {**res, "rows": []})
            into["rows"].extend(res["rows"])
    order = {m: i for i, m in enumerate(METHODS)}
    results = list(merged.values())
    for res in results:
        res["rows"].sort(key=lambda r: (order.get(r["method"], 99), r["bits"]))
    stem = f"binarize_quality_{metas[0]['split']}{'_' + args.tag if args.tag else ''}"
    write_record(args.out_dir / f"{stem}.json", {"meta": {"combined": [str(p) for p in args.combine], "runs": metas},
                                                "results": results})
    md = "".join(table(r, []) + "\n" for r in results)
    write_text(args.out_dir / f"{stem}.md", md)
    plot(results, args.out_dir / f"{stem}.png")
    print(md)
    print(f"wrote {args.out_dir / stem}.json/.md/.png")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, help="student dir; adds the student half")
    p.add_argument("--bundle", help="student half from an exported bundle's embeddings instead: a folder, or "
                   "'pretrained' for the shipped default student (int8)")
    p.add_argument("--skip-teacher", action="store_true")
    p.add_argument("--train-sentences", type=int, default=100_000)
    p.add_argument("--fit-rows", type=int, default=None, help="fit on only the first N of the train vectors")
    p.add_argument("--fit-train-splits", default="",
                   help="start the fit corpus with these tasks' train-split sentences (comma list, e.g. "
                        "stsb,sick,mrpc,qqp: the mix a student was distilled on), then wiki; never dev/test text")
    p.add_argument("--split", choices=["test", "dev"], default="test", help="STS-B split (choose settings on dev)")
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--bits", nargs="+", type=int, default=list(BITS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hyper", default="{}", help='autoencoder hyper-parameters as JSON, e.g. \'{"epochs": 4}\'')
    p.add_argument("--judge-task", choices=["stsb", "sick-r", "mrpc", "qqp"], default=None,
                   help='with --hyper \'{"select": "pairs"}\': the autoencoders pick their epoch on this task\'s train '
                        "pairs (never the dev/test split that is reported)")
    p.add_argument("--out-dir", type=Path, default=cache_dir() / "bench" / "binarize_quality")
    p.add_argument("--tag", default="", help="suffix for the output file names")
    p.add_argument("--results-dir", type=Path, default=None, help="results JSON folder (default: benchmarks/results)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--combine", nargs="+", type=Path, help="merge the JSONs of earlier (parallel) runs and re-plot")
    args = p.parse_args(argv)
    if args.combine:
        return combine(args)
    hyper = json.loads(args.hyper)
    args.out_dir.mkdir(parents=True, exist_ok=True)

    if (hyper.get("select") == "pairs") != bool(args.judge_task):
        p.error('--hyper \'{"select": "pairs"}\' and --judge-task go together')
    run_meta = start_run(threads=None, split=args.split, seed=args.seed, hyper=hyper,
                         fit_train_splits=args.fit_train_splits, judge_task=args.judge_task)
    data = default_data_dir()
    pairs = read_stsb(data, args.split)
    s1, gold = pairs.a, pairs.gold
    sts = pairs.a + pairs.b
    judge_texts: list[str] = []
    if args.judge_task:  # encoded with the STS-B sentences, split off below
        from ondevice.eval.pair_tasks import load_pairs

        judge_data = load_pairs(args.judge_task, "train", data)
        judge_texts = judge_data.a + judge_data.b
    train = fit_corpus(data, args.train_sentences, args.fit_train_splits)
    results = []
    encoders = ([] if args.skip_teacher else ["teacher"]) + (["student"] if args.student or args.bundle else [])
    for name in encoders:
        if name == "teacher":
            train_x, sts_x, info = teacher_vectors(train, sts + judge_texts)
        elif args.bundle:
            try:
                train_x, sts_x, info = bundle_vectors(args.bundle, train, sts + judge_texts)
            except OndeviceError as exc:
                print(f"binarize_quality: error: {exc}", file=sys.stderr)
                return 2
        else:
            if not (args.student / "config.json").is_file():
                print(f"student dir {args.student} not found; skipping the student half", flush=True)
                continue
            train_x, sts_x, info = student_vectors(args.student, train, sts + judge_texts)
        fit_x = np.asarray(train_x[: args.fit_rows] if args.fit_rows else train_x, dtype=np.float32)
        sts_x = np.asarray(sts_x, dtype=np.float32)
        judge = None
        if judge_texts:
            from ondevice.binarize_ae import JudgePairs

            jx, sts_x = sts_x[len(sts):], sts_x[: len(sts)]
            half = len(judge_texts) // 2
            judge = JudgePairs(jx[:half], jx[half:], judge_data.gold, name=f"{args.judge_task} train")
        res = run_encoder(name, fit_x, sts_x, gold, len(s1), args, hyper, judge)
        res.update(info)
        results.append(res)
    if not results:
        return 1
    stem = f"binarize_quality_{args.split}{'_' + args.tag if args.tag else ''}"
    meta = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "split": args.split, "seed": args.seed,
            "hyper": hyper, "judge_task": args.judge_task, "pairs": len(gold), "date": time.strftime("%Y-%m-%d %H:%M")}
    write_record(args.out_dir / f"{stem}.json", {"meta": meta, "results": results})
    saved = write_result(f"binarize_quality_{args.split}", results, run_meta, root=args.results_dir)
    md = "".join(table(r, args.bits) + "\n" for r in results)
    write_text(args.out_dir / f"{stem}.md", md)
    plot(results, args.out_dir / f"{stem}.png")
    print(md)
    print(f"wrote {args.out_dir / stem}.json/.md/.png and {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
