// Node parity check of ondevice.js against a bundle's golden files (written by `ondevice export --golden`).
//
//   node test/parity.mjs BUNDLE_DIR [--backend node|web] [--python-codes FILE.npy] [--out FILE.json]
//
// Prints key=value lines: token ids vs golden/token_ids.txt, codes vs golden/codes.npy (the fp32 model's),
// bit agreement, the JS Hamming top-10 over golden/catalog_codes.npy vs golden/topk_{ids,dist}.npy, and,
// with --python-codes, codes vs the Python runtime's codes of the same bundle (int8: same graph, other runtime).
// --out also writes the JS codes as a .json list for the caller. Exit code 0 even on mismatches: the caller asserts.

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { HammingIndex, Encoder, loadBundle, parseNpy, popcount32, toWords } from "../ondevice.js";

const args = process.argv.slice(2);
const dir = args[0];
const opt = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const backend = opt("--backend", "node");

const ort = backend === "web" ? await import("onnxruntime-web") : await import("onnxruntime-node");
if (backend === "web") ort.env.wasm.numThreads = 1;
const sessionOptions = backend === "web" ? { executionProviders: ["wasm"] } : { intraOpNumThreads: 1 };

const read = async (name) => new Uint8Array(readFileSync(join(dir, name)));
const bundle = await loadBundle(read);
const encoder = await Encoder.create(ort, bundle, sessionOptions);
const golden = (name) => readFileSync(join(dir, "golden", name));

const sentences = golden("sentences.jsonl").toString("utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const goldenIds = golden("token_ids.txt").toString("utf8").split("\n").slice(0, sentences.length)
  .map((l) => l.trim().split(/\s+/).map(Number));
const goldenCodes = parseNpy(golden("codes.npy"));
const goldenEmb = parseNpy(golden("embeddings.npy"));
const codeBytes = bundle.manifest.code_bytes;
const bits = bundle.manifest.bits;
const dim = bundle.manifest.dim;

function sameList(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

let tokensSame = 0;
let codesSame = 0;
let bitDiff = 0;
let maxAbs = 0;
const firstDiffs = [];
const jsCodes = new Uint8Array(sentences.length * codeBytes);
const started = Date.now();
for (let i = 0; i < sentences.length; i++) {
  const ids = bundle.tokenizer.ids(sentences[i]);
  if (sameList(ids, goldenIds[i])) tokensSame++;
  else if (firstDiffs.length < 5) firstDiffs.push({ sentence: sentences[i], js: ids, python: goldenIds[i] });
  const { embedding, code } = await encoder.runIds(goldenIds[i]); // the golden ids, so the graph is tested alone
  jsCodes.set(code, i * codeBytes);
  const ref = goldenCodes.data.subarray(i * codeBytes, (i + 1) * codeBytes);
  if (sameList(Array.from(code), Array.from(ref))) codesSame++;
  const a = toWords(code, codeBytes);
  const b = toWords(ref, codeBytes);
  for (let j = 0; j < a.length; j++) bitDiff += popcount32(a[j] ^ b[j]);
  for (let j = 0; j < dim; j++) maxAbs = Math.max(maxAbs, Math.abs(embedding[j] - goldenEmb.data[i * dim + j]));
}
const encodeSeconds = (Date.now() - started) / 1000;

// Hamming top-10 of the golden queries over the golden catalog, by this module's search
const catalog = parseNpy(golden("catalog_codes.npy"));
const queries = parseNpy(golden("queries.npy")).data;
const topIds = parseNpy(golden("topk_ids.npy"));
const topDist = parseNpy(golden("topk_dist.npy")).data;
const k = topIds.shape[1];
const index = new HammingIndex(catalog.data, codeBytes);
let topSame = 0;
for (let q = 0; q < queries.length; q++) {
  const row = queries[q];
  const { ids, distances } = index.search(goldenCodes.data.subarray(row * codeBytes, (row + 1) * codeBytes), k);
  const wantIds = Array.from(topIds.data.subarray(q * k, (q + 1) * k));
  const wantDist = Array.from(topDist.subarray(q * k, (q + 1) * k));
  if (sameList(Array.from(ids), wantIds) && sameList(Array.from(distances), wantDist)) topSame++;
}

const lines = {
  backend: `${backend}:${Object.values(ort.env.versions || {}).join("/")}`,
  precision: bundle.manifest.precision,
  verified_files: bundle.verified.length,
  sentences: sentences.length,
  tokens_identical: `${tokensSame}/${sentences.length}`,
  codes_identical_to_golden: `${codesSame}/${sentences.length}`,
  bit_agreement_vs_golden: (1 - bitDiff / (sentences.length * bits)).toFixed(6),
  max_abs_embedding_diff: maxAbs.toExponential(3),
  topk_identical: `${topSame}/${queries.length}`,
  encode_seconds: encodeSeconds.toFixed(2),
};
const pythonCodes = opt("--python-codes", null);
if (pythonCodes) {
  const py = parseNpy(readFileSync(pythonCodes)).data;
  let same = 0;
  let diff = 0;
  for (let i = 0; i < sentences.length; i++) {
    const a = jsCodes.subarray(i * codeBytes, (i + 1) * codeBytes);
    const b = py.subarray(i * codeBytes, (i + 1) * codeBytes);
    if (sameList(Array.from(a), Array.from(b))) same++;
    const wa = toWords(a, codeBytes);
    const wb = toWords(b, codeBytes);
    for (let j = 0; j < wa.length; j++) diff += popcount32(wa[j] ^ wb[j]);
  }
  lines.codes_identical_to_python = `${same}/${sentences.length}`;
  lines.bit_agreement_vs_python = (1 - diff / (sentences.length * bits)).toFixed(6);
}
for (const [key, value] of Object.entries(lines)) console.log(`${key}=${value}`);
for (const d of firstDiffs) console.log(`token_diff=${JSON.stringify(d)}`);
const out = opt("--out", null);
if (out) writeFileSync(out, JSON.stringify({ ...lines, codes: Array.from(jsCodes) }));
