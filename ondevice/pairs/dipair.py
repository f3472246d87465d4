"""DiPair (Chen et al.): the student's first N / M token states, projected to D, into a small transformer head.

Pieces, each with a numpy reference the ONNX graphs and tests are checked against:

- `select_positions`: which token outputs of a sentence are kept. "first": positions 0..N-1. "firstlast":
  positions 0..N/2-1 and the last N - N/2 (a forward LSTM state early in a sentence has seen only its prefix;
  the backward half of a late state has seen only the suffix). A sentence with at most N tokens keeps all of
  them in order in either mode; the remaining slots are padding.
- token states: tanh(P out[idx] + p) in (-1, 1) for kept slots, exact zero rows for padding. tanh bounds the
  states so an int8 cache needs no per-item scale (q = round(127 x)): N x D bytes per item, 1024 at N=8, D=128.
- the head: x = [states_a; states_b] + position embedding + segment embedding; L post-LN transformer layers
  (1 head by default, ReLU FFN), attention keys masked where a slot is a zero row (padding); logits from the
  first slot's output. The mask is read off the states themselves, so a cache holds nothing but the states.
- `vec_dim > 0` (the "pooled slot"): slot 0 of each side is tanh(V u + c), u the student's sentence vector, and the
  token positions fill slots 1..N-1 (the cache stays N x D). The head prepends a comparison slot
  C [p_a, p_b, p_a * p_b, |p_a - p_b|] + c_0 built from the two pooled slots (the DSE head's features, which a
  head trained from scratch on a few thousand pairs does not learn to form by attention) and reads the logits
  off that slot; it is never masked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from ondevice import layouts
from ondevice._deps import require
from ondevice.checks import check_float
from ondevice.configs import first_problem
from ondevice.errors import OndeviceError
from ondevice.io import artifact_file, atomic_path, dataclass_from_dict, read_json, write_json
from ondevice.pairs.model import KINDS
from ondevice.student import check_finite

MODES = ("first", "firstlast")
MASK_NEG = -1e4  # additive attention mask: exp(-1e4) is 0 in float32, and no inf - inf NaN can appear
LN_EPS = 1e-5


@dataclass
class DiPairHeadConfig:
    """Shape and meaning of a DiPair head (projection included); saved as dipair_head.json."""

    in_dim: int  # 2H: the BiLSTM's token output width
    n: int = 8  # slots of sentence A
    m: int = 8  # slots of sentence B
    d: int = 128  # projected width
    layers: int = 2
    heads: int = 1
    ffn: int = 256
    mode: str = "first"
    outputs: int = 1
    task: str = ""
    kind: str = "regression"  # regression | binary | classes
    labels: list = field(default_factory=list)
    gold_low: float = 0.0
    gold_high: float = 1.0
    threshold: float | None = None
    vec_dim: int = 0  # > 0: slot 0 of each side is the projected sentence vector (this wide), see the module docstring
    format_version: int = 1

    @property
    def pooled(self) -> bool:
        """Whether slot 0 of each side holds the projected sentence vector (and the head has a comparison slot)."""
        return self.vec_dim > 0

    @property
    def slots(self) -> int:
        """Input slots of the transformer: the comparison slot (pooled heads), then N of side a and M of side b."""
        return self.n + self.m + (1 if self.pooled else 0)

    def validate(self) -> None:
        """One-line errors for impossible shapes (and for field types no head could have: the file may come from anywhere)."""
        for name in ("in_dim", "n", "m", "d", "layers", "heads", "ffn", "outputs", "vec_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise OndeviceError(f"DiPair head config: {name} {value!r} is not a whole number; re-create the run")
        try:
            for name in ("gold_low", "gold_high", *(("threshold",) if self.threshold is not None else ())):
                check_float(getattr(self, name), name, -math.inf, math.inf)
        except OndeviceError as exc:
            raise OndeviceError(f"DiPair head config: {exc}; re-create the run") from None
        if self.kind not in KINDS or not isinstance(self.labels, list):
            raise OndeviceError(f"DiPair head config: kind {self.kind!r} / labels are not valid; re-create the run")
        # named as the run's settings (DiPairConfig's fields), which a CLI shows as its flags
        first_problem([(self.n >= 1, "{n} must be >= 1"), (self.m >= 1, "{m} must be >= 1"), (self.d >= 1, "{d} must be >= 1"),
                       (self.layers >= 1, "{layers} must be >= 1"), (self.heads >= 1, "{heads} must be >= 1"),
                       (self.d % max(self.heads, 1) == 0, f"{{d}} ({self.d}) must be divisible by {{heads}} ({self.heads})"),
                       (self.ffn >= 1, "{ffn} must be >= 1"), (self.mode in MODES, f"{{select}} must be one of {', '.join(MODES)}"),
                       (self.n <= 512 and self.m <= 512, "{n} and {m} must be <= 512"), (self.d <= 4096, "{d} must be <= 4096"),
                       (self.vec_dim >= 0, "vec_dim must be >= 0"),
                       (not self.pooled or min(self.n, self.m) >= 2,
                        "{pooled_slot} needs {n} and {m} >= 2 (slot 0 is the sentence vector)")])

    def cache_bytes(self, int8: bool = True) -> int:
        """Bytes one catalog item's cached B-side states take (int8: one byte per value, no scale)."""
        return self.m * self.d * (1 if int8 else 4)


