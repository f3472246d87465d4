"""`ondevice pairs dipair`: train a DiPair head on an SRA student against a cross-encoder teacher, in two stages.

Stage 1 trains the projection and the head with the encoder frozen; stage 2 trains everything (paper Fig. 3a),
adding the SRA loss (1 - cos)/2 of the student's sentence vectors to the SRA teacher's cached vectors, so the
fine-tuned encoder still serves vectors and Hamming codes. The loss against the cross-encoder is a soft-label
loss: binary -> BCE with target sigmoid(t / T) (paper eq. 1), classes -> cross-entropy with softmax(t / T),
regression -> squared error to the teacher's logit (our DSE convention: regression teachers output gold mapped to
[0, 1], with no sigmoid, so sigmoid(t / T) would be a different scale). `loss="mse"` (`--loss mse`) takes the
squared error to the teacher's logits for every kind, DSE's distillation term: a confident teacher's logit keeps
its size, where BCE's target saturates at 0 or 1.

A run folder holds `student/` (the fine-tuned encoder), `dipair_head.safetensors` + `dipair_head.json` (the
dev-best epoch), `dipair_config.json`, `data.json`, `dev.json`, `sra_cosine.json` (held-out cosine to the SRA
teacher before / after), `train_log.jsonl` and `checkpoint/` (latest epoch; `--resume` continues from it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ondevice import checkpoints, layouts
from ondevice._deps import require
from ondevice.configs import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_LR,
    Check,
    Composed,
    Compute,
    choice_check,
    composed,
    first_problem,
    float_check,
    int_check,
)
from ondevice.devices import on_device, resolve_device
from ondevice.errors import OndeviceError
from ondevice.eval.pair_tasks import load_pairs, task_spec
from ondevice.io import artifact_file, check_out_dir, read_json, write_json, write_record
from ondevice.pairs.augment import AUGMENT_KEYS, AugmentConfig, extra_texts, transfer_set
from ondevice.pairs.config import PairSource
from ondevice.pairs.dipair import (
    DiPairHeadConfig,
    build_head,
    build_projection,
    build_vector_projection,
    encoder_outputs,
    head_weights,
    load_head_weights,
    save_head,
    side_states,
)
from ondevice.pairs.logits import teacher_logits
from ondevice.pairs.metrics import cosines, dev_metrics, evaluate_scores, headline
from ondevice.pairs.train import _batches, _index
from ondevice.pairs.views import open_teacher, parse_teachers, view_checks
from ondevice.student import Student, cosine_loss
from ondevice.teacher import cached_vectors
from ondevice.tokenizer import pad_ids
from ondevice.trainloop import Position, check_resume, check_weights, optimizer_step, run_epochs, write_log


@dataclass
class Stages:
    """DiPair's optimisation: stage 1 trains the projection and head (encoder frozen), stage 2 everything."""

    stage1_epochs: int = 3
    stage2_epochs: int = 4  # may grow on --resume: the run trains on
    batch_size: int = 32
    lr1: float = 1e-3
    lr2: float = 5e-4  # DSE's rate; above 2e-4 on STS-B dev and test

    def checks(self) -> list[Check]:
        """Epoch counts (at least one epoch in all), a batch size, finite positive rates."""
        return [int_check(self.stage1_epochs, "stage1_epochs", 0, MAX_EPOCHS),
                int_check(self.stage2_epochs, "stage2_epochs", 0, MAX_EPOCHS),
                (self.stage1_epochs + self.stage2_epochs >= 1, "{stage1_epochs} + {stage2_epochs} must be >= 1"),
                int_check(self.batch_size, "batch_size", 1, MAX_BATCH),
                float_check(self.lr1, "lr1", 0.0, MAX_LR, lo_open=True), float_check(self.lr2, "lr2", 0.0, MAX_LR, lo_open=True)]

    @property
    def epochs(self) -> int:
        """Both stages' epochs."""
        return self.stage1_epochs + self.stage2_epochs

    def stage_of(self, epoch: int) -> int:
        """The stage (1 or 2) that trains `epoch` (0-based)."""
        return 1 if epoch < self.stage1_epochs else 2


