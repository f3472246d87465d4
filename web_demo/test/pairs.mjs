// Node parity check of ondevice.js's pair head against a bundle's golden pair files (`ondevice pairs export`).
//
//   node test/pairs.mjs BUNDLE_DIR [--a TEXT --b TEXT]
//
// Prints key=value lines: the head's logits on golden/pair_a, pair_b rows of golden/embeddings.npy vs
// golden/pair_logits.npy (the fp32 graph's), the blended keys vs golden/pair_blend_keys.npy, identical binary
// decisions; with --a/--b, one JSON line of the pair scored end to end (both texts through encoder.onnx in
// onnxruntime-node). Exit code 0 even on mismatches: the caller asserts. A bundle error is one line and exit code 2.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Encoder, OndeviceError, PairHead, loadBundle, parseNpy } from "../ondevice.js";

const args = process.argv.slice(2);
const dir = args[0];
const opt = (name) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const read = async (name) => new Uint8Array(readFileSync(join(dir, name)));

try {
  const bundle = await loadBundle(read);
  const head = await PairHead.load(read, bundle.manifest);
  const golden = (name) => parseNpy(readFileSync(join(dir, "golden", name)));
  const emb = golden("embeddings.npy");
  const dim = bundle.manifest.dim;
  const row = (r) => emb.data.subarray(r * dim, (r + 1) * dim);
  const ia = golden("pair_a.npy").data;
  const ib = golden("pair_b.npy").data;
  const want = golden("pair_logits.npy").data;
  let maxDiff = 0;
  let same = 0;
  let keyDiff = 0;
  const keys = head.blend ? golden("pair_blend_keys.npy").data : null;
  for (let i = 0; i < ia.length; i++) {
    const u = row(ia[i]);
    const v = row(ib[i]);
    const l = head.logits(u, v);
    for (let o = 0; o < head.outputs; o++) maxDiff = Math.max(maxDiff, Math.abs(l[o] - want[i * head.outputs + o]));
    if (head.kind !== "binary" || (l[0] > head.threshold) === (want[i * head.outputs] > head.threshold)) same++;
    if (keys) keyDiff = Math.max(keyDiff, Math.abs(head.key(l, u, v) - keys[i]));
  }
  console.log(`task=${head.task}`);
  console.log(`pairs=${ia.length}`);
  console.log(`max_abs_diff=${maxDiff}`);
  console.log(`decisions_identical=${same}/${ia.length}`);
  if (keys) console.log(`blend_max_abs_diff=${keyDiff}`);
  if (opt("--a") !== undefined) {
    const ort = await import("onnxruntime-node");
    const encoder = await Encoder.create(ort, bundle, { intraOpNumThreads: 1 });
    const u = (await encoder.encode(opt("--a"))).embedding;
    const v = (await encoder.encode(opt("--b"))).embedding;
    const p = head.pair(u, v);
    console.log(JSON.stringify({ score: p.score, key: p.key, decision: p.decision }));
  }
} catch (e) {
  if (!(e instanceof OndeviceError)) throw e;
  console.error(`error: ${e.message}`);
  process.exit(2);
}