def select_positions(lengths: np.ndarray, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Kept token positions (len(lengths), n) int64 and their validity (bool); padding slots point at 0."""
    lengths = np.asarray(lengths, np.int64)
    j = np.arange(n, dtype=np.int64)[None, :]
    L = lengths[:, None]
    if mode == "first":
        idx = np.broadcast_to(j, (len(lengths), n)).copy()
    elif mode == "firstlast":
        half = n // 2
        idx = np.where((L > n) & (j >= half), L - n + j, j)
    else:
        raise OndeviceError(f"unknown selection {mode!r}; choose one of {', '.join(MODES)}")
    valid = j < L
    return np.where(valid, idx, 0).astype(np.int64), valid


def states_numpy(out: np.ndarray, lengths: np.ndarray, n: int, mode: str, weight: np.ndarray, bias: np.ndarray,
                 vec: np.ndarray | None = None, vweight: np.ndarray | None = None, vbias: np.ndarray | None = None) -> np.ndarray:
    """Reference states (B, n, D) from BiLSTM outputs (B, T, 2H): tanh(W x + b) on kept slots, 0 elsewhere; with
    `vec` (B, out) and its projection, slot 0 is tanh(V vec + c) and the tokens fill slots 1..n-1."""
    if vec is not None:
        first = np.tanh(np.asarray(vec, np.float64) @ np.asarray(vweight, np.float64).T + vbias)[:, None]
        return np.concatenate([first.astype(np.float32), states_numpy(out, lengths, n - 1, mode, weight, bias)], axis=1)
    idx, valid = select_positions(lengths, n, mode)
    picked = np.take_along_axis(np.asarray(out, np.float64), idx[:, :, None], axis=1)
    s = np.tanh(picked @ np.asarray(weight, np.float64).T + bias)
    return (s * valid[:, :, None]).astype(np.float32)


def quantize_states(states: np.ndarray) -> np.ndarray:
    """int8 cache of states in (-1, 1): round(127 x); zero rows stay zero rows."""
    return np.clip(np.rint(np.asarray(states, np.float32) * 127.0), -127, 127).astype(np.int8)


def dequantize_states(q: np.ndarray) -> np.ndarray:
    """float32 states of an int8 cache."""
    return np.asarray(q, np.float32) / np.float32(127.0)


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + LN_EPS) * g + b


def head_forward_numpy(cfg: DiPairHeadConfig, w: dict[str, np.ndarray], sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Reference head in float64: states_a (B, N, D), states_b (B, M, D) -> logits (B, outputs)."""
    f = {k: np.asarray(v, np.float64) for k, v in w.items()}
    sa, sb = np.asarray(sa, np.float64), np.asarray(sb, np.float64)
    parts = [sa, sb]
    if cfg.pooled:
        pa, pb = sa[:, 0], sb[:, 0]
        feats = np.concatenate([pa, pb, pa * pb, np.abs(pa - pb)], axis=1)
        parts.insert(0, (feats @ f["compare.weight"].T + f["compare.bias"])[:, None])
    s = np.concatenate(parts, axis=1)
    B, S, D = s.shape
    keep = np.abs(s).sum(-1) > 0  # (B, S)
    if cfg.pooled:
        keep[:, 0] = True
    x = s + f["position"][None, :S] + f["segment"][segment_ids(cfg)][None]
    h, dh = cfg.heads, D // cfg.heads
    add = np.where(keep, 0.0, MASK_NEG)[:, None, None, :]  # (B, 1, 1, S)
    for i in range(cfg.layers):
        p = f"layers.{i}."
        def heads_of(t):
            return t.reshape(B, t.shape[1], h, dh).transpose(0, 2, 1, 3)
        k = heads_of(x @ f[p + "k.weight"].T + f[p + "k.bias"])
        v = heads_of(x @ f[p + "v.weight"].T + f[p + "v.bias"])
        if i == cfg.layers - 1:  # only slot 0 reaches the logits: the last layer's queries and FFN need no other slot
            x = x[:, :1]
        q = heads_of(x @ f[p + "q.weight"].T + f[p + "q.bias"])
        a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) + add
        a = np.exp(a - a.max(-1, keepdims=True))
        a = a / a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(0, 2, 1, 3).reshape(B, x.shape[1], D)
        x = _layer_norm(x + ctx @ f[p + "o.weight"].T + f[p + "o.bias"], f[p + "ln1.weight"], f[p + "ln1.bias"])
        ff = np.maximum(x @ f[p + "ff1.weight"].T + f[p + "ff1.bias"], 0.0) @ f[p + "ff2.weight"].T + f[p + "ff2.bias"]
        x = _layer_norm(x + ff, f[p + "ln2.weight"], f[p + "ln2.bias"])
    return (x[:, 0] @ f["out.weight"].T + f["out.bias"]).astype(np.float32)


