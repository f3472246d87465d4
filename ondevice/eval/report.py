"""Write an evaluation report: report.json (every number), report.md (one table) and the plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ondevice.errors import OndeviceError
from ondevice.eval.tasks import TASKS
from ondevice.io import nonfinite_to_null, read_json, write_json, write_text

# Markdown column per task: (header, function of the task's result dict -> cell text)
_CELLS = {
    "similarity": lambda r: _f(r['spearman']),
    "paraphrase": lambda r: f"{_f(r['acc'])}/{_f(r['f1'])}",
    "transfer": lambda r: _f(r['acc']),
}


def _f(x: Any) -> str:
    """One decimal, or "-" for a metric that is undefined (null in report.json, NaN before it was written)."""
    return "-" if x is None or math.isnan(x) else f"{x:.1f}"


def _header(task: str) -> str:
    t = TASKS[task]
    return {"similarity": f"{t.title} ρ", "paraphrase": f"{t.title} acc/F1"}.get(t.group, t.title)


def _size(n: int) -> str:
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def markdown_table(report: dict[str, Any]) -> str:
    """One row per view: representation, size, speed, then the headline number of every task that ran."""
    tasks = [t for t in report["tasks"] if t not in report["skipped"]]
    cols = ["encoder", "representation", "bytes/sentence", "model size", "sentences/s"]
    for t in tasks:
        if t == "retrieval":
            k = next((r[t]["k"] for r in report["results"].values() if t in r), 10)
            cols += [f"R@{k} vs own float", f"R@{k} vs reference"]
        else:
            cols.append(_header(t))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for name, meta in report["views"].items():
        rep = f"{meta['method']} {meta['dim']} bits" if meta["binary"] else f"float32 × {meta['dim']}"
        speed = meta.get("sentences_per_second")
        row = [name, rep, str(meta["bytes_per_sentence"]), _size(meta["model_bytes"]),
               f"{speed:,.0f}" if isinstance(speed, (int, float)) else "-"]
        res = report["results"][name]
        for t in tasks:
            r = res.get(t)
            if t == "retrieval":
                row += ["-" if not r or r.get("recall_vs_float") is None else f"{r['recall_vs_float']:.1f}",
                        "-" if not r or r.get("recall_vs_reference") is None else f"{r['recall_vs_reference']:.1f}"]
            else:
                row.append("-" if r is None else _CELLS[TASKS[t].group](r))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def markdown_report(report: dict[str, Any], command: str | None = None, plots: list[str] | None = None) -> str:
    """report.md: the command, the table, notes on protocol, skipped tasks and plots."""
    parts = ["# ondevice eval report", ""]
    if command:
        parts += ["Command:", "", "```", command, "```", ""]
    parts += [markdown_table(report), ""]
    ref = next((r["retrieval"].get("reference") for r in report["results"].values() if "retrieval" in r), None)
    parts += ["Similarity columns: Spearman ρ × 100 (cosine for floats, negative Hamming for codes). "
              "MRPC: accuracy/F1 × 100 with the mean-score threshold. Transfer: logistic-regression probe accuracy × 100. "
              + (f"Retrieval reference: `{ref}`. " if ref else "")
              + f"Speed measured on {report.get('speed_sentences', 0)} STS-B test sentences on this machine "
              f"({(report.get('versions') or {}).get('platform', '')}).", ""]
    parts += ["Protocol:", ""] + [f"- {k}: {v}" for k, v in (report.get("protocol") or {}).items()] + [""]
    if report["skipped"]:
        parts += ["Skipped:", ""] + [f"- {t}: {why}" for t, why in report["skipped"].items()] + [""]
    if plots:
        parts += ["Plots:", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    if report.get("commit"):  # reports written before 2026-11-27 do not name it
        parts += [f"Run {report['created']} at commit {report['commit']} on {report.get('cpu_model', '')}.", ""]
    parts += [f"Total time {report['total_seconds']:.0f} s; versions: "
              + ", ".join(f"{k} {v}" for k, v in (report.get("versions") or {}).items() if k != "platform"), ""]
    return "\n".join(parts)


_VIEW_KEYS = ("method", "dim", "binary", "bytes_per_sentence", "model_bytes")  # what the table and plots read


def _report_problem(report: Any) -> str | None:
    """What keeps `report` from being an `ondevice eval` report (None when it is one), checked before any merging."""
    if not isinstance(report, dict):
        return f"it holds a JSON {type(report).__name__}, not an object"
    for key, kind in (("tasks", list), ("views", dict), ("results", dict), ("skipped", dict)):
        if not isinstance(report.get(key), kind):
            return f"it has no {key!r} {'list' if kind is list else 'object'}"
    if not all(isinstance(t, str) and t in TASKS for t in report["tasks"]):
        bad = next(t for t in report["tasks"] if not (isinstance(t, str) and t in TASKS))
        return f"its task {str(bad)[:40]!r} is not one of {', '.join(TASKS)}"
    if not all(isinstance(why, str) for why in report["skipped"].values()):
        return "its 'skipped' reasons are not text"
    for key, kinds in (("total_seconds", (int, float)), ("speed_sentences", (int, float)), ("versions", dict),
                       ("protocol", dict), ("created", str), ("commit", str), ("cpu_model", str)):
        if report.get(key) is not None and (isinstance(report[key], bool) or not isinstance(report[key], kinds)):
            return f"its {key!r} is a {type(report[key]).__name__}"
    for name, meta in report["views"].items():
        if not isinstance(meta, dict) or any(k not in meta for k in _VIEW_KEYS):
            return f"its view {name!r} lacks {', '.join(_VIEW_KEYS)}"
        if problem := _view_problem(meta):
            return f"its view {name!r} has {problem}"
        results = report["results"].get(name, {})
        if not isinstance(results, dict):
            return f"its results of view {name!r} are not an object"
        for task, res in results.items():
            if task in TASKS and (problem := _result_problem(task, res)):
                return f"its {task} result of view {name!r} has {problem}"
    return None


def _number(x: Any, none_ok: bool = True) -> bool:
    """Whether `x` is a number (not a bool), or None when `none_ok`."""
    return (x is None and none_ok) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _view_problem(meta: dict) -> str | None:
    """What a view's fields hold that the table and plots cannot show (None when they are sound)."""
    if not isinstance(meta["method"], str) or not isinstance(meta["binary"], bool):
        return "a 'method' that is not text or a 'binary' that is not true/false"
    if not all(_number(meta[k], none_ok=False) and meta[k] >= 0 for k in ("dim", "bytes_per_sentence", "model_bytes")):
        return "a 'dim', 'bytes_per_sentence' or 'model_bytes' that is not a number >= 0"
    if not _number(meta.get("sentences_per_second")) or not isinstance(meta.get("encoder", ""), str):
        return "a 'sentences_per_second' that is not a number or an 'encoder' that is not text"
    if meta["binary"] and not isinstance(meta.get("encoder"), str):
        return "no 'encoder' name"
    return None


