"""The bundle's README.md (model card), generated from its manifest so the two never disagree."""

from __future__ import annotations

import json


def _fmt(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _table(rows: dict) -> list[str]:
    out = ["| key | value |", "|---|---|"]
    out += [f"| {k} | {_fmt(v).replace('|', '/')} |" for k, v in rows.items()]
    return out


def teacher_name(teacher: dict) -> str:
    """The teacher's model name (older manifests: the last part of its recorded path), never its architecture."""
    name = teacher.get("name") or str(teacher.get("path") or "").rstrip("/").split("/")[-1]
    if name in ("model", ""):  # the packaged MiniLM's folder inside its package
        name = "all-MiniLM-L6-v2" if "minilm" in str(teacher.get("path", "")).lower() else (name or "a teacher")
    return name


def model_card(manifest: dict) -> str:
    """Markdown model card: what the bundle computes, its I/O, provenance, checks and file checksums."""
    s, b = manifest["student"], manifest["binarizer"]
    lines = [
        f"# ondevice sentence encoder ({manifest['precision']})", "",
        (f"A BiLSTM student distilled from `{teacher_name(manifest['teacher'])}` "
         f"({manifest['teacher'].get('hidden_size', '?')}-d) that maps a sentence to a {manifest['dim']}-d float "
         f"embedding and a {manifest['bits']}-bit binary code ({manifest['code_bytes']} bytes, bit order "
         f"`{manifest['bit_order']}`: bit j is bit j % 8 of byte j // 8). Compare codes by Hamming distance."), "",
        "## Use", "",
        "```python",
        "from ondevice.runtime import Bundle   # numpy + onnxruntime only",
        "bundle = Bundle.load(\"path/to/this/folder\")",
        "vectors, codes = bundle.encode([\"a sentence\"]), bundle.codes([\"a sentence\"])",
        "```", "",
        ("Other runtimes: tokenize by `tokenizer.json` + `vocab.txt` (spec version "
         f"{manifest['tokenizer'].get('version')}), then run `encoder.onnx` (inputs and outputs below) or "
         "`encoder.pt` where present (TorchScript, `forward(ids, lengths) -> (embedding, code)`). Test against `golden/` if "
         "present: its values are the fp32 model's; an int8 graph matches them within the export checks below."),
        "",
        *([("int8: run `encoder.onnx` on **one sentence per call**; its int8 LSTM quantizes activations over a "
            "whole call, so a batched sentence's code would depend on the other sentences of the batch."), ""]
          if manifest.get("int8_rows_per_run") == 1 else []),
        *([("int8: batch freely; the graph's range anchors (two constant LSTM inputs and two hidden units held at "
            "+1 and -1) pin the int8 LSTM's activation scales in every row, so a sentence's code is the same in "
            "any batch as alone."), ""] if manifest.get("int8_rows_independent") else []),
        *([("The binarizer projection is stored as float16, in `encoder.onnx` (cast to float in the graph) and in "
            "`binarizer.safetensors` alike: use those rounded weights, in float32 arithmetic."), ""]
          if manifest.get("projection_dtype") == "float16" else []),
        *([f"Weights: {manifest['weights']}.", ""] if manifest.get("weights") else []),
        "## Inputs and outputs", "",
        "| name | type |", "|---|---|",
        *[f"| {k} (input) | {v} |" for k, v in manifest["inputs"].items()],
        *[f"| {k} (output) | {v} |" for k, v in manifest["outputs"].items()],
        "",
        "Ids are right-padded with 0; `lengths` >= 1 (an empty text is the single id 1, [UNK]).", "",
        "## Model", "",
        *_table({"vocabulary": s["vocab_size"], "embedding dim": s["embedding_dim"],
                 "LSTM hidden (per direction)": s["hidden_size"], "pooling": s["pooling"],
                 "output dim": s["output_dim"], "max tokens": s["max_tokens"], "precision": manifest["precision"],
                 "binarizer": f"{b.get('method')} ({b.get('bits')} bits from {b.get('dim')}-d)",
                 "ONNX opset": manifest.get("onnx", {}).get("opset"),
                 **({"int8 LSTM weights": f"{manifest['onnx']['int8_weight_bits']}-bit"}
                    if manifest.get("onnx", {}).get("int8_weight_bits") else {})}),
        "", "## Teacher", "", *_table(manifest["teacher"]),
        "", "## Training", "", *_table(manifest["training"]),
    ]
    if manifest.get("eval"):
        lines += ["", "## Evaluation", "", *_table(manifest["eval"])]
    if manifest.get("requantized"):
        lines += ["", "## Requantized", "", ("`ondevice requantize` re-rounded this bundle's int8 LSTM weights to 7 bits "
                                             "(below: from which encoder, and its export checks)."), "",
                  *_table(manifest["requantized"])]
    if manifest.get("eval_before_requantization"):
        lines += ["", "## Evaluation of the encoder before requantization", "",
                  *_table(manifest["eval_before_requantization"])]
    if manifest.get("checks"):
        lines += ["", "## Export checks", "", *_table(manifest["checks"])]
    lines += ["", "## Library versions", "", *_table(manifest["versions"]),
              "", "## Files", "", "| file | bytes | sha256 |", "|---|---|---|"]
    lines += [f"| {name} | {e['bytes']} | `{e['sha256']}` |" for name, e in sorted(manifest["files"].items())]
    lines += ["", (f"Format `{manifest['format']}` version {manifest['format_version']}; `manifest.json` is the "
                   "source of this card. Nothing here is a Python pickle: weights are ONNX, safetensors and .npy "
                   "(allow_pickle=False); encoder.pt is a TorchScript archive, read only by TorchScript's loader."), ""]
    return "\n".join(lines)