def segment_ids(cfg: DiPairHeadConfig) -> np.ndarray:
    """Segment of every input slot: 0 for the comparison slot and side a, 1 for side b."""
    return np.concatenate([np.zeros(cfg.slots - cfg.m, np.int64), np.ones(cfg.m, np.int64)])


def _torch():
    return require("torch", "train")


def build_head(cfg: DiPairHeadConfig, dropout: float = 0.0):
    """The torch head: (states_a (B, N, D), states_b (B, M, D)) -> logits (B, outputs); same maths as the reference.

    `dropout` acts in training only (BERT's places: the input sum, the attention and FFN outputs before each
    residual add); in eval mode the head is exactly the reference, so exports and parity do not see it."""
    torch = _torch()
    nn = torch.nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(cfg.d, cfg.d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(cfg.d, eps=LN_EPS), nn.LayerNorm(cfg.d, eps=LN_EPS)
            self.ff1, self.ff2 = nn.Linear(cfg.d, cfg.ffn), nn.Linear(cfg.ffn, cfg.d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, add, first_only: bool = False):
            B, _, D = x.shape
            dh = D // cfg.heads

            def heads_of(t):
                return t.reshape(B, t.shape[1], cfg.heads, dh).transpose(1, 2)
            k, v = heads_of(self.k(x)), heads_of(self.v(x))
            if first_only:  # the caller reads slot 0 only: skip the other slots' queries, outputs and FFN
                x = x[:, :1]
            a = heads_of(self.q(x)) @ k.transpose(-1, -2) / float(np.sqrt(dh)) + add
            ctx = (torch.softmax(a, -1) @ v).transpose(1, 2).reshape(B, x.shape[1], D)
            x = self.ln1(x + self.drop(self.o(ctx)))
            return self.ln2(x + self.drop(self.ff2(torch.relu(self.ff1(x)))))

    class DiPairHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.position = nn.Parameter(torch.randn(cfg.slots, cfg.d) * 0.02)
            self.segment = nn.Parameter(torch.randn(2, cfg.d) * 0.02)
            if cfg.pooled:
                self.compare = nn.Linear(4 * cfg.d, cfg.d)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.layers))
            self.out = nn.Linear(cfg.d, cfg.outputs)
            self.drop = nn.Dropout(dropout)
            self.register_buffer("seg_ids", torch.from_numpy(segment_ids(cfg)), persistent=False)

        def forward(self, sa, sb):
            parts = [sa, sb]
            if cfg.pooled:
                pa, pb = sa[:, 0], sb[:, 0]
                parts.insert(0, self.compare(torch.cat([pa, pb, pa * pb, (pa - pb).abs()], dim=-1))[:, None])
            s = torch.cat(parts, dim=1)
            keep = s.abs().sum(-1) > 0
            if cfg.pooled:
                keep = torch.cat([torch.ones_like(keep[:, :1]), keep[:, 1:]], dim=1)
            add = torch.where(keep, 0.0, MASK_NEG)[:, None, None, :].to(s.dtype)
            x = self.drop(s + self.position[None] + self.segment[self.seg_ids][None])
            for i, layer in enumerate(self.layers):
                x = layer(x, add, first_only=i == len(self.layers) - 1)
            return self.out(x[:, 0])

    cfg.validate()
    return DiPairHead()


def build_projection(cfg: DiPairHeadConfig):
    """The shared projection 2H -> D (tanh applied by `token_states`)."""
    return _torch().nn.Linear(cfg.in_dim, cfg.d)


def build_vector_projection(cfg: DiPairHeadConfig):
    """The pooled slot's projection of the sentence vector, out -> D (None for heads without a pooled slot)."""
    return _torch().nn.Linear(cfg.vec_dim, cfg.d) if cfg.pooled else None


