// ondevice in JavaScript: tokenizer (spec v1), bundle verification, .npy reading, encoder and Hamming search.
//
// Plain ES module with no imports: the same file runs in a browser page and in Node >= 18. The ONNX Runtime
// module (onnxruntime-web in a page, onnxruntime-node or onnxruntime-web in Node) is passed in by the caller,
// so this file never picks a backend. Search is BigInt-free: codes are 32-bit words and a bit-trick popcount.

export const FORMAT = "ondevice-bundle";
export const FORMAT_VERSION = 1;
export const TOKENIZER_VERSION = 1;
export const PAD_ID = 0;
export const UNK_ID = 1;
const ENCODER_FILE = "encoder.onnx";
// What a page reads from a bundle; every one is checked against manifest.json before it is parsed.
export const BUNDLE_FILES = [ENCODER_FILE, "vocab.txt", "tokenizer.json"];

export class OndeviceError extends Error {
  constructor(message) {
    super(message);
    this.name = "OndeviceError";
  }
}

// ---------------------------------------------------------------------------------------------------------
// Tokenizer, spec version 1 (README "Tokenizer"): NFKC, simple per-code-point lowercase, runs of L*/M*/Nd
// form a token, Z*/C* separate, every other code point is a token of its own; first max_tokens tokens.

