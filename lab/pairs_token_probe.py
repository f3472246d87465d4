"""Token-state probe: does a DiPair head gain from token states over the pooled comparison alone?

Every feature source is frozen, and only the projections and the head train (DiPair's stage 1), on the same
teacher-scored transfer set the QQP runs use. Per source, two heads of the same shape:

- `pooled`: the comparison slot of the two sentence vectors only (every token slot empty, so masked out);
- `tokens`: the same plus the first N-1 / M-1 token states of each side (the runs' `--n/--m` with a pooled slot).

Sources: `student` (the SRA student's BiLSTM outputs and sentence vector: what DiPair runs read), any other
student dir (e.g. a DSE run's fine-tuned encoder), and `teacher` (the bi-encoder the student was distilled from:
its contextual wordpiece outputs after [CLS], and its mean-pooled vector). If token states add points to the
teacher's features but not to the student's, a DiPair head is held back by what the student's token states carry,
not by the head or the data.

    python lab/pairs_token_probe.py --task qqp --student S --teacher CE,bi-encoder \\
        --sources student,teacher,DSE_RUN/alpha-0.5/student --seeds 0,1,2 --threads 1

Teacher token states are kept in the shared row cache (`~/.cache/ondevice/teacher_tokens`, resumable). Writes
pairs-token-probe-<task>-<UTC>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from ondevice.results import flat_metadata, spread, write_flat


def run_config(args):
    """The `ondevice pairs dipair` settings the probe mirrors: head shape, stage 1 (--lr, --epochs, --batch-size) and
    transfer set (seed --data-seed)."""
    from ondevice.pairs.dipair_train import DiPairConfig

    return DiPairConfig(task=args.task, data=args.data, student=args.student, teacher=args.teacher, n=args.n, m=args.m,
                        d=args.d, layers=args.layers, augment_random=args.augment_random,
                        augment_neighbors=args.augment_neighbors, augment_edits=args.augment_edits,
                        seed=args.data_seed, split_seed=args.split_seed, lr1=args.lr, stage1_epochs=args.epochs,
                        batch_size=args.batch_size)


def student_features(directory: str, texts: list[str], n_tokens: int, batch: int = 256):
    """(sentence vectors, first `n_tokens` BiLSTM outputs (float16, zero-padded), lengths) of a student dir."""
    import torch

    from ondevice.pairs.dipair import encoder_outputs
    from ondevice.student import Student
    from ondevice.tokenizer import pad_ids

    student = Student.load(directory)
    student.model.eval()
    width = 2 * student.config.hidden_size
    vec = np.zeros((len(texts), student.config.output_dim), np.float32)
    tok = np.zeros((len(texts), n_tokens, width), np.float16)
    lens = np.zeros(len(texts), np.int64)
    ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in texts]
    order = np.argsort([len(x) for x in ids], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            x, ln = pad_ids([ids[i] for i in rows])
            v, out = encoder_outputs(student.model, torch.from_numpy(x), torch.from_numpy(ln))
            k = min(n_tokens, out.shape[1])
            vec[rows] = v.numpy()
            tok[rows, :k] = out[:, :k].numpy().astype(np.float16)
            lens[rows] = np.minimum(ln, n_tokens)
    return vec, tok, lens


def teacher_features(path: str, texts: list[str], n_tokens: int, progress: bool = True):
    """(mean-pooled normalized vectors, the first `n_tokens` wordpiece outputs after [CLS] (float16), lengths) of
    the bi-encoder at `path`; rows cached and resumable (ondevice.vector_cache)."""
    import torch

    from ondevice.io import cache_dir
    from ondevice.teacher import Teacher, _identity
    from ondevice.vector_cache import cached_rows

    teacher = Teacher(path)
    h = teacher.dim

    def rows(chunk: list[str]) -> np.ndarray:
        out = np.zeros((len(chunk), (1 + n_tokens) * h), np.float16)
        with torch.inference_mode():
            for idx, enc in teacher._batches(chunk, 64, "pt"):
                hidden = teacher.model(**enc).last_hidden_state
                mask = enc["attention_mask"]
                vec = teacher.pool(hidden, mask)
                # wordpieces 1..n (after [CLS]), zeroed at [SEP] and padding
                inner = mask.clone()
                inner[:, 0] = 0
                inner[torch.arange(len(idx)), mask.sum(1) - 1] = 0
                tok = (hidden * inner[:, :, None])[:, 1:1 + n_tokens]
                pad = torch.zeros(len(idx), n_tokens, h)
                pad[:, :tok.shape[1]] = tok
                out[idx] = torch.cat([vec, pad.reshape(len(idx), -1)], 1).numpy().astype(np.float16)
        return out

    identity = {**_identity(teacher), "tokens_after_cls": n_tokens}
    cached, _ = cached_rows(cache_dir() / "teacher_tokens", "teacher_tokens", identity, texts, rows, chunk=4096,
                            progress=progress, desc="teacher token states", dim=(1 + n_tokens) * h, dtype=np.float16)
    vec = np.asarray(cached[:, :h], np.float32)
    tok = np.asarray(cached[:, h:]).reshape(len(texts), n_tokens, h)
    wordpieces = [len(x) - 2 for x in teacher.tokenizer(texts, truncation=True, max_length=teacher.info.max_length)["input_ids"]]
    return vec, tok, np.minimum(np.asarray(wordpieces, np.int64), n_tokens)


def train_head(feats, pa, pb, targets, dev, test, spec, run, seed: int, tokens: bool) -> dict:
    """Projections + DiPair head of `run` (a DiPairConfig) trained as its stage 1 on frozen features, with head seed
    `seed`; the dev-best epoch's dev and test metrics (binary: dev threshold)."""
    import torch

    from ondevice.pairs.dipair import build_head, build_projection, build_vector_projection, side_states
    from ondevice.pairs.dipair_train import soft_label_loss
    from ondevice.pairs.metrics import dev_metrics, evaluate_scores, headline
    from ondevice.pairs.train import _batches

    vec, tok, lens = feats
    head_cfg = run.head_config(tok.shape[2], spec, vec.shape[1])
    torch.manual_seed(seed)
    proj, vproj, head = build_projection(head_cfg), build_vector_projection(head_cfg), build_head(head_cfg)
    params = [*proj.parameters(), *vproj.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=run.lr1)
    lens_used = lens if tokens else np.zeros_like(lens)

    def side(rows, slots):
        v = torch.from_numpy(vec[rows])
        t = torch.from_numpy(tok[rows, : slots - 1].astype(np.float32))
        return side_states(proj, vproj, v, t, torch.from_numpy(np.minimum(lens_used[rows], slots - 1)), slots, "first")

    def logits(a_rows, b_rows):
        out = []
        with torch.inference_mode():
            for s in range(0, len(a_rows), 1024):
                out.append(head(side(a_rows[s:s + 1024], run.n), side(b_rows[s:s + 1024], run.m)).numpy())
        return np.concatenate(out)

    target_t = torch.from_numpy(targets)
    best, log = None, []
    for epoch in range(run.stage1_epochs):
        head.train()
        losses = []
        for rows in _batches(len(pa), run.batch_size, seed * 1000003 + epoch):
            loss = soft_label_loss(head(side(pa[rows], run.n), side(pb[rows], run.m)), target_t[rows], spec.kind, 1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        head.eval()
        metrics, threshold = dev_metrics(spec, logits(*dev[:2]), dev[2])
        log.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "dev": metrics})
        if best is None or headline(spec, metrics) > best["dev_score"]:
            best = {"epoch": epoch + 1, "dev_score": headline(spec, metrics), "dev": metrics,
                    "test": evaluate_scores(spec, logits(*test[:2]), test[2], threshold)}
    return {**best, "log": log}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="qqp")
    ap.add_argument("--data", default=None, help="shared data folder ($ONDEVICE_DATA or ../shared/data)")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--student", required=True, help="SRA student: builds the transfer set (and is source `student`)")
    ap.add_argument("--teacher", required=True, help="pair teacher(s) whose logits are the targets (as `--teacher`)")
    ap.add_argument("--sources", default="student,teacher", help="comma-separated: student, teacher, or student dirs")
    ap.add_argument("--teacher-tokens", default="", help="bi-encoder for source `teacher` (default: the student's teacher)")
    ap.add_argument("--seeds", default="0,1,2", help="head seeds (the transfer set is --data-seed's throughout)")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--augment-random", type=int, default=10000)
    ap.add_argument("--augment-neighbors", type=int, default=1)
    ap.add_argument("--augment-edits", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.data is None:
        from ondevice.corpus import default_data_dir

        args.data = str(default_data_dir())

    import torch

    from ondevice.eval.pair_tasks import load_pairs, task_spec
    from ondevice.pairs.augment import transfer_set
    from ondevice.pairs.logits import teacher_logits
    from ondevice.pairs.views import open_teacher
    from ondevice.student import Student

    torch.set_num_threads(args.threads)
    meta = flat_metadata("lab/pairs_token_probe.py", sys.argv[1:] if argv is None else argv, args.threads)
    spec = task_spec(args.task)
    student = Student.load(args.student)
    train = load_pairs(args.task, "train", args.data, args.split_seed)
    run = run_config(args)
    aug = transfer_set(train, student.encode, run)  # as `ondevice pairs dipair` builds it
    teacher = open_teacher(args.teacher, spec.name, args.data, args.split_seed, "cpu", not args.quiet)
    targets = np.concatenate([teacher_logits(teacher, train.a, train.b, progress=not args.quiet),
                              teacher_logits(teacher, aug.a, aug.b, progress=not args.quiet)]).astype(np.float32)
    dev = load_pairs(args.task, "dev", args.data, args.split_seed)
    test = load_pairs(args.task, "test", args.data, args.split_seed)
    a, b = train.a + aug.a, train.b + aug.b
    texts = list(dict.fromkeys([*a, *b, *dev.a, *dev.b, *test.a, *test.b]))
    pos = {t: i for i, t in enumerate(texts)}

    def rows(xs):
        return np.array([pos[x] for x in xs], np.int64)

    pa, pb = rows(a), rows(b)
    dev_rows = (rows(dev.a), rows(dev.b), dev.gold)
    test_rows = (rows(test.a), rows(test.b), test.gold)
    tokens_needed = max(run.n, run.m) - 1
    seeds = [int(s) for s in args.seeds.split(",")]
    results = []
    for source in args.sources.split(","):
        started = time.time()
        if source == "teacher":
            path = args.teacher_tokens or (student.config.teacher or {}).get("path", "")
            feats = teacher_features(path, texts, tokens_needed, progress=not args.quiet)
        else:
            feats = student_features(args.student if source == "student" else source, texts, tokens_needed)
        feature_s = time.time() - started
        for variant in ("pooled", "tokens"):
            for seed in seeds:
                started = time.time()
                r = train_head(feats, pa, pb, targets, dev_rows, test_rows, spec, run, seed, variant == "tokens")
                r.update(source=source, variant=variant, seed=seed, train_s=round(time.time() - started, 1),
                         feature_s=round(feature_s, 1), token_width=int(feats[1].shape[2]))
                results.append(r)
                print(f"{source} {variant} seed {seed}: dev {r['dev'][spec.metric]} test {r['test'][spec.metric]} "
                      f"(epoch {r['epoch']}, {r['train_s']} s)", flush=True)
    summary = {}
    for source in args.sources.split(","):
        scores = {split: {v: [r[split][spec.metric] for r in results if r["source"] == source and r["variant"] == v]
                          for v in ("pooled", "tokens")} for split in ("dev", "test")}
        gain = [t - p for t, p in zip(scores["test"]["tokens"], scores["test"]["pooled"])]
        summary[source] = {**{split: {v: spread(x) for v, x in per.items()} for split, per in scores.items()},
                           "token_gain_test": gain, "token_gain_test_mean": float(np.mean(gain))}
    path = write_flat({**meta, "task": args.task, "metric": spec.metric, "settings": vars(args), "train_pairs": len(train),
                       "augment_pairs": len(aug), "sentences": len(texts), "teacher": teacher.identity, "runs": results,
                       "summary": summary}, f"pairs_token_probe_{args.task}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