def encoder_outputs(model, ids, lengths):
    """One pass of a student module: (sentence vectors (B, out), BiLSTM token outputs (B, T, 2H)).

    The same ops as `StudentModel.forward` (tests check the vectors are equal), keeping the token outputs.
    """
    torch = _torch()
    nn = torch.nn
    emb = model.embedding(ids)
    packed = nn.utils.rnn.pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, hc = model.lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
    mask = (torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]).unsqueeze(-1)
    if model.pooling == "last":
        pooled = torch.cat([hc[0][0], hc[0][1]], dim=-1)
    else:
        mean = (out * mask).sum(1) / lengths[:, None].to(out.dtype)
        mx = out.masked_fill(~mask, float("-inf")).max(1).values
        pooled = {"mean": mean, "max": mx}.get(model.pooling)
        if pooled is None:
            pooled = torch.cat([mean, mx], dim=-1)
    return torch.tanh(model.proj(pooled)), out


def token_states(proj, out, lengths, n: int, mode: str):
    """Torch token states (B, n, D): tanh(proj(out[kept])) with zero rows for padding slots."""
    torch = _torch()
    idx, valid = select_positions(lengths.cpu().numpy(), n, mode)
    idx_t = torch.from_numpy(idx).to(out.device)
    picked = torch.gather(out, 1, idx_t[:, :, None].expand(-1, -1, out.shape[-1]))
    return torch.tanh(proj(picked)) * torch.from_numpy(valid).to(out.device)[:, :, None].to(out.dtype)


def side_states(proj, vproj, vec, out, lengths, slots: int, mode: str):
    """A side's states (B, slots, D): token states, or with `vproj` the pooled slot tanh(vproj(vec)) then slots - 1 tokens."""
    if vproj is None:
        return token_states(proj, out, lengths, slots, mode)
    torch = _torch()
    return torch.cat([torch.tanh(vproj(vec))[:, None], token_states(proj, out, lengths, slots - 1, mode)], dim=1)


def save_head(directory: str | Path, proj, head, cfg: DiPairHeadConfig, vproj=None) -> None:
    """Write dipair_head.safetensors (projections + head, fp32) and dipair_head.json."""
    st = require("safetensors.torch", "train")

    tensors = {f"proj.{k}": v for k, v in proj.state_dict().items()}
    if vproj is not None:
        tensors.update({f"vproj.{k}": v for k, v in vproj.state_dict().items()})
    tensors.update(head.state_dict())
    check_finite(tensors, "the DiPair head")
    with atomic_path(Path(directory) / layouts.DIPAIR_HEAD_WEIGHTS) as tmp:
        st.save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp),
                     metadata={"format": "ondevice-dipair-head"})
    write_json(Path(directory) / layouts.DIPAIR_HEAD_CONFIG, cfg)


def load_head_weights(directory: str | Path) -> tuple[DiPairHeadConfig, dict[str, np.ndarray]]:
    """Config and fp32 numpy weights (projection as proj.weight / proj.bias) of a DiPair run folder (a bundle keeps
    its head's config in manifest.json instead: `DiPairScorer`, the Java `DiPairHead`)."""
    directory = Path(directory)
    for name in (layouts.DIPAIR_HEAD_CONFIG, layouts.DIPAIR_HEAD_WEIGHTS):
        artifact_file(directory, name, "pair-model run")
    if not (directory / layouts.DIPAIR_HEAD_CONFIG).is_file() or not (directory / layouts.DIPAIR_HEAD_WEIGHTS).is_file():
        raise OndeviceError(f"{directory} has no DiPair head ({layouts.DIPAIR_HEAD_CONFIG}, {layouts.DIPAIR_HEAD_WEIGHTS}); run `ondevice pairs dipair` first")
    cfg = dataclass_from_dict(DiPairHeadConfig, read_json(directory / layouts.DIPAIR_HEAD_CONFIG, "DiPair head config"), "DiPair head config")
    cfg.validate()
    try:
        weights = load_file(str(directory / layouts.DIPAIR_HEAD_WEIGHTS))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for corrupt files
        raise OndeviceError(f"cannot read {directory / layouts.DIPAIR_HEAD_WEIGHTS}: {str(exc)[:200]}; re-create it") from None
    expected = {"proj.weight": (cfg.d, cfg.in_dim), "position": (cfg.slots, cfg.d), "out.weight": (cfg.outputs, cfg.d)}
    if cfg.pooled:
        expected.update({"vproj.weight": (cfg.d, cfg.vec_dim), "compare.weight": (cfg.d, 4 * cfg.d)})
    for k, shape in expected.items():
        if k not in weights or tuple(weights[k].shape) != shape:
            raise OndeviceError(f"{directory / layouts.DIPAIR_HEAD_WEIGHTS} does not match {layouts.DIPAIR_HEAD_CONFIG} ({k}); the folder is inconsistent")
    return cfg, weights


def head_weights(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The head's tensors without the projections."""
    return {k: v for k, v in weights.items() if not k.startswith(("proj.", "vproj."))}