const WORD = /^[\p{L}\p{M}\p{Nd}]$/u;
const SEPARATOR = /^[\p{Z}\p{C}]$/u;
// ASCII is NFKC-stable and its lowercase is simple: letters and digits form words, space and controls
// separate, every other printable character is a token by itself (the same rule as the Python fast path).
const ASCII_ONLY = /^[\x00-\x7f]*$/;
const ASCII_TOKENS = /[a-z0-9]+|[!-/:-@[-`{-~]/g;

function simpleLower(ch) {
  const low = ch.toLowerCase(); // one code point alone: no context rule (final sigma) can apply
  if (low === ch || [...low].length === 1) return low;
  return ch === "\u0130" ? "i" : ch; // only U+0130 has a multi-code-point full mapping; its simple one is "i"
}

/** Lowercase tokens of `text` by tokenizer spec v1 (`maxTokens` keeps the first ones). */
export function tokenize(text, maxTokens = Infinity) {
  let tokens;
  if (ASCII_ONLY.test(text)) {
    tokens = text.toLowerCase().match(ASCII_TOKENS) || [];
  } else {
    tokens = [];
    let word = "";
    for (const c of text.normalize("NFKC")) {
      const ch = simpleLower(c);
      if (WORD.test(ch)) {
        word += ch;
        continue;
      }
      if (word) {
        tokens.push(word);
        word = "";
      }
      if (!SEPARATOR.test(ch)) tokens.push(ch);
    }
    if (word) tokens.push(word);
  }
  return tokens.length > maxTokens ? tokens.slice(0, maxTokens) : tokens;
}

/** Maps texts to token ids with a bundle's vocab.txt and tokenizer.json. */
export class Tokenizer {
  constructor(vocabText, spec) {
    if (!spec || spec.version !== TOKENIZER_VERSION) {
      throw new OndeviceError(`tokenizer spec version ${spec && spec.version} is not supported ` +
        `(this page reads version ${TOKENIZER_VERSION}); re-export the bundle`);
    }
    const vocab = vocabText.split("\n");
    if (vocab.length && vocab[vocab.length - 1] === "") vocab.pop();
    if (vocab.length < 2 || vocab[PAD_ID] !== "[PAD]" || vocab[UNK_ID] !== "[UNK]") {
      throw new OndeviceError("vocab.txt must start with [PAD] and [UNK]; re-export the bundle");
    }
    this.vocab = vocab;
    this.maxTokens = spec.max_tokens;
    this.index = new Map();
    vocab.forEach((tok, i) => this.index.set(tok, i)); // a repeated line maps to its last id, as in Python
  }

  /** Token ids of one text (never empty: a text with no tokens is [UNK]). */
  ids(text) {
    const out = tokenize(text, this.maxTokens).map((t) => this.index.get(t) ?? UNK_ID);
    return out.length ? out : [UNK_ID];
  }
}

// ---------------------------------------------------------------------------------------------------------
// Checksums and the bundle manifest

/** Lowercase hex SHA-256 of `bytes` with Web Crypto (browser: needs a secure context, e.g. 127.0.0.1). */
export async function sha256Hex(bytes) {
  let subtle = globalThis.crypto && globalThis.crypto.subtle;
  if (!subtle && typeof process !== "undefined" && process.versions && process.versions.node) {
    subtle = (await import("node:crypto")).webcrypto.subtle; // Node 18 has Web Crypto, not yet as a global
  }
  if (!subtle) {
    throw new OndeviceError("Web Crypto is unavailable (the page is not in a secure context); " +
      "serve it over https or from localhost / 127.0.0.1");
  }
  const digest = new Uint8Array(await subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

function safeName(name) {
  const parts = typeof name === "string" ? name.split("/") : [];
  const bad = !parts.length || name.includes("\\") || name.startsWith("/") || name === "manifest.json" ||
    parts.some((p) => p === "" || p === "." || p === "..") || /^[a-zA-Z]+:/.test(name);
  if (bad) throw new OndeviceError(`manifest lists an unsafe file name ${JSON.stringify(name)}; refusing to load it`);
  return name;
}

/** Validate a parsed manifest.json (format, version, code layout, file table); returns it. */
export function checkManifest(manifest) {
  if (!manifest || manifest.format !== FORMAT) {
    throw new OndeviceError(`manifest.json is not an ${FORMAT} manifest; re-export the bundle`);
  }
  if (manifest.format_version !== FORMAT_VERSION) {
    throw new OndeviceError(`bundle format version ${manifest.format_version} is not supported ` +
      `(this page reads version ${FORMAT_VERSION}); re-export the bundle`);
  }
  for (const key of ["dim", "bits", "code_bytes"]) {
    if (!Number.isInteger(manifest[key]) || manifest[key] < 1) {
      throw new OndeviceError(`manifest.json has no valid ${key}; re-export the bundle`);
    }
  }
  if (manifest.code_bytes !== Math.ceil(manifest.bits / 8) || manifest.bit_order !== "little") {
    throw new OndeviceError("manifest.json describes codes this page cannot read; re-export the bundle");
  }
  const files = manifest.files;
  if (!files || typeof files !== "object") throw new OndeviceError("manifest.json has no files table; re-export the bundle");
  for (const [name, entry] of Object.entries(files)) {
    safeName(name);
    if (!entry || !/^[0-9a-f]{64}$/.test(entry.sha256) || !Number.isInteger(entry.bytes) || entry.bytes < 0) {
      throw new OndeviceError(`manifest.json entry for ${name} needs a sha256 and a byte count; re-export the bundle`);
    }
  }
  for (const name of BUNDLE_FILES) {
    if (!(name in files)) throw new OndeviceError(`manifest.json does not list ${name}; re-export the bundle`);
  }
  return manifest;
}

/** Check one file's size and SHA-256 against its manifest entry; throws a one-line OndeviceError. */
export async function verifyFile(manifest, name, bytes) {
  const entry = manifest.files[safeName(name)];
  if (!entry) throw new OndeviceError(`${name} is not listed in manifest.json; re-export the bundle`);
  if (bytes.byteLength !== entry.bytes) {
    const state = bytes.byteLength < entry.bytes ? "truncated" : "longer than expected";
    throw new OndeviceError(`${name} is ${state} (${bytes.byteLength} bytes, manifest says ${entry.bytes}); copy the bundle again`);
  }
  if ((await sha256Hex(bytes)) !== entry.sha256) {
    throw new OndeviceError(`${name} fails its sha256 check (modified or corrupted); copy the bundle again`);
  }
  return bytes;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function parseJson(bytes, what) {
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch (e) {
    throw new OndeviceError(`${what} is not valid UTF-8 JSON; re-export it`);
  }
}

/**
 * Load a bundle through `read(name) -> Promise<Uint8Array>` (fetch in a page, fs in Node).
 * Every file is verified (size + SHA-256) before it is parsed. Returns {manifest, tokenizer, model, verified}.
 */
export async function loadBundle(read) {
  const manifest = checkManifest(parseJson(await read("manifest.json"), "manifest.json"));
  const got = {};
  for (const name of BUNDLE_FILES) got[name] = await verifyFile(manifest, name, await read(name));
  const spec = parseJson(got["tokenizer.json"], "tokenizer.json");
  const tokenizer = new Tokenizer(utf8.decode(got["vocab.txt"]), spec);
  return { manifest, tokenizer, model: got[ENCODER_FILE], verified: [...BUNDLE_FILES] };
}

// ---------------------------------------------------------------------------------------------------------
// .npy (format 1.0/2.0, little-endian, C order): what bundles and catalogs store arrays in

const NPY_TYPES = { "|u1": Uint8Array, "<u1": Uint8Array, "|i1": Int8Array, "<i4": Int32Array, "<f4": Float32Array,
  "<i8": "i8" };

/** Parse a .npy file: {dtype, shape, data}; int64 is returned as Float64Array of exact values (|x| < 2**53). */
export function parseNpy(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59];
  if (u8.length < 10 || magic.some((b, i) => u8[i] !== b)) throw new OndeviceError("not a .npy file");
  const view = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const major = u8[6];
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = (major === 1 ? 10 : 12) + headerLen;
  const header = new TextDecoder("latin1").decode(u8.subarray(major === 1 ? 10 : 12, start));
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const order = /'fortran_order':\s*(True|False)/.exec(header);
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !order || !shapeText || order[1] !== "False" || !(descr[1] in NPY_TYPES)) {
    throw new OndeviceError(`unsupported .npy header ${header.trim()}`);
  }
  const shape = shapeText[1].split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const type = NPY_TYPES[descr[1]];
  const width = type === "i8" ? 8 : type.BYTES_PER_ELEMENT;
  if (u8.length < start + count * width) throw new OndeviceError(".npy file is truncated");
  const body = new Uint8Array(count * width); // a copy, aligned for any typed array (Node's Buffer.slice would share)
  body.set(u8.subarray(start, start + count * width));
  let data;
  if (type === "i8") {
    const words = new Int32Array(body.buffer);
    data = new Float64Array(count);
    for (let i = 0; i < count; i++) data[i] = words[2 * i + 1] * 4294967296 + (words[2 * i] >>> 0);
  } else {
    data = new type(body.buffer);
  }
  return { dtype: descr[1], shape, data };
}

// ---------------------------------------------------------------------------------------------------------
// Hamming search over packed codes with 32-bit words

/** Set bits of a 32-bit integer (SWAR popcount). */
export function popcount32(x) {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  x = (x + (x >>> 4)) & 0x0f0f0f0f;
  return Math.imul(x, 0x01010101) >>> 24;
}

/**
 * Packed uint8 codes (n x codeBytes, bit order "little") -> Uint32Array of n x `words` 32-bit words, zero-padded
 * (`words` defaults to ceil(codeBytes / 4)). Padding bits are zero in every code, so they add no distance.
 */
export function toWords(codes, codeBytes, words = Math.ceil(codeBytes / 4)) {
  const n = Math.floor(codes.length / codeBytes);
  const out = new Uint32Array(n * words);
  for (let r = 0; r < n; r++) {
    const src = r * codeBytes;
    const dst = r * words;
    for (let b = 0; b < codeBytes; b++) out[dst + (b >>> 2)] |= codes[src + b] << ((b & 3) << 3);
  }
  return out;
}

/** Exact Hamming top-k over a fixed set of codes; ties go to the smaller row (as in Python). */
export class HammingIndex {
  constructor(codes, codeBytes) {
    if (codes.length % codeBytes !== 0) throw new OndeviceError("codes length is not a multiple of code_bytes");
    this.codeBytes = codeBytes;
    // rows padded to blocks of 4 words (128 bits): the scan sums 4 words' byte counts with one multiply
    this.words = Math.ceil(codeBytes / 16) * 4;
    this.size = codes.length / codeBytes;
    this.data = toWords(codes, codeBytes, this.words);
  }

  /** Top-k rows for one packed uint8 query: {ids: Int32Array, distances: Int32Array}, best first. */
  search(query, k = 10) {
    const q = toWords(query, this.codeBytes, this.words);
    const w = this.words;
    const data = this.data;
    const n = this.size;
    const kk = Math.min(k, n);
    const ids = new Int32Array(kk);
    const dist = new Int32Array(kk).fill(0x7fffffff);
    let worst = 0x7fffffff;
    for (let r = 0, off = 0; r < n; r++, off += w) {
      let d = 0;
      // SWAR popcount of 4 words per step: per-byte counts (<= 8 each) of the 4 words are added (<= 32 per
      // byte), then one multiply sums the bytes (<= 128); stop early once a row cannot enter the top k
      for (let j = 0; j < w && d < worst; j += 4) {
        let a = data[off + j] ^ q[j];
        let b = data[off + j + 1] ^ q[j + 1];
        let c = data[off + j + 2] ^ q[j + 2];
        let e = data[off + j + 3] ^ q[j + 3];
        a -= (a >>> 1) & 0x55555555;
        b -= (b >>> 1) & 0x55555555;
        c -= (c >>> 1) & 0x55555555;
        e -= (e >>> 1) & 0x55555555;
        a = (a & 0x33333333) + ((a >>> 2) & 0x33333333);
        b = (b & 0x33333333) + ((b >>> 2) & 0x33333333);
        c = (c & 0x33333333) + ((c >>> 2) & 0x33333333);
        e = (e & 0x33333333) + ((e >>> 2) & 0x33333333);
        const sum = ((a + (a >>> 4)) & 0x0f0f0f0f) + ((b + (b >>> 4)) & 0x0f0f0f0f) +
          ((c + (c >>> 4)) & 0x0f0f0f0f) + ((e + (e >>> 4)) & 0x0f0f0f0f);
        d += Math.imul(sum, 0x01010101) >>> 24;
      }
      if (d >= worst) continue; // strictly better only: an equal distance keeps the earlier (smaller) row
      let pos = kk - 1;
      while (pos > 0 && dist[pos - 1] > d) {
        dist[pos] = dist[pos - 1];
        ids[pos] = ids[pos - 1];
        pos--;
      }
      dist[pos] = d;
      ids[pos] = r;
      worst = dist[kk - 1];
    }
    return { ids, distances: dist };
  }
}

// ---------------------------------------------------------------------------------------------------------
// Encoder: the bundle's encoder.onnx on one text at a time

/** The bundle's ONNX graph in ONNX Runtime (`ort` is onnxruntime-web or onnxruntime-node). */
export class Encoder {
  constructor(ort, session, tokenizer) {
    this.ort = ort;
    this.session = session;
    this.tokenizer = tokenizer;
  }

  static async create(ort, bundle, options = {}) {
    // exact int8 products on x86 CPUs without VNNI (onnxruntime-node; a no-op in WebAssembly): as ondevice.ort_session
    const extra = { ...(options.extra || {}), session: { ...((options.extra || {}).session || {}), x64quantprecision: "1" } };
    const session = await ort.InferenceSession.create(bundle.model, { ...options, extra });
    return new Encoder(ort, session, bundle.tokenizer);
  }

  /** Embedding (Float32Array) and packed code (Uint8Array) of the token ids of one text. */
  async runIds(ids) {
    // ONNX int64 tensors are BigInt64Array by ORT's API; the ids are small integers
    const t = new this.ort.Tensor("int64", BigInt64Array.from(ids, (x) => BigInt(x)), [1, ids.length]);
    const len = new this.ort.Tensor("int64", BigInt64Array.of(BigInt(ids.length)), [1]);
    const out = await this.session.run({ ids: t, lengths: len });
    return { embedding: out.embedding.data, code: out.code.data };
  }

  /** Embedding and code of one text. */
  async encode(text) {
    return this.runIds(this.tokenizer.ids(text));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Catalog written by web_demo/tools/make_catalog.py: catalog.json, codes.npy, sentences.jsonl

/** Load a catalog through `read(name)`, checked against the bundle that will encode the queries. */
export async function loadCatalog(read, manifest) {
  const info = parseJson(await read("catalog.json"), "catalog.json");
  const files = { "codes.npy": await read("codes.npy"), "sentences.jsonl": await read("sentences.jsonl") };
  for (const [name, bytes] of Object.entries(files)) {
    const want = info.files && info.files[name];
    if (want && (bytes.byteLength !== want.bytes || (await sha256Hex(bytes)) !== want.sha256)) {
      throw new OndeviceError(`catalog ${name} fails its sha256 check; rebuild the catalog with tools/make_catalog.py`);
    }
  }
  if (info.encoder_sha256 !== manifest.files[ENCODER_FILE].sha256) {
    throw new OndeviceError("the catalog was made with a different encoder than this bundle; " +
      "rebuild it with tools/make_catalog.py");
  }
  const codes = parseNpy(files["codes.npy"]);
  if (codes.dtype.slice(1) !== "u1" || codes.shape.length !== 2 || codes.shape[1] !== manifest.code_bytes) {
    throw new OndeviceError(`catalog codes are not uint8 [n, ${manifest.code_bytes}]; rebuild the catalog`);
  }
  const sentences = utf8.decode(files["sentences.jsonl"]).split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  if (sentences.length !== codes.shape[0] || sentences.length !== info.count) {
    throw new OndeviceError("catalog sentences, codes and catalog.json disagree on the count; rebuild the catalog");
  }
  return { info, sentences, index: new HammingIndex(codes.data, manifest.code_bytes), verified: Object.keys(files) };
}

// ---------------------------------------------------------------------------------------------------------
// Pair head (`ondevice pairs export`): DSE's head over two embeddings, from the bundle's fp32 pair_head.safetensors,
// summed in double like the Java core (PairHead.java), plus the head + cosine blend the bundle ranks by

const SAFETENSORS_MAX_HEADER = 1 << 24;

/** Parse a safetensors file of F32 tensors: {name: {shape, data: Float32Array}}; every offset is checked. */
export function parseSafetensors(bytes, what = "safetensors file") {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const bad = (why) => new OndeviceError(`${what}: ${why}; re-export the bundle`);
  if (u8.length < 8) throw bad("shorter than a safetensors header");
  const view = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const size = view.getUint32(0, true);
  if (view.getUint32(4, true) !== 0 || size > SAFETENSORS_MAX_HEADER || 8 + size > u8.length) throw bad("bad header length");
  const header = parseJson(u8.subarray(8, 8 + size), what);
  if (!header || typeof header !== "object" || Array.isArray(header)) throw bad("the header is not a JSON object");
  const body = u8.length - 8 - size;
  const out = Object.create(null); // no prototype: a tensor named "__proto__" or "constructor" is just a name
  const spans = [];
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const shape = t && t.shape;
    const offsets = t && t.data_offsets;
    if (!t || t.dtype !== "F32" || !Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0) ||
        !Array.isArray(offsets) || offsets.length !== 2) throw bad(`tensor ${name} is not a float32 tensor`);
    const count = shape.reduce((a, b) => a * b, 1);
    const [s, e] = offsets;
    if (!Number.isInteger(s) || s < 0 || e !== s + 4 * count || e > body) throw bad(`tensor ${name} has bad offsets`);
    spans.push([s, e]);
    const copy = new Uint8Array(4 * count); // aligned for Float32Array; safetensors is little-endian, as every browser
    copy.set(u8.subarray(8 + size + s, 8 + size + e));
    out[name] = { shape, data: new Float32Array(copy.buffer) };
  }
  // as the safetensors library: the tensors tile the data part exactly, no overlap and no gap
  spans.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let end = 0;
  for (const [s, e] of spans) {
    if (s !== end) throw bad("tensor data overlaps or leaves a gap");
    end = e;
  }
  if (end !== body) throw bad("tensor data does not cover the file");
  return out;
}

/** Cosine of two embeddings, summed in double (the similarity of a DSE head's blend). */
export function cosine(u, v) {
  let dot = 0;
  let nu = 0;
  let nv = 0;
  for (let i = 0; i < u.length; i++) {
    dot += u[i] * v[i];
    nu += u[i] * u[i];
    nv += v[i] * v[i];
  }
  return dot / Math.max(Math.sqrt(nu) * Math.sqrt(nv), 1e-12);
}

/** The bundle's pair head: `logits = W2 relu(W1 [u, v, u*v, |u-v|] + b1) + b2`, task scores, blended keys, decisions. */
export class PairHead {
  /** Read, verify (size + SHA-256) and check the head the manifest's `pairs` block names. */
  static async load(read, manifest) {
    const block = manifest.pairs;
    if (!block || typeof block !== "object") {
      throw new OndeviceError("this bundle has no pair head; export one with `ondevice pairs export`");
    }
    const { dim, hidden, outputs } = block.head || {};
    if (![dim, hidden, outputs].every((x) => Number.isInteger(x) && x >= 1) || outputs > 1024 || dim !== manifest.dim ||
        !["regression", "binary", "classes"].includes(block.task_type) || typeof block.weights !== "string") {
      throw new OndeviceError("manifest.json pairs block does not describe a head for this encoder; re-export the bundle");
    }
    const name = block.weights;
    const tensors = parseSafetensors(await verifyFile(manifest, name, await read(name)), name);
    const want = { "hidden.weight": [hidden, 4 * dim], "hidden.bias": [hidden], "out.weight": [outputs, hidden],
      "out.bias": [outputs] };
    for (const [key, shape] of Object.entries(want)) {
      if (!tensors[key] || tensors[key].shape.join(",") !== shape.join(",")) {
        throw new OndeviceError(`${name}: ${key} is not [${shape}]; re-export the bundle`);
      }
      if (!tensors[key].data.every(Number.isFinite)) {
        throw new OndeviceError(`${name}: ${key} holds NaN or infinity; re-export the bundle`);
      }
    }
    const blend = block.blend;
    if (blend && (blend.similarity !== "cosine" || blend.dim !== dim ||
        !["weight", "head_mean", "head_std", "sim_mean", "sim_std"].every((k) => Number.isFinite(blend[k])) ||
        !(blend.head_std > 0 && blend.sim_std > 0 && blend.weight >= 0))) {
      throw new OndeviceError("manifest.json pairs.blend is not a cosine blend for this encoder; re-export the bundle");
    }
    if (block.threshold != null && !Number.isFinite(block.threshold)) {
      throw new OndeviceError("manifest.json pairs.threshold is not a finite number; re-export the bundle");
    }
    return new PairHead(block, tensors, name);
  }

  constructor(block, tensors, file) {
    this.task = block.task;
    this.kind = block.task_type;
    this.dim = block.head.dim;
    this.hidden = block.head.hidden;
    this.outputs = block.head.outputs;
    this.w1 = tensors["hidden.weight"].data;
    this.b1 = tensors["hidden.bias"].data;
    this.w2 = tensors["out.weight"].data;
    this.b2 = tensors["out.bias"].data;
    const t = block.output_transform || {};
    this.scale = Number.isFinite(t.scale) ? t.scale : 1;
    this.offset = Number.isFinite(t.offset) ? t.offset : 0;
    this.threshold = Number.isFinite(block.threshold) ? block.threshold : 0;
    this.blend = block.blend || null;
    this.verified = [file];
  }

  /** Head logits (Float64Array of `outputs`) of one pair of embeddings. */
  logits(u, v) {
    const d = this.dim;
    if (u.length !== d || v.length !== d) throw new OndeviceError(`the pair head takes ${d}-d vectors`);
    const f = new Float64Array(4 * d);
    for (let i = 0; i < d; i++) {
      f[i] = u[i];
      f[d + i] = v[i];
      f[2 * d + i] = Math.fround(u[i] * v[i]); // float32 products, as the fp32 graph and the Java core form them
      f[3 * d + i] = Math.fround(Math.abs(u[i] - v[i]));
    }
    const h = new Float64Array(this.hidden);
    for (let j = 0, row = 0; j < this.hidden; j++, row += 4 * d) {
      let s = this.b1[j];
      for (let i = 0; i < 4 * d; i++) s += this.w1[row + i] * f[i];
      h[j] = s > 0 ? s : 0;
    }
    const out = new Float64Array(this.outputs);
    for (let o = 0; o < this.outputs; o++) {
      let s = this.b2[o];
      for (let j = 0; j < this.hidden; j++) s += this.w2[o * this.hidden + j] * h[j];
      out[o] = s;
    }
    return out;
  }

  /** Task score of logits: regression on the gold scale, binary probability, or the second class's probability. */
  score(logits) {
    if (this.kind === "regression") return logits[0] * this.scale + this.offset;
    if (this.kind === "binary") return 1 / (1 + Math.exp(-logits[0]));
    const max = Math.max(...logits);
    const e = Array.from(logits, (x) => Math.exp(x - max));
    return e[this.outputs > 1 ? 1 : 0] / e.reduce((a, b) => a + b, 0);
  }

  /** The rank key of a pair: the blend `z(logit) + w * z(cosine)` where the bundle has one, else the first logit. */
  key(logits, u, v) {
    const b = this.blend;
    if (!b) return logits[0];
    return (logits[0] - b.head_mean) / b.head_std + b.weight * (cosine(u, v) - b.sim_mean) / b.sim_std;
  }

  /** Binary tasks: whether a pair is positive, by the blended key's dev threshold (the head's without a blend). */
  decision(logits, u, v) {
    if (this.kind !== "binary") throw new OndeviceError(`decisions are for binary tasks; this head is ${this.kind}`);
    return this.blend && Number.isFinite(this.blend.threshold) ? this.key(logits, u, v) > this.blend.threshold
      : logits[0] > this.threshold;
  }

  /** Score, key and (binary) decision of one pair of embeddings. */
  pair(u, v) {
    const l = this.logits(u, v);
    return { logits: l, score: this.score(l), key: this.key(l, u, v), ...(this.kind === "binary" ? { decision: this.decision(l, u, v) } : {}) };
  }
}
