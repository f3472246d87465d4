"""Run README's "first ten minutes" as a new user would and keep what every step printed.

    .venv/bin/python benchmarks/walkthrough.py          # ~30 s; writes benchmarks/results/walkthrough_<time>.json

The steps (below, the one list README renders from the results file with `benchmarks/tables.py`) run in a fresh
folder whose `../shared/data` is the data folder, through the `ondevice` command this checkout installed, with the
shipped pretrained model. The pip install line is shown, not run. Outputs are stored exactly as printed; the table
renderer shortens the path of the ondevice install the steps ran to `...`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

INSTALL = 'pip install torch==2.13.0 && pip install -e ".[train,eval,export]"        # or: make install'

STEPS: list[tuple[str, str, str]] = [  # (kind, title, text); kind "bash" runs in a shell, "python" in one interpreter
    ("bash", "a catalog: any one-sentence-per-line file",
     "zcat ../shared/data/wiki/wiki_en_sentences_1m.txt.gz | tail -5000 > catalog5k.txt"),
    ("python", "1. encode with the pretrained bundle (numpy + onnxruntime only; checksums verified on load)",
     ("import ondevice\n\n"
     "model = ondevice.load()\n"
     "print(model)\n"
     'codes = model.codes(["How do I reset my phone?", "Restart the phone and hold the power button."])\n'
     "print(codes.shape, codes.dtype)")),
    ("bash", "2. index the catalog and search it with text (`--bundle pretrained` is the shipped model; a folder works too)",
     ("ondevice index build --corpus catalog5k.txt --bundle pretrained --out catalog.odx\n"
     'ondevice index search catalog.odx --bundle pretrained --query "The river flooded the town after heavy rain." \\\n'
     "    -k 5 --corpus catalog5k.txt\n"
     "ondevice index info catalog.odx")),
    ("bash", "3. evaluate the bundle (its float vectors and its codes) on STS-B test",
     "ondevice eval --encoder app=bundle:pretrained --tasks stsb-test --out eval-report"),
    ("bash", "4. score question pairs with the bundle's duplicate-question head (probability, blended key, decision)",
     ('ondevice pairs score --bundle pretrained --a "How do I reset my phone?" --b "How can I factory-reset my phone?"\n'
      'ondevice pairs score --bundle pretrained --a "How do I reset my phone?" --b "Which phone has the best camera?"')),
    ("bash", "5. what an artifact is and how it was made (any bundle, student, binarizer, index or pair run)",
     "ondevice info pretrained --verify\nondevice info catalog.odx"),
]


def run_steps(data: Path, bin_dir: Path) -> list[dict]:
    """Every step in a new folder `work/` beside a `shared/data` link; what it printed (stdout and stderr, in order)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="ondevice-walkthrough-") as tmp:
        (Path(tmp) / "shared").mkdir()
        (Path(tmp) / "shared" / "data").symlink_to(data.resolve())
        work = Path(tmp) / "work"
        work.mkdir()
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")
        env.pop("ONDEVICE_DATA", None)  # the commands name ../shared/data themselves, as README's do
        for kind, title, text in STEPS:
            cmd = ["bash", "-eo", "pipefail", "-c", text] if kind == "bash" else [str(bin_dir / "python"), "-c", text]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  check=False)
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"step {title!r} failed (exit {proc.returncode}):\n{proc.stdout}")
            out.append({"kind": kind, "title": title, "text": text, "output": _plain(proc.stdout),
                        "seconds": round(seconds, 2)})
    return out


def _plain(text: str) -> str:
    """What the terminal keeps: progress bars redraw with carriage returns, so only the last state of a line stays."""
    return "\n".join(line.split("\r")[-1] for line in text.splitlines() if line.split("\r")[-1].strip()).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.environ.get("ONDEVICE_DATA", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    a = p.parse_args(argv)
    from ondevice.results import start_run, write_result

    data = Path(a.data)
    if not (data / "wiki" / "wiki_en_sentences_1m.txt.gz").is_file() or not (data / "stsb").is_dir():
        raise SystemExit(f"{data} has no wiki/wiki_en_sentences_1m.txt.gz or stsb/: pass --data DIR")
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "ondevice").is_file():
        raise SystemExit(f"no `ondevice` command beside {sys.executable}: run `make install` first")
    meta = start_run(data=str(data))
    steps = run_steps(data, bin_dir)
    import ondevice

    root = Path(ondevice.__file__).resolve().parent.parent  # the install the steps ran (their paths start here)
    path = write_result("walkthrough", {"install": INSTALL, "root": str(root), "steps": steps}, meta, a.out_dir)
    for s in steps:
        print(f"--- {s['title']} ({s['seconds']} s)\n{s['output']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