_RESULT_KEYS = {"similarity": ("spearman",), "paraphrase": ("acc", "f1"), "transfer": ("acc",),
                "retrieval": ("recall_vs_float", "recall_vs_reference")}


def _result_problem(task: str, res: Any) -> str | None:
    """What one task's result holds that the table and plots cannot show (None when it is sound)."""
    if not isinstance(res, dict):
        return f"a {type(res).__name__}, not an object"
    group = "retrieval" if task == "retrieval" else TASKS[task].group
    for key in _RESULT_KEYS.get(group, ()):
        if not _number(res.get(key)) or (group != "retrieval" and key not in res):
            return f"a {key!r} that is not a number or null"
    if group == "retrieval" and (not _number(res.get("k", 10), none_ok=False) or not isinstance(res.get("reference", ""), (str, type(None)))):
        return "a 'k' that is not a number or a 'reference' that is not text"
    return None


def merge_reports(reports: list[dict[str, Any]], names: Sequence[str] | None = None) -> dict[str, Any]:
    """One report from several (e.g. a slow teacher on some tasks, fast students on all): union of views and tasks.

    Results merge per (view, task): a later report's number for the same view and task replaces the earlier one,
    other tasks of that view are kept. A task counts as skipped only if no report ran it. `names` (the files the
    reports were read from) name a report that is not one in the one-line error.
    """
    if not reports:
        raise OndeviceError("nothing to merge; give at least one report.json")
    for i, r in enumerate(reports):
        if problem := _report_problem(r):
            name = names[i] if names is not None and i < len(names) else f"report {i + 1}"
            raise OndeviceError(f"{name} is not a report.json of `ondevice eval` ({problem}); give the report.json "
                                "files eval wrote")
    out = {**reports[0], "views": {}, "results": {}, "merged_from": [r.get("created") for r in reports]}
    tasks: list[str] = []
    for r in reports:
        if r.get("report_version") != reports[0].get("report_version"):
            raise OndeviceError("cannot merge reports of different report_version; rerun the older one")
        tasks += [t for t in r["tasks"] if t not in tasks]
        for name, meta in r["views"].items():  # keep a measured speed when a later report skipped measuring it
            old = out["views"].get(name, {})
            out["views"][name] = {**meta, "sentences_per_second": meta.get("sentences_per_second") or old.get("sentences_per_second")}
        for name, res in r["results"].items():
            out["results"].setdefault(name, {}).update(res)
        out["data_files_sha256"] = {**out.get("data_files_sha256", {}), **r.get("data_files_sha256", {})}
    ran = {t for r in reports for t in r["tasks"] if t not in r["skipped"]}
    out["tasks"] = tasks
    out["skipped"] = {t: why for r in reports for t, why in r["skipped"].items() if t not in ran}
    out["total_seconds"] = sum(r.get("total_seconds", 0) for r in reports)
    return out


REPORT_FILES = ("report.json", "report.md", "quality_vs_bits.png", "quality_vs_speed.png", "quality_vs_size.png")


def is_report_folder(folder: str | Path) -> bool:
    """Whether `folder` holds an earlier `ondevice eval` report (a report.json that is one): its files may be replaced."""
    path = Path(folder) / "report.json"
    if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 << 20:
        return False
    try:
        return _report_problem(read_json(path, "report")) is None
    except Exception:  # noqa: BLE001 - anything unreadable is simply not an earlier report
        return False


def write_report(report: dict[str, Any], out_dir: str | Path, command: str | None = None, plots: bool = True) -> list[Path]:
    """Write report.json, report.md and (with matplotlib) the PNG plots into `out_dir`; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if command:
        report = {**report, "command": command}
    write_json(out / "report.json", nonfinite_to_null(report))  # an undefined metric (NaN) is written as null
    pngs: list[Path] = []
    if plots:
        # imported on use: at the top it would close an import cycle through the ondevice.eval package
        from ondevice.eval.plots import write_plots

        pngs = write_plots(report, out)
    write_text(out / "report.md", markdown_report(report, command, [str(p) for p in pngs]))
    return [out / "report.json", out / "report.md", *pngs]
