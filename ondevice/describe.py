"""What an artifact is and how it was made, from the files saved beside it: `ondevice info PATH`.

Every artifact ondevice writes keeps its settings as JSON beside its weights; `describe` finds the kind
(ondevice.layouts.identify), reads those files and returns a summary, and with `verify=True` loads the artifact the
way its users do, so checksums, shapes and headers are checked. Reading never runs code from the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ondevice import layouts
from ondevice.binarize import Binarizer, check_bits
from ondevice.errors import OndeviceError
from ondevice.index import HammingIndex, read_header
from ondevice.io import artifact_file, dataclass_from_dict, read_json
from ondevice.pretrained import parse_spec
from ondevice.scale.shards import ShardedIndex, read_manifest
from ondevice.student import Student, StudentConfig


def describe(path: str | Path, verify: bool = False) -> dict[str, Any]:
    """Kind, origin and main settings of the artifact at `path` ('pretrained' names the shipped bundle); with
    `verify`, it is also loaded with every check its loader makes (checksums included)."""
    path = parse_spec(str(path)) or Path(path)
    kind = layouts.identify(path)
    if kind is None and path.is_dir() and (path / layouts.MANIFEST).is_file():
        _config(path / layouts.MANIFEST, "manifest")  # a corrupt manifest: name its JSON error, as the loaders do
    if kind is None:  # "it does not exist" or "it is nothing ondevice writes"
        raise OndeviceError(f"{path}: {layouts.what_it_is(path)}; give a bundle, student, binarizer, index or "
                            "pair-model run (README: Artifacts on disk lists the files each is told by)")
    k = layouts.KINDS[kind]
    out: dict[str, Any] = {"path": str(path), "kind": kind, "what": k.what, "made_by": k.made_by,
                           "bytes": _bytes(path)}
    try:
        out.update(_READERS[kind](path, verify))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a field of the wrong type or shape
        raise OndeviceError(f"{path} looks like {k.what} but its settings are not what {k.made_by} writes "
                            f"({type(exc).__name__}: {str(exc)[:120]}); re-create it") from None
    out["verified"] = verify
    return out


def summary_lines(info: dict[str, Any]) -> list[str]:
    """A few human-readable lines of a `describe` result."""
    lines = [f"{info['path']}: {info['what']} ({info['bytes'] / 1e6:.2f} MB; made by {info['made_by']})"]
    for key in ("summary", "origin", "scores"):
        if info.get(key):
            lines.append(f"  {key}: {info[key]}")
    for sub in info.get("precisions", {}).values():
        lines += ["  " + line for line in summary_lines(sub)]
    lines.append("  checked: loaded with every check its loader makes" if info["verified"] else
                 "  checked: files named and parsed only (add --verify to load it with every check)")
    return lines


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _short(path: object) -> str:
    """The last two parts of a path (a packaged model's folder is often just `model`)."""
    parts = Path(str(path)).parts
    return "/".join(parts[-2:]) if len(parts) > 1 else str(path)


def _config(file: Path, what: str, links_ok: bool = False) -> dict:
    """A settings file of the artifact as a dict; one that is huge or not a JSON object is a one-line error, and so is
    a symbolic link (unless `links_ok`: a Hugging Face model, which ondevice did not write)."""
    if not links_ok:
        artifact_file(file.parent, file.name, what)
    if file.is_file() and file.stat().st_size > layouts.MAX_SETTINGS_BYTES:
        raise OndeviceError(f"{what} {file} is {file.stat().st_size / 1e6:.0f} MB, far more than any settings file; "
                            "it is not one ondevice wrote")
    raw = read_json(file, what)
    if not isinstance(raw, dict):
        raise OndeviceError(f"{what} {file} is not a JSON object; it is not one ondevice wrote")
    return raw


def _json(path: Path, name: str, what: str) -> dict | None:
    """A settings file beside the artifact, or None when it is not there (older artifacts lack some)."""
    return _config(path / name, what) if (path / name).is_file() or (path / name).is_symlink() else None


def _index(path: Path, verify: bool) -> dict[str, Any]:
    head = read_header(path)
    if verify:
        HammingIndex.load(path, mmap=True, verify=True)
    enc = head["encoder"]
    return {"summary": f"{head['count']:,} codes x {head['bits']} bits, format v{head['version']}",
            "origin": enc.describe() if enc else "encoder not recorded",
            "config": {k: v for k, v in head.items() if k != "encoder"}}


def _sharded(path: Path, verify: bool) -> dict[str, Any]:
    manifest, _ = read_manifest(path)
    if verify:
        ShardedIndex.open(path, verify=True)
    return {"summary": f"{manifest.count:,} codes x {manifest.bits} bits in {len(manifest.shards)} shards"}


def _bundle(path: Path, verify: bool) -> dict[str, Any]:
    # a name that the top-level imports already bind to another module's function
    from ondevice.runtime import Bundle, read_manifest

    manifest = read_manifest(path)
    if verify:
        Bundle.load(path)
    student, binarizer = manifest.get("student") or {}, manifest.get("binarizer") or {}
    training = manifest.get("training") or {}
    heads = [name for key, name in (("pairs", "DSE / DvBERT pair head"), ("dipair", "DiPair head")) if manifest.get(key)]
    summary = (f"{manifest.get('precision')} encoder, {manifest.get('dim')}-d vectors, {manifest.get('bits')}-bit "
               f"{binarizer.get('method', '?')} codes; BiLSTM {student.get('hidden_size')} hidden, "
               f"{student.get('pooling')} pooling" + (f"; {', '.join(heads)}" if heads else ""))
    teacher = (manifest.get("teacher") or {}).get("path") or (student.get("teacher") or {}).get("path")
    corpus = training.get("corpus")
    corpus = ", ".join(map(str, corpus)) if isinstance(corpus, list) else corpus
    sentences = f"{training['max_sentences']:,} sentences of " if isinstance(training.get("max_sentences"), int) else ""
    origin = ", ".join(x for x in (f"teacher {_short(teacher)}" if teacher else "",
                                    f"{sentences}{corpus}" if corpus else "",
                                    f"train splits {training['train_splits']}" if training.get("train_splits") else "",
                                    f"{training['epochs_done']} epoch(s)" if training.get("epochs_done") else "",
                                    f"continued from {training['init_from']}" if training.get("init_from") else "") if x)
    held = training.get("held_out_cosine_to_teacher")
    return {"summary": summary, "origin": origin or "not recorded",
            "scores": f"held-out cosine to the teacher {held}" if held is not None else "",
            "config": {k: manifest[k] for k in ("precision", "dim", "bits", "student", "binarizer", "training")
                       if k in manifest}}


def _bundles(path: Path, verify: bool) -> dict[str, Any]:
    subs = {p: describe(path / p, verify) for p in layouts.PRECISIONS if (path / p / layouts.MANIFEST).is_file()}
    return {"summary": f"precisions {', '.join(subs)}", "precisions": subs}


def _student(path: Path, verify: bool) -> dict[str, Any]:
    cfg = _config(path / layouts.STUDENT_CONFIG, "student config")
    # the field types and ranges the loader checks, so a corrupt config is not described as a model
    dataclass_from_dict(StudentConfig, cfg, f"student config {path / layouts.STUDENT_CONFIG}").validate(
        f"{path / layouts.STUDENT_CONFIG}")
    if verify:
        Student.load(path)
    distill = _json(path, layouts.DISTILL_CONFIG, "distill config")
    unpacked = _json(path, layouts.UNPACKED, "unpack record")
    if distill:
        corpus = distill.get("corpus")
        corpus = ", ".join(map(str, corpus)) if isinstance(corpus, list) else corpus
        origin = (f"distilled from {_short(distill.get('teacher', '?'))} on "
                  f"{distill.get('max_sentences') or 'all'} sentences of {corpus}, {distill.get('epochs')} epoch(s), "
                  f"seed {distill.get('seed')}")
    elif unpacked:
        origin = f"unpacked from bundle {unpacked.get('bundle')}"
    else:
        origin = "not recorded"

    log = artifact_file(path, layouts.TRAIN_LOG, "student")
    last = log.read_text(encoding="utf-8").strip().splitlines()[-1:] if log.is_file() else []
    return {"summary": f"BiLSTM {cfg.get('hidden_size')} hidden, {cfg.get('embedding_dim')}-d word vectors, "
                       f"{cfg.get('vocab_size'):,} words, {cfg.get('pooling')} pooling, {cfg.get('output_dim')}-d output",
            "origin": origin, "scores": f"last epoch: {last[0]}" if last else "",
            "config": {"student": cfg, "distill": distill, "unpacked": unpacked}}


def _binarizer(path: Path, verify: bool) -> dict[str, Any]:
    cfg = _config(path / layouts.BINARIZER_CONFIG, "binarizer config")
    try:  # the method, bits and dim the loader checks, so a corrupt config is not described as a binarizer
        check_bits(cfg.get("method"), cfg.get("bits"), cfg.get("dim"))
    except OndeviceError as exc:
        raise OndeviceError(f"{path / layouts.BINARIZER_CONFIG}: {exc}; the file is corrupt or from another version") from None
    if verify:
        Binarizer.load(path)
    return {"summary": f"{cfg.get('method')}: {cfg.get('dim')}-d vectors to {cfg.get('bits')} bits",
            "origin": f"fitted on {cfg.get('train_rows'):,} vectors, seed {cfg.get('seed')}"
            if isinstance(cfg.get("train_rows"), int) else "not recorded",
            "config": cfg}


def _cross_encoder(path: Path, verify: bool) -> dict[str, Any]:
    info = _config(path / layouts.TEACHER_INFO, "teacher info")
    if verify:
        # the pairs add-on: loaded only for pair models, never on import
        from ondevice.pairs.crossencoder import CrossEncoderTeacher

        CrossEncoderTeacher.load(path).model  # noqa: B018 (loading the weights is the check)
    cfg = info.get("config") or {}
    return {"summary": f"task {cfg.get('task')}, base {_short(cfg.get('base', '?'))}",
            "origin": f"{cfg.get('epochs')} epochs, lr {cfg.get('lr')}, seed {cfg.get('seed')}",
            "scores": f"dev {info['dev']}" if info.get("dev") else "", "config": info}


def _pair_run(config_name: str, method: str):
    def read(path: Path, verify: bool) -> dict[str, Any]:
        cfg = _config(path / config_name, f"{method} config")
        if verify:
            if method == "DiPair":
                from ondevice.pairs.dipair_train import DiPairStudent as Run
            else:
                from ondevice.pairs.train import PairStudent as Run
            Run.load(path)
        dev = _json(path, layouts.RUN_DEV, "dev metrics")
        teacher = cfg.get("teacher") or ",".join(cfg.get("teachers") or [])
        return {"summary": f"{method} student for task {cfg.get('task')}",
                "origin": f"teacher(s) {teacher}, student {cfg.get('student')}, seed {cfg.get('seed')}",
                "scores": f"dev {dev}" if dev else "",
                "config": {"run": cfg, "data": _json(path, layouts.RUN_DATA, "data summary"), "dev": dev}}

    return read


def _hf_model(path: Path, verify: bool) -> dict[str, Any]:
    cfg = _config(path / layouts.STUDENT_CONFIG, "model config", links_ok=True)
    if verify:
        # looked up on each call, so a patched attribute is seen
        from ondevice.teacher import Teacher

        Teacher(str(path))
    return {"summary": f"{cfg.get('model_type')}: {cfg.get('num_hidden_layers')} layers, {cfg.get('hidden_size')} "
                       f"hidden, {cfg.get('vocab_size'):,} tokens" if isinstance(cfg.get("vocab_size"), int)
            else str(cfg.get("model_type")),
            "origin": "not made by ondevice", "config": cfg}


_READERS = {
    "index": _index, "sharded-index": _sharded, "bundle": _bundle, "bundles": _bundles, "student": _student,
    "binarizer": _binarizer, "cross-encoder": _cross_encoder,
    "dse-run": _pair_run(layouts.DSE_CONFIG, "DSE"), "dvbert-run": _pair_run(layouts.DVBERT_CONFIG, "DvBERT"),
    "dipair-run": _pair_run(layouts.DIPAIR_CONFIG, "DiPair"), "hf-model": _hf_model,
}