@composed
class DiPairConfig(Composed):
    """Every setting of a DiPair run, in pieces; saved (flat) as dipair_config.json."""

    REQUIRED = ("task", "data", "student", "teacher")

    pairs: PairSource = field(default_factory=PairSource)
    student: str  # SRA-distilled student dir (`ondevice distill`)
    teacher: str  # teacher view(s), comma-separated: a cross-encoder dir, DIR:ba, bi-encoder (several: their mean)
    sra_teacher: str = ""  # bi-encoder the student was distilled from; "" = the path in the student's config
    n: int = 8
    m: int = 8
    d: int = 128
    layers: int = 1  # paper: 2 layers, 1 head; with the pooled slot 1 layer scored as well on STS-B at ~5x the speed
    heads: int = 1
    ffn: int = 256
    select: str = "first"  # first | firstlast
    pooled_slot: bool = True  # slot 0 of each side = the projected sentence vector, plus a comparison slot in the head
    # (not in the paper; without it the head trained on STS-B-sized data scores ~55 instead of ~79: README)
    stages: Stages = field(default_factory=Stages)
    temperature: float = 1.0  # paper: T = 1
    loss: str = "bce"  # bce: soft labels (paper eq. 1; squared error for regression) | mse: squared error to the logits
    sra_weight: float = 1.0  # weight of the SRA cosine loss in stage 2 (0 = none)
    dropout: float = 0.0  # head dropout in training (BERT: 0.1); the exported head is the same either way
    # on STS-B 30k random pairs beat 10k and 100k (README "Far more pairs")
    augment: AugmentConfig = field(default_factory=lambda: AugmentConfig(random_pairs=30000))
    seed: int = 0
    compute: Compute = field(default_factory=Compute)  # training and teacher labelling; the run loads on any device

    def head_config(self, in_dim: int, spec, vec_dim: int = 0) -> DiPairHeadConfig:
        """The head's config for a student of token width `in_dim`, sentence-vector width `vec_dim` and task `spec`."""
        return DiPairHeadConfig(in_dim=in_dim, n=self.n, m=self.m, d=self.d, layers=self.layers, heads=self.heads,
                                ffn=self.ffn, mode=self.select, outputs=spec.num_outputs, task=spec.name, kind=spec.kind,
                                labels=list(spec.labels), gold_low=spec.low, gold_high=spec.high,
                                vec_dim=vec_dim if self.pooled_slot else 0)

    def validate(self) -> None:
        """Reject impossible values with a one-line ConfigError naming the field."""
        first_problem([*self.pairs.checks(), *self.stages.checks(),
                       (self.temperature > 0, "{temperature} must be > 0"), (self.sra_weight >= 0, "{sra_weight} must be >= 0"),
                       choice_check(self.loss, "loss", LOSSES), (0 <= self.dropout < 1, "{dropout} must be in [0, 1)"),
                       *self.compute.checks(), *self.augment.checks(),
                       (bool(self.teacher), "{teacher} is required (DiPair learns from the cross-encoder's logits)"),
                       *view_checks(parse_teachers(self.teacher), "{teacher}")])
        DiPairHeadConfig(in_dim=2, n=self.n, m=self.m, d=self.d, layers=self.layers, heads=self.heads, ffn=self.ffn,
                         mode=self.select, vec_dim=2 if self.pooled_slot else 0).validate()


LOSSES = ("bce", "mse")
_RESUME_KEYS = ("task", "n", "m", "d", "layers", "heads", "ffn", "select", "pooled_slot", "stage1_epochs", "stage2_epochs", "batch_size",
                "lr1", "lr2", "temperature", "loss", "sra_weight", "dropout", *AUGMENT_KEYS, "max_train_pairs", "seed",
                "split_seed")


def soft_label_loss(logits, teacher, kind: str, temperature: float, loss: str = "bce"):
    """Soft-label loss against teacher logits (see the module docstring for the per-kind choice); loss="mse": the
    squared error to the teacher's logits (summed over outputs, mean over pairs) whatever the kind."""
    torch = require("torch", "train")
    F = torch.nn.functional
    if loss == "mse":
        return ((logits - teacher) ** 2).sum(-1).mean()
    if kind == "binary":
        return F.binary_cross_entropy_with_logits(logits[:, 0], torch.sigmoid(teacher[:, 0] / temperature))
    if kind == "classes":
        return -(torch.softmax(teacher / temperature, -1) * F.log_softmax(logits, -1)).sum(-1).mean()
    return ((logits[:, 0] - teacher[:, 0]) ** 2).mean()


