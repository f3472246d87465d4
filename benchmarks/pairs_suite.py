"""The pair-model experiments of issues #13 / #16 in one resumable driver, for a machine with many cores or a GPU.

1. Cross-encoder teachers (`ondevice pairs teacher`), several at once: a small STS-B grid (learning rate, both
   input orders) whose dev-best setting is then trained with more seeds (DvBERT's independent teachers), and
   teachers for MRPC, QQP and SICK. Each teacher's test metrics are measured, and its train/dev/test logits
   cached before any student starts (students running side by side then never write one cache folder together).
2. Students per task and seed, side by side (`benchmarks/pairs.py seeds --seeds S`): DSE at alpha 0 / 0.5 / 1
   (dev picks) and DvBERT over the task's independent teachers; then one `seeds` run per task over all seeds
   reuses the finished runs and writes the results file (mean and spread; every alpha's test figures).
3. `benchmarks/pairs.py quality` per task on seed 0 (DSE vs the cross-encoder vs the SRA student's cosine).

Finished teachers and student runs in --out are reused, so an interrupted suite continues where it stopped.
Writes pairs_suite-<UTC>.json (every teacher's settings, dev and test; the choices made; the files written).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from ondevice.io import write_record
from ondevice.results import results_dir, results_path, run_metadata

# STS-B grid: (name, extra flags); the dev-best one is the DSE teacher and gets the extra seeds
STSB_GRID = [("lr5e-5-e4", ["--lr", "5e-5", "--epochs", "4"]),
             ("lr2e-5-e4", ["--lr", "2e-5", "--epochs", "4"]),
             ("lr1e-4-e4", ["--lr", "1e-4", "--epochs", "4"]),
             ("lr5e-5-e4-both", ["--lr", "5e-5", "--epochs", "4", "--both-orders"])]
OTHER = {"mrpc": [("e3", ["--epochs", "3"]), ("e3-both", ["--epochs", "3", "--both-orders"])],
         "qqp": [("e3", ["--epochs", "3"])],
         "sick-r": [("e3", ["--epochs", "3"])],
         "sick-e": [("e3", ["--epochs", "3"])]}


def _run(cmd: list[str], log: Path, env: dict) -> int:
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="work folder: teachers/, students/, logs/")
    p.add_argument("--student", required=True, help="the SRA student every pair student starts from")
    p.add_argument("--base", default="all-MiniLM-L6-v2", help="cross-encoder base (packaged MiniLM or a local dir)")
    p.add_argument("--data", default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--jobs", type=int, default=4, help="runs side by side")
    p.add_argument("--tasks", default="stsb,mrpc,qqp", help="tasks that get students (teachers: these + sick)")
    p.add_argument("--seeds", default="0,1,2", help="student seeds (STS-B: --stsb-seeds)")
    p.add_argument("--stsb-seeds", default="0,1,2,3,4")
    p.add_argument("--teacher-seeds", type=int, default=3, help="independent teachers per task for DvBERT")
    p.add_argument("--sick", action="store_true", help="also SICK-R and SICK-E teachers")
    p.add_argument("--teacher-epochs", type=int, default=None, help="override every teacher's epochs (smoke runs)")
    p.add_argument("--max-train-pairs", type=int, default=None, help="teachers and students on a subset (smoke runs)")
    p.add_argument("--student-args", default="", help="extra `pairs.py seeds` flags, e.g. '--epochs 1' (smoke runs)")
    a = p.parse_args(argv)
    try:  # imported first, so the results metadata can name the GPU
        import torch  # noqa: F401
    except ImportError:
        pass

    from ondevice.corpus import default_data_dir

    data = a.data or str(default_data_dir())
    out = Path(a.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    py = sys.executable
    meta = run_metadata(1)
    tasks = [t for t in a.tasks.split(",") if t]
    report: dict = {**meta, "settings": vars(a), "teachers": {}, "chosen": {}, "results_files": []}
    t_start = time.time()

    def teacher_job(task: str, name: str, flags: list[str], seed: int) -> tuple[str, int]:
        d = out / "teachers" / f"{task}-{name}-s{seed}"
        if (d / "teacher.json").is_file() and "dev" in json.loads((d / "teacher.json").read_text()):
            return str(d), 0
        resume = ["--resume"] if (d / "checkpoints").is_dir() and any((d / "checkpoints").glob("checkpoint-*")) else []
        cmd = [py, "-m", "ondevice", "pairs", "teacher", "--task", task, "--data", data, "--base", a.base, "--out", str(d),
               "--seed", str(seed), "--device", a.device, "--threads", "1", "--quiet", *flags, *resume]
        if a.teacher_epochs:
            cmd += ["--epochs", str(a.teacher_epochs)]
        if a.max_train_pairs:
            cmd += ["--max-train-pairs", str(a.max_train_pairs)]
        return str(d), _run(cmd, logs / f"teacher-{task}-{name}-s{seed}.log", env)

    # 1a. the STS-B grid and every other task's teachers, seed 0
    jobs = [("stsb", n, f, 0) for n, f in STSB_GRID] if "stsb" in tasks else []
    jobs += [(t, n, f, 0) for t, cfgs in OTHER.items() if t in tasks or (a.sick and t.startswith("sick")) for n, f in cfgs]
    with ThreadPoolExecutor(a.jobs) as pool:
        done = list(pool.map(lambda j: teacher_job(*j), jobs))
    failed = [d for d, rc in done if rc]
    if failed:
        print(f"teachers failed: {failed} (logs in {logs})", file=sys.stderr)

    def dev_score(d: str) -> float:
        info = json.loads((Path(d) / "teacher.json").read_text())
        dev = info["dev"]
        return dev.get("spearman", dev.get("accuracy"))

    # 1b. per task the dev-best setting; it gets teacher seeds 1.. (independent DvBERT teachers)
    by_task: dict[str, list[tuple[str, list[str], str]]] = {}
    for (task, name, flags, _), (d, rc) in zip(jobs, done):
        if not rc:
            by_task.setdefault(task, []).append((name, flags, d))
    more = []
    for task, rows in by_task.items():
        name, flags, d = max(rows, key=lambda r: dev_score(r[2]))
        report["chosen"][task] = {"setting": name, "dev": dev_score(d), "by_setting": {r[0]: dev_score(r[2]) for r in rows}}
        if task in tasks:
            more += [(task, name, flags, s) for s in range(1, a.teacher_seeds)]
    with ThreadPoolExecutor(a.jobs) as pool:
        done2 = list(pool.map(lambda j: teacher_job(*j), more))
    for task in by_task:
        name = report["chosen"][task]["setting"]
        report["chosen"][task]["teachers"] = [str(out / "teachers" / f"{task}-{name}-s{s}")
                                              for s in range(a.teacher_seeds if task in tasks else 1)
                                              if (out / "teachers" / f"{task}-{name}-s{s}" / "teacher.json").is_file()]

    # 1c. test metrics of every teacher; train/dev/test logits cached once, before students share them
    from ondevice.eval.pair_tasks import load_pairs
    from ondevice.pairs.crossencoder import CrossEncoderTeacher, evaluate_teacher
    from ondevice.pairs.logits import teacher_logits

    for d, rc in [*done, *done2]:
        if rc:
            report["teachers"][d] = {"failed": True, "log": str(logs)}
            continue
        t = CrossEncoderTeacher.load(d, device=a.device)
        splits = {s: load_pairs(t.spec.name, s, data) for s in ("train", "dev", "test")}
        for s in splits.values():
            teacher_logits(t, s.a, s.b, progress=False)
        report["teachers"][d] = {"config": t.info["config"], "dev": t.info["dev"], "train_seconds": t.info["train_seconds"],
                                 "test": evaluate_teacher(t, splits["test"])}
    report["teacher_minutes"] = round((time.time() - t_start) / 60, 2)
    write_record(out / "suite_progress.json", report)

    # 2. students: one process per (task, seed), then one aggregating `seeds` run per task
    scratch = out / "scratch_results"
    scratch.mkdir(exist_ok=True)

    def seeds_cmd(task: str, seeds: str) -> list[str]:
        views = report["chosen"][task]["teachers"]
        return [py, str(ROOT / "benchmarks" / "pairs.py"), "seeds", "--task", task, "--student", a.student,
                "--teachers", ",".join(views), "--dse-teacher", views[0], "--seeds", seeds,
                "--workdir", str(out / "students" / task), "--device", a.device, "--threads", "1", "--quiet",
                "--data", data, *a.student_args.split(),
                *(["--max-train-pairs", str(a.max_train_pairs)] if a.max_train_pairs else [])]

    student_jobs = [(task, s) for task in tasks if task in report["chosen"]
                    for s in (a.stsb_seeds if task == "stsb" else a.seeds).split(",") if s]
    # the biggest task first, so the longest runs start at once
    student_jobs.sort(key=lambda j: {"qqp": 0, "mrpc": 2}.get(j[0], 1))
    with ThreadPoolExecutor(a.jobs) as pool:
        rcs = list(pool.map(lambda j: _run([*seeds_cmd(j[0], j[1]), "--skip-teachers"],
                                           logs / f"students-{j[0]}-s{j[1]}.log",
                                           {**env, "ONDEVICE_RESULTS": str(scratch)}), student_jobs))
    report["student_runs"] = {f"{t}-s{s}": rc for (t, s), rc in zip(student_jobs, rcs)}
    before = set(results_dir().glob("*.json"))
    for task in tasks:
        if task not in report["chosen"]:
            continue
        seeds = a.stsb_seeds if task == "stsb" else a.seeds
        _run(seeds_cmd(task, seeds), logs / f"seeds-{task}.log", env)
        run0 = out / "students" / task / "dse-seed0"
        if (run0 / "selection.json").is_file():
            _run([py, str(ROOT / "benchmarks" / "pairs.py"), "quality", "--task", task, "--teacher",
                  report["chosen"][task]["teachers"][0], "--run", str(run0), "--student", a.student, "--skip-bi-encoder",
                  "--threads", "1", "--data", data], logs / f"quality-{task}.log", env)
    after = set(results_dir().glob("*.json"))
    report["results_files"] = sorted(p.name for p in after - before)
    report["minutes"] = round((time.time() - t_start) / 60, 2)
    path = results_path("pairs_suite")
    write_record(path, report)
    write_record(out / "suite_progress.json", report)
    print(json.dumps({"written": str(path), "chosen": report["chosen"], "files": report["results_files"]}, indent=1))
    bad = [k for k, rc in report["student_runs"].items() if rc] + [d for d, t in report["teachers"].items() if t.get("failed")]
    if bad:
        print(f"failed runs: {', '.join(bad)} (logs in {logs})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
