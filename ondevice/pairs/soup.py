"""Weight soup of a finished pair run: its dev-best weights averaged with its final epoch's, kept when dev agrees.

A run publishes the epoch with the best dev score, and its checkpoint holds the final epoch. Both come from one
training trajectory, so averaging them (Izmailov et al., 2018, stochastic weight averaging; Wortsman et al., 2022,
a greedy soup over one run's checkpoints) lands between two good points of the same basin; the average is kept only
when it scores higher on dev than the published epoch, so the choice uses dev alone, like the epoch choice itself.
`soup_run` writes a new run folder (the source run is left as it was): the same files, with the soup's weights,
`dev.json` and, for DiPair, `sra_cosine.json` where the soup was kept, and `soup.json` saying what was compared.

    ondevice pairs soup --run runs/dipair-stsb --out runs/dipair-stsb-soup
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ondevice import layouts
from ondevice._deps import require
from ondevice.checkpoints import checkpoint_errors
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.io import artifact_file, check_out_dir, read_json, write_json, write_record
from ondevice.pairs.dipair_train import DiPairConfig, DiPairStudent, _cosine, _sra_teacher, write_sra_cosine
from ondevice.pairs.metrics import dev_metrics, headline
from ondevice.pairs.train import DSEConfig, PairStudent
from ondevice.teacher import cached_vectors


def average_states(a: dict, b: dict) -> dict:
    """Element-wise mean of two state dicts of one architecture (float tensors; anything else is taken from `a`)."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise OndeviceError("the checkpoint's weights do not match the published model's; the run folder is damaged")
    return {k: (a[k] + b[k]) / 2 if a[k].is_floating_point() else a[k] for k in a}


def _kind(run: Path) -> str:
    if (run / layouts.DIPAIR_CONFIG).is_file():
        return "dipair"
    if (run / layouts.DSE_CONFIG).is_file():
        return "dse"
    raise OndeviceError(f"{run} is not a finished DSE or DiPair run (no dse_config.json or dipair_config.json); pass "
                        "the run folder (for a DSE sweep, its alpha-<a> folder)")


def _parts(model: Any, kind: str) -> dict:
    """The modules of a loaded run, named as in its training checkpoint."""
    if kind == "dse":
        return {"encoder": model.student.model, "head": model.head}
    parts = {"encoder": model.student.model, "proj": model.proj, "head": model.head}
    if model.vproj is not None:
        parts["vproj"] = model.vproj
    return parts


def _dev_metrics(model: Any, spec, dev) -> tuple[dict, float | None]:
    """Dev metrics of a model and its dev-tuned threshold (binary tasks), as training computes them."""
    return dev_metrics(spec, model.logits(dev.a, dev.b), dev.gold)


def soup_run(run: str | Path, out: str | Path, data: str | None = None) -> dict:
    """Average a finished run's published (dev-best) and final weights into the new run folder `out`; the soup
    replaces the published model there only when its dev score is higher. Returns what soup.json records."""
    torch = require("torch", "train")
    st = require("safetensors.torch", "train")

    run, out = Path(run), Path(out)
    for name in layouts.RUN_FILES:
        artifact_file(run, name, "pair-model run")
    kind = _kind(run)
    if kind == "dse":
        # the head writer depends on the run's kind
        from ondevice.pairs.model import save_head

        config = DSEConfig.from_dict(read_json(run / layouts.DSE_CONFIG, "DSE config"), "DSE config")
        epochs, load = config.epochs, PairStudent.load
    else:
        from ondevice.pairs.dipair import save_head

        config = DiPairConfig.from_dict(read_json(run / layouts.DIPAIR_CONFIG, "DiPair config"), "DiPair config")
        epochs, load = config.stages.epochs, DiPairStudent.load
    state = read_json(run / layouts.CHECKPOINT / layouts.CKPT_STATE, "checkpoint state")
    if not isinstance(state, dict) or state.get("epoch") != epochs:
        raise OndeviceError(f"{run} has not finished its {epochs} epochs (checkpoint at epoch "
                            f"{state.get('epoch') if isinstance(state, dict) else '?'}); finish it with --resume first")
    check_out_dir(out)
    if out.exists() and any(out.iterdir()):
        raise OndeviceError(f"{out} is not empty; pass a new --out folder (the soup is written beside the run, not over it)")
    published = read_json(run / layouts.RUN_DEV, "dev metrics")
    spec = task_spec(config.task)
    best_epoch, last_epoch = int(published.get("epoch", 0)), epochs
    dev = load_pairs(config.task, "dev", data or config.data, config.split_seed)

    soup = load(run)
    with checkpoint_errors(run / layouts.CHECKPOINT, "train the run again"):
        final = st.load_file(str(run / layouts.CHECKPOINT / layouts.CKPT_WEIGHTS))
        for name, module in _parts(soup, kind).items():
            mine = {k[len(name) + 1 :]: v for k, v in final.items() if k.startswith(name + ".")}
            module.load_state_dict(average_states(module.state_dict(), mine))
    with torch.inference_mode():
        metrics, threshold = _dev_metrics(soup, spec, dev)
    record = {"what": "mean of the published (dev-best) and the final epoch's weights, kept if dev is higher",
              "run": str(run), "best_epoch": best_epoch, "final_epoch": last_epoch, "metric": spec.metric,
              "dev_best": published.get(spec.metric), "dev_soup": metrics.get(spec.metric)}
    record["kept"] = best_epoch != last_epoch and headline(spec, metrics) > headline(spec, published)

    out.mkdir(parents=True, exist_ok=True)
    for item in run.iterdir():  # the run's own files; its checkpoint is for resuming that run, not this one
        if item.name != layouts.CHECKPOINT and not item.is_symlink():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, out / item.name)
    if record["kept"]:
        cfg = soup.head_cfg if kind == "dse" else soup.cfg
        cfg.threshold = threshold
        if kind == "dse":
            save_head(out, soup.head, cfg)
        else:
            save_head(out, soup.proj, soup.head, cfg, soup.vproj)
            _write_sra_cosine(run, out, config, soup, dev)
        soup.student.save(out / layouts.RUN_STUDENT)
        write_record(out / layouts.RUN_DEV, {**metrics, "epoch": f"soup of {best_epoch} and {last_epoch}", "soup": record})
    write_json(out / "soup.json", record)
    return record


def _write_sra_cosine(run: Path, out: Path, config, soup, dev) -> None:
    """sra_cosine.json of the soup: the fine-tuned encoder's mean cosine to the SRA teacher on dev sentences."""
    after = None
    if config.sra_weight > 0:
        texts = list(dict.fromkeys([*dev.a, *dev.b]))  # the dev split's distinct sentences, as training measures
        teacher = np.asarray(cached_vectors(_sra_teacher(config, soup.student), texts, progress=False), np.float32)
        after = _cosine(soup.student.encode(texts), teacher)
    write_sra_cosine(out, read_json(run / layouts.RUN_DATA, "data summary").get("sra_dev_cosine_before"), after)