class DiPairStudent:
    """A trained DiPair run: encoder + projection + head in torch (the training-side reference)."""

    def __init__(self, student: Student, cfg: DiPairHeadConfig, proj, head, vproj=None):
        self.student, self.cfg, self.proj, self.head = student, cfg, proj.eval(), head.eval()
        self.vproj = vproj.eval() if vproj is not None else None

    @classmethod
    def load(cls, directory: str | Path) -> DiPairStudent:
        """Load a run folder written by `train_dipair`."""
        torch = require("torch", "train")
        directory = Path(directory)
        for name in layouts.RUN_FILES:
            artifact_file(directory, name, "pair-model run")
        student = Student.load(directory / layouts.RUN_STUDENT)
        cfg, w = load_head_weights(directory)
        proj, head, vproj = build_projection(cfg), build_head(cfg), build_vector_projection(cfg)
        proj.load_state_dict({"weight": torch.from_numpy(w["proj.weight"]), "bias": torch.from_numpy(w["proj.bias"])})
        if vproj is not None:
            vproj.load_state_dict({"weight": torch.from_numpy(w["vproj.weight"]), "bias": torch.from_numpy(w["vproj.bias"])})
        head.load_state_dict({k: torch.from_numpy(v) for k, v in head_weights(w).items()})
        return cls(student, cfg, proj, head, vproj)

    def states(self, texts: Sequence[str], role: str = "b", batch_size: int = 256) -> np.ndarray:
        """Token states float32 (len(texts), N or M, D) of sentences in role 'a' (N slots) or 'b' (M slots)."""
        ids = [np.asarray(self.student.tokenizer.ids(t), np.int64) for t in texts]
        _, sa, sb = _encode_all(self.student.model, self.proj, ids, self.cfg, batch_size, self.vproj)
        return (sa if role == "a" else sb).numpy()

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Sentence vectors of the fine-tuned encoder."""
        return self.student.encode(list(texts))

    def logits_from_states(self, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
        """Head logits (n, outputs) of cached states."""
        torch = require("torch", "train")
        with torch.inference_mode():
            return self.head(torch.from_numpy(np.asarray(sa, np.float32)), torch.from_numpy(np.asarray(sb, np.float32))).numpy()

    def logits(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Head logits of the pairs (a[i], b[i])."""
        uniq = list(dict.fromkeys([*a, *b]))
        pos = {s: i for i, s in enumerate(uniq)}
        ids = [np.asarray(self.student.tokenizer.ids(t), np.int64) for t in uniq]
        _, sa, sb = _encode_all(self.student.model, self.proj, ids, self.cfg, vproj=self.vproj)
        return self.logits_from_states(sa.numpy()[[pos[s] for s in a]], sb.numpy()[[pos[s] for s in b]])

    def evaluate(self, data) -> dict:
        """Task metrics on `data` with the dev-tuned threshold."""
        return evaluate_scores(task_spec(data.task), self.logits(data.a, data.b), data.gold, self.cfg.threshold)


def _encode_all(encoder, proj, ids: list[np.ndarray], cfg: DiPairHeadConfig, batch: int = 256, vproj=None):
    """(vectors, states_a, states_b) of all id rows, no grad, on the encoder's device."""
    torch = require("torch", "train")
    encoder.eval()
    device = next(encoder.parameters()).device
    vec, sa, sb = [], [], []
    with torch.inference_mode():
        for s in range(0, len(ids), batch):
            x, lens = pad_ids(ids[s : s + batch])
            lens_t = on_device(lens, device)
            v, out = encoder_outputs(encoder, on_device(x, device), lens_t)
            vec.append(v)
            sa.append(side_states(proj, vproj, v, out, lens_t, cfg.n, cfg.mode))
            sb.append(side_states(proj, vproj, v, out, lens_t, cfg.m, cfg.mode))
    return torch.cat(vec), torch.cat(sa), torch.cat(sb)


def write_sra_cosine(out: Path, before: float | None, after: float | None) -> None:
    """sra_cosine.json: the encoder's mean dev cosine to the SRA teacher before training and for the published model."""
    write_json(out / layouts.SRA_COSINE, {"what": "mean cosine of student vs SRA teacher vectors on the dev split's "
                                                 "distinct sentences", "before": before, "after": after,
                                         "drop": None if before is None or after is None else round(before - after, 5)})


def _cosine(u: np.ndarray, v: np.ndarray) -> float:
    """Mean row-wise cosine of two float matrices."""
    return float(cosines(u, v).mean())


def _sra_teacher(config: DiPairConfig, student: Student, device: str = "cpu"):
    # looked up on each call, so a patched attribute is seen
    from ondevice.teacher import Teacher

    info = student.config.teacher or {}
    path = config.sra_teacher or info.get("path", "")
    if not path:
        raise OndeviceError("the student's config names no SRA teacher; pass --sra-teacher (the bi-encoder it was "
                            "distilled from) or --sra-weight 0")
    return Teacher(path, pooling=info.get("pooling"), normalize=bool(info.get("normalize", True)),
                   max_length=int(info.get("max_length", 256)), device=device)


