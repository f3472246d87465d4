// Unit checks of ondevice.js on a real bundle folder: verification failures, .npy parsing, popcount, ties.
//   node test/unit.mjs BUNDLE_DIR      -> one "ok NAME" / "FAIL NAME: why" line per check, then failed=N
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  HammingIndex, OndeviceError, PairHead, Tokenizer, cosine, loadBundle, parseNpy, parseSafetensors, popcount32, sha256Hex,
} from "../ondevice.js";

const dir = process.argv[2];
const files = (name) => new Uint8Array(readFileSync(join(dir, name)));
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.message}`);
  }
}

async function rejects(read, pattern) {
  try {
    await loadBundle(read);
  } catch (e) {
    if (!(e instanceof OndeviceError)) throw new Error(`not an OndeviceError: ${e}`);
    if (!pattern.test(e.message)) throw new Error(`unexpected message: ${e.message}`);
    if (e.message.includes("\n")) throw new Error("message is not one line");
    return;
  }
  throw new Error("loaded a bad bundle");
}

const manifestWith = (edit) => (name) => {
  if (name !== "manifest.json") return files(name);
  const m = JSON.parse(new TextDecoder().decode(files(name)));
  edit(m);
  return new TextEncoder().encode(JSON.stringify(m));
};

await check("loads and verifies", async () => {
  const b = await loadBundle(async (n) => files(n));
  if (b.verified.length !== 3 || b.tokenizer.vocab.length < 3) throw new Error("unexpected bundle");
});
await check("sha256 matches a known digest", async () => {
  const got = await sha256Hex(new TextEncoder().encode("abc"));
  if (got !== "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") throw new Error(got);
});
await check("tampered encoder.onnx", () => rejects(async (n) => {
  const b = files(n);
  if (n === "encoder.onnx") b[b.length >> 1] ^= 1;
  return b;
}, /encoder\.onnx fails its sha256 check/));
await check("truncated vocab.txt", () => rejects(async (n) => (n === "vocab.txt" ? files(n).subarray(1) : files(n)),
  /vocab\.txt is truncated/));
await check("format_version 2", () => rejects(async (n) => manifestWith((m) => { m.format_version = 2; })(n),
  /format version 2 is not supported/));
await check("unsafe file name", () => rejects(async (n) => manifestWith((m) => {
  m.files["../secret"] = { sha256: "0".repeat(64), bytes: 1 };
})(n), /unsafe file name/));
await check("not a manifest", () => rejects(async (n) => (n === "manifest.json" ? new TextEncoder().encode("[]") : files(n)),
  /not an ondevice-bundle manifest/));
await check("tokenizer spec version", async () => {
  try {
    new Tokenizer("[PAD]\n[UNK]\n", { version: 2, max_tokens: 8 });
  } catch (e) {
    if (/spec version 2/.test(e.message)) return;
  }
  throw new Error("accepted spec version 2");
});
await check("popcount32", () => {
  for (const [x, n] of [[0, 0], [1, 1], [0xffffffff, 32], [0x80000000, 1], [0x55555555, 16], [0x12345678, 13]]) {
    if (popcount32(x) !== n) throw new Error(`popcount32(${x}) = ${popcount32(x)}`);
  }
});
await check("ties go to the smaller row, k > n pads nothing", () => {
  const codes = new Uint8Array([0, 3, 0, 1, 2, 0]); // 6 codes of 1 byte
  const r = new HammingIndex(codes, 1).search(new Uint8Array([0]), 10);
  const want = [[0, 2, 5, 3, 4, 1], [0, 0, 0, 1, 1, 2]];
  if (String(Array.from(r.ids)) !== String(want[0]) || String(Array.from(r.distances)) !== String(want[1])) {
    throw new Error(`${Array.from(r.ids)} / ${Array.from(r.distances)}`);
  }
});
await check("npy int64 and float32", () => {
  const ids = parseNpy(files("golden/topk_ids.npy"));
  const emb = parseNpy(files("golden/embeddings.npy"));
  if (ids.shape.length !== 2 || !(emb.data instanceof Float32Array) || ids.data.some((x) => !Number.isInteger(x) || x < 0)) {
    throw new Error("bad parse");
  }
});
// safetensors as the pair head reads it: a small file made here, then broken in each way a header can be
function safetensors(header, body) {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + body.length);
  new DataView(out.buffer).setUint32(0, json.length, true);
  out.set(json, 8);
  out.set(body, 8 + json.length);
  return out;
}
const body = new Uint8Array(new Float32Array([1, 2, 3, 4, 5, 6]).buffer);
const good = { __metadata__: { format: "x" }, w: { dtype: "F32", shape: [2, 3], data_offsets: [0, 24] } };
await check("safetensors parses float32 tensors", () => {
  const t = parseSafetensors(safetensors(good, body), "t.safetensors");
  if (String(t.w.shape) !== "2,3" || String(Array.from(t.w.data)) !== "1,2,3,4,5,6" || "__metadata__" in t) {
    throw new Error(JSON.stringify(t));
  }
});
for (const [name, bytes, pattern] of [
  ["safetensors shorter than its header", new Uint8Array(4), /shorter than a safetensors header/],
  ["safetensors header length past the end", safetensors(good, body).subarray(0, 20), /bad header length/],
  ["safetensors offsets past the data", safetensors({ w: { ...good.w, data_offsets: [0, 24] } }, body.subarray(0, 20)),
    /bad offsets/],
  ["safetensors offsets not matching the shape", safetensors({ w: { ...good.w, data_offsets: [0, 20] } }, body),
    /bad offsets/],
  ["safetensors float16 tensor", safetensors({ w: { ...good.w, dtype: "F16", data_offsets: [0, 12] } }, body),
    /not a float32 tensor/],
  ["safetensors negative dimension", safetensors({ w: { ...good.w, shape: [-2, -3] } }, body), /not a float32 tensor/],
  ["safetensors header not JSON", (() => { const b = safetensors(good, body); b[9] = 0x7b; b[10] = 0x7b; return b; })(),
    /not valid UTF-8 JSON/],
  ["safetensors header null", safetensors(null, body), /not a JSON object/],
  ["safetensors header an array", safetensors([1], body), /not a JSON object/],
  ["safetensors overlapping tensors", safetensors({ a: { dtype: "F32", shape: [3], data_offsets: [0, 12] },
    b: { dtype: "F32", shape: [3], data_offsets: [8, 20] } }, body), /overlaps or leaves a gap/],
  ["safetensors data not covered", safetensors({ a: { dtype: "F32", shape: [3], data_offsets: [0, 12] } }, body),
    /does not cover the file/],
]) {
  await check(name, () => {
    try {
      parseSafetensors(bytes, "t.safetensors");
    } catch (e) {
      if (e instanceof OndeviceError && pattern.test(e.message) && !e.message.includes("\n")) return;
      throw new Error(`unexpected error: ${e && e.message}`);
    }
    throw new Error("parsed a broken file");
  });
}
await check("safetensors tensor named __proto__ is only a name", () => {
  const t = parseSafetensors(safetensors(JSON.parse('{"__proto__": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}'),
    body), "t.safetensors");
  if (Object.getPrototypeOf(t) !== null || String(t.__proto__.shape) !== "6") throw new Error("prototype replaced");
});
// a pair head of one hidden unit over 1-d vectors, and the manifest blocks a crafted bundle could give it
const headBody = new Uint8Array(new Float32Array([1, 1, 1, 1, 0.5, 2, -1]).buffer);
const headFile = safetensors({ "hidden.weight": { dtype: "F32", shape: [1, 4], data_offsets: [0, 16] },
  "hidden.bias": { dtype: "F32", shape: [1], data_offsets: [16, 20] },
  "out.weight": { dtype: "F32", shape: [1, 1], data_offsets: [20, 24] },
  "out.bias": { dtype: "F32", shape: [1], data_offsets: [24, 28] } }, headBody);
const headManifest = async (pairs) => ({ dim: 1, files: { "h.safetensors": { bytes: headFile.length,
  sha256: await sha256Hex(headFile) } }, pairs: { task: "t", task_type: "binary", head: { dim: 1, hidden: 1, outputs: 1 },
  weights: "h.safetensors", output_transform: {}, threshold: 0, ...pairs } });
const blend = { similarity: "cosine", dim: 1, weight: 1, head_mean: 0, head_std: 1, sim_mean: 0, sim_std: 1 };
await check("pair head loads a sane blend", async () => {
  const head = await PairHead.load(async () => headFile, await headManifest({ blend }));
  if (head.logits(new Float32Array([1]), new Float32Array([1]))[0] !== 2 * (1 + 1 + 1 + 0 + 0.5) - 1) throw new Error("logit");
});
for (const [name, pairs, pattern] of [
  ["pair head blend with zero head_std", { blend: { ...blend, head_std: 0 } }, /pairs.blend/],
  ["pair head blend with zero sim_std", { blend: { ...blend, sim_std: 0 } }, /pairs.blend/],
  ["pair head blend with a negative weight", { blend: { ...blend, weight: -1 } }, /pairs.blend/],
  ["pair head threshold not a number", { threshold: "abc" }, /pairs.threshold/],
  ["pair head of no outputs", { head: { dim: 1, hidden: 1, outputs: 0 } }, /does not describe a head/],
]) {
  await check(name, async () => {
    try {
      await PairHead.load(async () => headFile, await headManifest(pairs));
    } catch (e) {
      if (e instanceof OndeviceError && pattern.test(e.message)) return;
      throw new Error(`unexpected error: ${e && e.message}`);
    }
    throw new Error("loaded a crafted head");
  });
}
await check("pair head weights with NaN are refused", async () => {
  const nanBody = new Uint8Array(new Float32Array([1, 1, 1, 1, 0.5, 2, NaN]).buffer);
  const file = safetensors({ "hidden.weight": { dtype: "F32", shape: [1, 4], data_offsets: [0, 16] },
    "hidden.bias": { dtype: "F32", shape: [1], data_offsets: [16, 20] },
    "out.weight": { dtype: "F32", shape: [1, 1], data_offsets: [20, 24] },
    "out.bias": { dtype: "F32", shape: [1], data_offsets: [24, 28] } }, nanBody);
  const manifest = await headManifest({});
  manifest.files["h.safetensors"] = { bytes: file.length, sha256: await sha256Hex(file) };
  try {
    await PairHead.load(async () => file, manifest);
  } catch (e) {
    if (e instanceof OndeviceError && /NaN or infinity/.test(e.message)) return;
    throw e;
  }
  throw new Error("loaded NaN weights");
});
await check("cosine in double", () => {
  const c = cosine(new Float32Array([1, 0, 1]), new Float32Array([1, 1, 0]));
  if (Math.abs(c - 0.5) > 1e-12 || cosine(new Float32Array(3), new Float32Array(3)) !== 0) throw new Error(String(c));
});
console.log(`failed=${failed}`);