def train_dipair(config: DiPairConfig, out_dir: str | Path, resume: bool = False, progress: bool = True) -> DiPairStudent:
    """Train (or resume) one DiPair run: stage 1 (encoder frozen) then stage 2 (all + SRA loss); keeps the dev-best epoch."""
    # tqdm.auto: slow to import (about 70 ms), loaded on use
    from tqdm.auto import tqdm

    config.validate()
    torch = require("torch", "train")
    device = resolve_device(config.device)
    out = check_out_dir(out_dir)
    extra = extra_texts(config)  # before the resume check: it fills in the --augment-text checksum
    check_resume(out, config, layouts.DIPAIR_CONFIG, "DiPair config", _RESUME_KEYS, resume, kind="dipair-run",
                 extendable=("stage2_epochs",))
    if config.threads:
        torch.set_num_threads(config.threads)
    spec = task_spec(config.task)
    student = Student.load(config.student)
    if student.config.pooling == "last":
        raise OndeviceError("DiPair needs a mean/max/meanmax-pooled student (its token outputs); this one pools 'last'")
    if config.sra_weight > 0 and not (config.sra_teacher or (student.config.teacher or {}).get("path")):
        raise OndeviceError("the student's config names no SRA teacher; pass --sra-teacher (the bi-encoder it was "
                            "distilled from) or --sra-weight 0")
    teacher = open_teacher(config.teacher, spec.name, config.data, config.split_seed, device, progress)
    train = load_pairs(config.task, "train", config.data, config.split_seed)
    dev = load_pairs(config.task, "dev", config.data, config.split_seed)
    if config.max_train_pairs:
        train = train.subset(np.random.default_rng(config.seed).permutation(len(train))[: config.max_train_pairs])

    aug = transfer_set(train, student.encode, config, extra)
    a, b = train.a + aug.a, train.b + aug.b
    # Two lists, as DSE labels them: a DSE run with the same augmentation flags fills the very same cache folders,
    # so either run reuses the other's logits, also when both start at once (the second waits on the fill lock).
    targets = np.concatenate([teacher_logits(teacher, train.a, train.b, progress=progress),
                              teacher_logits(teacher, aug.a, aug.b, progress=progress)]).astype(np.float32)
    texts, pa, pb = _index([], a, b)
    ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in texts]
    dev_texts, da, db = _index([], dev.a, dev.b)
    dev_ids = [np.asarray(student.tokenizer.ids(t), np.int64) for t in dev_texts]

    sra = _sra_teacher(config, student, device) if config.sra_weight > 0 else None
    t_vec = on_device(np.array(cached_vectors(sra, texts, progress=progress), np.float32), device) if sra else None
    dev_t_vec = np.asarray(cached_vectors(sra, dev_texts, progress=progress), np.float32) if sra else None

    head_cfg = config.head_config(2 * student.config.hidden_size, spec, student.config.output_dim)
    torch.manual_seed(config.seed)
    proj, head = build_projection(head_cfg), build_head(head_cfg, config.dropout)
    vproj = build_vector_projection(head_cfg)
    holder = type("Holder", (), {})()
    parts = {"encoder": student.model, "proj": proj, "head": head}
    if vproj is not None:
        parts["vproj"] = vproj
    holder.model = torch.nn.ModuleDict(parts).to(device)  # before any optimizer holds its parameters

    def optimizer(stage: int):
        student.model.requires_grad_(stage == 2)
        params = [p for p in holder.model.parameters() if p.requires_grad]
        return torch.optim.Adam(params, lr=config.lr1 if stage == 1 else config.lr2)

    stage_of = config.stages.stage_of
    if resume:  # a fresh stage starts a fresh optimizer: the saved one is loaded only within its stage
        state = checkpoints.read_state(out)
        with checkpoints.checkpoint_errors(out / layouts.CHECKPOINT):
            opt = optimizer(stage_of(int(state["epoch"])))
            state = checkpoints.load(out, holder.model, opt if state.get("opt_stage") == stage_of(state["epoch"]) else None,
                                     state)
        write_json(out / layouts.DIPAIR_CONFIG, config.to_dict())  # what the run now trains to (stage2_epochs may grow)
    else:
        state = {"epoch": 0, "step": 0, "log": [], "best": None, "opt_stage": stage_of(0)}
        opt = optimizer(stage_of(0))
        out.mkdir(parents=True, exist_ok=True)
        before = _cosine(student.encode(dev_texts), dev_t_vec) if sra else None
        write_json(out / layouts.DIPAIR_CONFIG, config.to_dict())
        write_json(out / layouts.RUN_DATA, {"train_pairs": len(train), "augment_pairs": len(aug), "dev_pairs": len(dev),
                                        "teacher": teacher.identity, "sentences": len(texts),
                                        "sra_dev_cosine_before": before})

    def publish(metrics: dict, threshold: float | None, cosine: float | None) -> None:
        head_cfg.threshold = threshold
        save_head(out, proj, head, head_cfg, vproj)
        student.save(out / layouts.RUN_STUDENT)
        write_record(out / layouts.RUN_DEV, metrics)
        write_sra_cosine(out, read_json(out / layouts.RUN_DATA, "data summary").get("sra_dev_cosine_before"), cosine)

    target_t = on_device(targets, device)
    total = config.stages.epochs

    def train_epoch(pos: Position) -> dict:
        nonlocal opt
        epoch = pos.epoch
        stage = stage_of(epoch)
        if state.get("opt_stage") != stage:
            opt, state["opt_stage"] = optimizer(stage), stage
        batches = _batches(len(a), config.batch_size, config.seed * 1000003 + epoch)
        holder.model.train()
        if stage == 1:
            student.model.eval()
        losses: list[float] = []
        bar = tqdm(batches[pos.step:], desc=f"stage {stage} epoch {epoch + 1}/{total}", unit="batch", disable=not progress)
        for rows in bar:
            uniq, inv = np.unique(np.concatenate([pa[rows], pb[rows]]), return_inverse=True)
            x, lens = pad_ids([ids[i] for i in uniq])
            x_t, lens_t = on_device(x, device), on_device(lens, device)
            if stage == 1:
                with torch.no_grad():
                    vec, tok = encoder_outputs(student.model, x_t, lens_t)
            else:
                vec, tok = encoder_outputs(student.model, x_t, lens_t)
            ia, ib = on_device(inv[: len(rows)], device), on_device(inv[len(rows):], device)
            sa = side_states(proj, vproj, vec[ia], tok[ia], lens_t[ia], head_cfg.n, head_cfg.mode)
            sb = side_states(proj, vproj, vec[ib], tok[ib], lens_t[ib], head_cfg.m, head_cfg.mode)
            loss = soft_label_loss(head(sa, sb), target_t[on_device(rows, device)], spec.kind, config.temperature,
                                   config.loss)
            if stage == 2 and t_vec is not None:
                loss = loss + config.sra_weight * cosine_loss(vec, t_vec[on_device(uniq, device)])
            optimizer_step(loss, opt, pos, losses, bar, "lower --lr1 / --lr2")
        bar.close()
        vec, dsa, dsb = _encode_all(student.model, proj, dev_ids, head_cfg, vproj=vproj)
        head.eval()
        with torch.inference_mode():
            dl = head(dsa[on_device(da, device)], dsb[on_device(db, device)]).cpu().numpy()
        metrics, threshold = dev_metrics(spec, dl, dev.gold)
        cosine = _cosine(vec.cpu().numpy(), dev_t_vec) if dev_t_vec is not None else None
        entry = {"epoch": epoch + 1, "stage": stage, "train_loss": float(np.mean(losses)) if losses else None,
                 "dev": metrics, "sra_dev_cosine": cosine, "time": time.time()}
        if progress:
            print(f"stage {stage} epoch {epoch + 1}: train loss {entry['train_loss']:.4f}, dev {spec.metric} "
                  f"{metrics[spec.metric]}, SRA cosine {cosine}", flush=True)
        if state["best"] is None or headline(spec, metrics) > state["best"]["score"]:
            state["best"] = {"epoch": epoch + 1, "score": headline(spec, metrics)}
            publish({**metrics, "epoch": epoch + 1, "stage": stage}, threshold, cosine)
        return entry

    def save(pos: Position) -> None:  # the optimizer's stage too: a resume in another stage starts a fresh one
        check_weights(holder.model, f"at epoch {pos.epoch + 1}, batch {pos.step}", "lower --lr1 / --lr2")
        checkpoints.save(out, holder.model, opt, {**state, "epoch": pos.epoch, "step": pos.step})

    run_epochs(Position(state["epoch"], state["step"]), total, train_epoch, save, state["log"],
               lambda: write_log(out / layouts.TRAIN_LOG, state["log"]))
    return DiPairStudent.load(out)
