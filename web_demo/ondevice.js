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

/** Hamming distance of two packed uint8 codes of the same length. */
export function hammingDistance(a, b) {
  if (a.length !== b.length) throw new OndeviceError(`codes of ${a.length} and ${b.length} bytes cannot be compared`);
  let d = 0;
  for (let i = 0; i < a.length; i++) d += popcount32(a[i] ^ b[i]);
  return d;
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

  /**
   * Per-row attributes for filtered search: `tags` 64-bit masks (BigInt values, e.g. a BigUint64Array) and
   * `categories` 32-bit integers, one each per row (as HammingIndex.add(tags=, categories=) in Python).
   */
  setAttributes(tags, categories) {
    if (tags.length !== this.size || categories.length !== this.size) {
      throw new OndeviceError(`attributes need one tag mask and one category per row (${this.size})`);
    }
    // two 32-bit halves per mask: the scan tests them with plain integer operations
    this.tagsLo = new Uint32Array(this.size);
    this.tagsHi = new Uint32Array(this.size);
    for (let r = 0; r < this.size; r++) {
      const t = BigInt.asUintN(64, BigInt(tags[r]));
      this.tagsLo[r] = Number(t & 0xffffffffn);
      this.tagsHi[r] = Number(t >> 32n);
    }
    this.categories = Int32Array.from(categories);
  }

  /** Per-row int8 vectors (Int8Array of size x dim) and float32 scales for rescoring (vector ~= int8 * scale). */
  setVectors(int8, scales, dim) {
    if (!(dim >= 1) || int8.length !== this.size * dim || scales.length !== this.size) {
      throw new OndeviceError(`int8 vectors need ${this.size} x ${dim} values and ${this.size} scales`);
    }
    this.vectors = Int8Array.from(int8);
    this.scales = Float32Array.from(scales);
    this.dim = dim;
  }

  /**
   * Search with a filter and/or int8 rescoring (Python's HammingIndex.search(filter=, rescore=, query_vectors=)):
   * rows the filter rejects are skipped inside the scan, so k rows come back whenever k rows are allowed; with
   * `rescore: m` the Hamming top m*k is re-ranked by the int8 dot product with `queryVector` (scores descending,
   * ties by the smaller row). Returns {ids, distances} or {ids, distances, scores}, only rows found.
   */
  searchWith(query, k = 10, { filter = null, rescore = 0, queryVector = null } = {}) {
    const f = filter ? new Filter(filter) : null;
    if (rescore && !(Number.isInteger(rescore) && rescore >= 1)) throw new OndeviceError("rescore must be an integer >= 1");
    if (rescore && !this.vectors) throw new OndeviceError("this index has no int8 vectors to rescore with (setVectors)");
    if (rescore && (!queryVector || queryVector.length !== this.dim)) {
      throw new OndeviceError(`rescoring needs the query's float vector of ${this.dim} values`);
    }
    const q = toWords(query, this.codeBytes, this.words);
    const w = this.words;
    const want = Math.min(rescore ? k * rescore : k, this.size);
    const ids = new Int32Array(want);
    const dist = new Int32Array(want);
    let found = 0;
    const hasAttrs = !!this.tagsLo;
    for (let r = 0, off = 0; r < this.size; r++, off += w) {
      if (f && !f.allows(hasAttrs ? this.tagsLo[r] : 0, hasAttrs ? this.tagsHi[r] : 0, hasAttrs ? this.categories[r] : 0)) continue;
      let d = 0;
      for (let j = 0; j < w; j++) d += popcount32(this.data[off + j] ^ q[j]);
      if (found === want && d >= dist[want - 1]) continue; // an equal distance keeps the earlier (smaller) row
      let pos = found < want ? found++ : want - 1;
      while (pos > 0 && dist[pos - 1] > d) {
        dist[pos] = dist[pos - 1];
        ids[pos] = ids[pos - 1];
        pos--;
      }
      dist[pos] = d;
      ids[pos] = r;
    }
    if (!rescore) return { ids: ids.slice(0, found), distances: dist.slice(0, found) };
    const scored = [];
    for (let i = 0; i < found; i++) {
      const r = ids[i];
      let dot = 0;
      for (let j = 0, o = r * this.dim; j < this.dim; j++) dot += this.vectors[o + j] * queryVector[j];
      scored.push({ r, d: dist[i], s: Math.fround(dot * this.scales[r]) });
    }
    scored.sort((a, b) => b.s - a.s || a.r - b.r);
    const top = scored.slice(0, k);
    return { ids: Int32Array.from(top, (x) => x.r), distances: Int32Array.from(top, (x) => x.d),
      scores: Float32Array.from(top, (x) => x.s) };
  }
}

/** Which rows a search may return, as Python's ondevice.index.Filter: every bit of tagsAll, any bit of tagsAny
 * (0: no condition), a category among `categories` (null: any). Masks are BigInt or safe integers. */
export class Filter {
  constructor({ tagsAll = 0n, tagsAny = 0n, categories = null } = {}) {
    const all = BigInt.asUintN(64, BigInt(tagsAll));
    const any = BigInt.asUintN(64, BigInt(tagsAny));
    this.allLo = Number(all & 0xffffffffn) >>> 0;
    this.allHi = Number(all >> 32n) >>> 0;
    this.anyLo = Number(any & 0xffffffffn) >>> 0;
    this.anyHi = Number(any >> 32n) >>> 0;
    this.categories = categories === null || categories === undefined ? null : new Set(Array.from(categories, Number));
  }

  /** Whether a row with this tag mask (two 32-bit halves) and category is allowed. */
  allows(lo, hi, category) {
    if (((lo & this.allLo) >>> 0) !== this.allLo || ((hi & this.allHi) >>> 0) !== this.allHi) return false;
    if ((this.anyLo || this.anyHi) && !(lo & this.anyLo) && !(hi & this.anyHi)) return false;
    return this.categories === null || this.categories.has(category);
  }
}

// ---------------------------------------------------------------------------------------------------------
// SQLite catalog (Python's ondevice.sqlite_catalog) read with sql.js: the same rows, ids and search results

export const SQLITE_CATALOG_FORMAT = "ondevice-sqlite-catalog-1";
const SQLITE_MAX_BITS = 1 << 16;
const SQLITE_MAX_VECTOR_DIM = 1 << 14;

/**
 * A SQLite catalog file (codes as sqlite-vec bit[N] blobs, ids, optional int8 vectors + scales, tag masks,
 * categories, text) read into a HammingIndex in id order, as Python's `Catalog.to_index()`, so `searchWith` returns
 * the same ids, distances and scores. `SQL` is an initialised sql.js module (`await initSqlJs({locateFile})`), passed
 * in like `ort` so this file imports nothing; `bytes` the database file (checkpointed: a closed catalog, or one from
 * `write_index`). Ids must be safe integers (below 2^53); tag masks come back as BigInt.
 */
export class SqliteCatalog {
  static open(SQL, bytes) {
    const db = new SQL.Database(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
    try {
      return new SqliteCatalog(db);
    } finally {
      db.close();
    }
  }

  constructor(db) {
    const bad = (why) => new OndeviceError(`SQLite catalog: ${why}`);
    const rows = (sql) => {
      const res = db.exec(sql);
      return res.length ? res[0].values : [];
    };
    let meta;
    try {
      meta = Object.fromEntries(rows("SELECT key, value FROM ondevice_catalog"));
    } catch (e) {
      throw bad(`not an ondevice catalog (${String(e.message || e).split("\n")[0]})`);
    }
    if (meta.format !== SQLITE_CATALOG_FORMAT) throw bad(`not an ondevice catalog (format ${meta.format})`);
    const bits = Number(meta.bits);
    const dim = Number(meta.vector_dim ?? "0");
    if (!Number.isInteger(bits) || bits < 1 || bits > SQLITE_MAX_BITS || !Number.isInteger(dim) || dim < 0 ||
        dim > SQLITE_MAX_VECTOR_DIM) {
      throw bad(`metadata out of range (bits ${meta.bits}, vector_dim ${meta.vector_dim}); recreate the catalog`);
    }
    const table = meta.table;
    if (typeof table !== "string" || !/^[a-z_][a-z0-9_]*$/.test(table) || table.startsWith("ondevice_")) {
      throw bad(`names no valid items table (${table})`);
    }
    this.bits = bits;
    this.codeBytes = Math.ceil(bits / 8);
    this.vectorDim = dim;
    this.table = table;
    this.rev = Number(meta.rev);
    this.encoder = meta.encoder ? JSON.parse(meta.encoder) : null;
    // the uint64 masks in two 32-bit halves computed by SQLite: no precision lost in JS numbers
    const all = rows(`SELECT id, code, vector, scale, tags & 4294967295, (tags >> 32) & 4294967295, category, text, ` +
      `typeof(id) FROM ${table} ORDER BY id`);
    const n = all.length;
    const nb = this.codeBytes;
    const codes = new Uint8Array(n * nb);
    const vectors = new Int8Array(n * dim);
    const scales = new Float32Array(dim ? n : 0);
    this.ids = new Array(n);
    this.texts = new Array(n);
    this.tags = new BigUint64Array(n);
    this.categories = new Int32Array(n);
    all.forEach(([id, code, vec, scale, lo, hi, cat, text, kind], r) => {
      if (kind !== "integer" || !Number.isSafeInteger(id)) throw bad(`id ${id} is not an integer below 2^53`);
      if (!(code instanceof Uint8Array) || code.length !== nb) {
        throw bad(`id ${id} has a code that is not ${nb} bytes; the catalog is corrupt`);
      }
      codes.set(code, r * nb);
      if (dim) {
        if (!(vec instanceof Uint8Array) || vec.length !== dim || typeof scale !== "number" || !(scale >= 0) ||
            !Number.isFinite(scale)) {
          throw bad(`id ${id} has no valid int8 vector of ${dim} values with a finite scale >= 0; the catalog is corrupt`);
        }
        vectors.set(new Int8Array(vec.buffer, vec.byteOffset, dim), r * dim);
        scales[r] = scale;
      }
      if (!Number.isInteger(cat) || cat < -0x80000000 || cat > 0x7fffffff) throw bad(`id ${id} has a category outside 32 bits`);
      this.ids[r] = id;
      this.texts[r] = text;
      this.tags[r] = (BigInt(hi) << 32n) | BigInt(lo);
      this.categories[r] = cat;
    });
    this.index = new HammingIndex(codes, nb);
    this.index.setAttributes(this.tags, this.categories);
    if (dim && n) this.index.setVectors(vectors, scales, dim);
  }

  get size() {
    return this.ids.length;
  }

  /**
   * HammingIndex.searchWith on the catalog: {ids (catalog ids), rows, distances[, scores]}, best first; `texts`
   * holds each hit's stored text.
   */
  searchWith(query, k = 10, options = {}) {
    if (options.rescore && !this.vectorDim) throw new OndeviceError("this catalog keeps no int8 vectors to rescore with");
    const r = this.size ? this.index.searchWith(query, k, options)
      : { ids: new Int32Array(0), distances: new Int32Array(0), ...(options.rescore ? { scores: new Float32Array(0) } : {}) };
    const out = { ids: Array.from(r.ids, (row) => this.ids[row]), rows: r.ids, distances: r.distances,
      texts: Array.from(r.ids, (row) => this.texts[row]) };
    if (r.scores) out.scores = r.scores;
    return out;
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

  /**
   * Embedding (Float32Array) and packed code (Uint8Array) of the token ids of one text; a DiPair bundle's encoder
   * (`ondevice pairs dipair-export`) also gives the text's token states as side a and side b of a pair
   * (`statesA`: Float32Array N x D, `statesB`: M x D, row-major), what DiPairHead scores.
   */
  async runIds(ids) {
    // ONNX int64 tensors are BigInt64Array by ORT's API; the ids are small integers
    const t = new this.ort.Tensor("int64", BigInt64Array.from(ids, (x) => BigInt(x)), [1, ids.length]);
    const len = new this.ort.Tensor("int64", BigInt64Array.of(BigInt(ids.length)), [1]);
    const out = await this.session.run({ ids: t, lengths: len });
    const got = { embedding: out.embedding.data, code: out.code.data };
    if (out.token_states_a && out.token_states_b) {
      got.statesA = out.token_states_a.data;
      got.statesB = out.token_states_b.data;
    }
    return got;
  }

  /** Embedding and code of one text. */
  async encode(text) {
    return this.runIds(this.tokenizer.ids(text));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Catalog written by web_demo/tools/make_catalog.py: catalog.json, codes.npy, sentences.jsonl (+ dipair_states.npy)

/**
 * Load a catalog through `read(name)`, checked against the bundle that will encode the queries: every file against
 * its size + SHA-256 in catalog.json. Returns {info, sentences, index, verified} and, where the catalog caches a DiPair
 * bundle's token states, `dipairStates` (Int8Array, count x M x D, what `DiPairHead.rerank` takes).
 */
export async function loadCatalog(read, manifest) {
  const info = parseJson(await read("catalog.json"), "catalog.json");
  const names = ["codes.npy", "sentences.jsonl", ...(info.dipair_states ? ["dipair_states.npy"] : [])];
  const files = {};
  for (const name of names) {
    const want = info.files && info.files[name];
    if (!want) throw new OndeviceError(`catalog.json does not list ${name}; rebuild the catalog with tools/make_catalog.py`);
    const bytes = await read(name);
    if (bytes.byteLength !== want.bytes || (await sha256Hex(bytes)) !== want.sha256) {
      throw new OndeviceError(`catalog ${name} fails its sha256 check; rebuild the catalog with tools/make_catalog.py`);
    }
    files[name] = bytes;
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
  const catalog = { info, sentences, index: new HammingIndex(codes.data, manifest.code_bytes), verified: names };
  if (info.dipair_states) {
    const states = parseNpy(files["dipair_states.npy"]);
    const h = (manifest.dipair || {}).head || {};
    if (states.dtype.slice(1) !== "i1" || states.shape.join(",") !== [sentences.length, h.m, h.d].join(",")) {
      throw new OndeviceError(`catalog dipair_states.npy is not int8 [${sentences.length}, ${h.m}, ${h.d}] for this ` +
        "bundle's DiPair head; rebuild the catalog");
    }
    catalog.dipairStates = states.data;
  }
  return catalog;
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

/**
 * A head block's blend (manifest `pairs.blend` over the embeddings' cosine, `dipair.blend` over minus the codes'
 * Hamming distance), checked against this bundle; null when the block has none.
 */
function readBlend(block, key, manifest) {
  const blend = block.blend;
  if (blend == null) return null;
  const dipair = key === "dipair";
  const fits = dipair ? blend.similarity === "minus_hamming" && blend.bits === manifest.bits
    : blend.similarity === "cosine" && blend.dim === manifest.dim;
  if (!fits || !["weight", "head_mean", "head_std", "sim_mean", "sim_std"].every((k) => Number.isFinite(blend[k])) ||
      !(blend.head_std > 0 && blend.sim_std > 0 && blend.weight >= 0) ||
      (blend.threshold != null && !Number.isFinite(blend.threshold))) {
    const over = dipair ? `minus_hamming blend over this bundle's ${manifest.bits}-bit codes` : "cosine blend for this encoder";
    throw new OndeviceError(`manifest.json ${key}.blend is not a ${over}; re-export the bundle`);
  }
  return blend;
}

/** What the DSE and DiPair heads share once loaded: task scores of logits, the blended rank key, decisions. */
class ScoredHead {
  constructor(block, blend) {
    this.task = block.task;
    this.kind = block.task_type;
    const t = block.output_transform || {};
    this.scale = Number.isFinite(t.scale) ? t.scale : 1;
    this.offset = Number.isFinite(t.offset) ? t.offset : 0;
    this.threshold = Number.isFinite(block.threshold) ? block.threshold : 0;
    this.blend = blend;
  }

  /** Task score of logits: regression on the gold scale, binary probability, or the second class's probability. */
  score(logits) {
    if (this.kind === "regression") return logits[0] * this.scale + this.offset;
    if (this.kind === "binary") return 1 / (1 + Math.exp(-logits[0]));
    const max = Math.max(...logits);
    const e = Array.from(logits, (x) => Math.exp(x - max));
    return e[this.outputs > 1 ? 1 : 0] / e.reduce((a, b) => a + b, 0);
  }

  /** The blended key `z(logit) + w * z(similarity)` where the bundle has a blend, else the first logit. */
  blendKey(logits, similarity) {
    const b = this.blend;
    if (!b) return logits[0];
    return (logits[0] - b.head_mean) / b.head_std + b.weight * (similarity - b.sim_mean) / b.sim_std;
  }

  /** Binary tasks: whether a pair is positive, by the blended key's dev threshold (the head's without a blend). */
  blendDecision(logits, similarity) {
    if (this.kind !== "binary") throw new OndeviceError(`decisions are for binary tasks; this head is ${this.kind}`);
    return this.blend && Number.isFinite(this.blend.threshold) ? this.blendKey(logits, similarity) > this.blend.threshold
      : logits[0] > this.threshold;
  }

  _result(logits, similarity) {
    return { logits, score: this.score(logits), key: this.blendKey(logits, similarity),
      ...(this.kind === "binary" ? { decision: this.blendDecision(logits, similarity) } : {}) };
  }
}

function checkKind(block, key) {
  if (!["regression", "binary", "classes"].includes(block.task_type)) {
    throw new OndeviceError(`manifest.json ${key}.task_type is not regression, binary or classes; re-export the bundle`);
  }
  if (block.threshold != null && !Number.isFinite(block.threshold)) {
    throw new OndeviceError(`manifest.json ${key}.threshold is not a finite number; re-export the bundle`);
  }
}

/** Read a head's fp32 safetensors (verified against the manifest) and check each tensor's shape and values. */
async function readTensors(read, manifest, name, want) {
  const tensors = parseSafetensors(await verifyFile(manifest, name, await read(name)), name);
  for (const [key, shape] of Object.entries(want)) {
    if (!tensors[key] || tensors[key].shape.join(",") !== shape.join(",")) {
      throw new OndeviceError(`${name}: ${key} is not [${shape}]; re-export the bundle`);
    }
    if (!tensors[key].data.every(Number.isFinite)) {
      throw new OndeviceError(`${name}: ${key} holds NaN or infinity; re-export the bundle`);
    }
  }
  return tensors;
}

/** The bundle's pair head: `logits = W2 relu(W1 [u, v, u*v, |u-v|] + b1) + b2`, task scores, blended keys, decisions. */
export class PairHead extends ScoredHead {
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
    const tensors = await readTensors(read, manifest, name, { "hidden.weight": [hidden, 4 * dim], "hidden.bias": [hidden],
      "out.weight": [outputs, hidden], "out.bias": [outputs] });
    const blend = readBlend(block, "pairs", manifest);
    checkKind(block, "pairs");
    return new PairHead(block, tensors, name, blend);
  }

  constructor(block, tensors, file, blend) {
    super(block, blend);
    this.dim = block.head.dim;
    this.hidden = block.head.hidden;
    this.outputs = block.head.outputs;
    this.w1 = tensors["hidden.weight"].data;
    this.b1 = tensors["hidden.bias"].data;
    this.w2 = tensors["out.weight"].data;
    this.b2 = tensors["out.bias"].data;
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

  /** The rank key of a pair: the blend `z(logit) + w * z(cosine)` where the bundle has one, else the first logit. */
  key(logits, u, v) {
    return this.blendKey(logits, this.blend ? cosine(u, v) : 0);
  }

  /** Binary tasks: whether a pair is positive, by the blended key's dev threshold (the head's without a blend). */
  decision(logits, u, v) {
    return this.blendDecision(logits, this.blend ? cosine(u, v) : 0);
  }

  /** Score, key and (binary) decision of one pair of embeddings. */
  pair(u, v) {
    return this._result(this.logits(u, v), this.blend ? cosine(u, v) : 0);
  }
}

// ---------------------------------------------------------------------------------------------------------
// DiPair head (`ondevice pairs dipair-export`): a small post-LN transformer over the token states of both texts,
// from the bundle's fp32 dipair_head.safetensors, summed in double like the Java core (DiPairHead.java) and
// ondevice.pairs.dipair.head_forward_numpy, plus the head + Hamming blend the bundle ranks by

const DIPAIR_LAYER = ["q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "o.weight", "o.bias",
  "ln1.weight", "ln1.bias", "ff1.weight", "ff1.bias", "ff2.weight", "ff2.bias", "ln2.weight", "ln2.bias"];
const MASK_NEG = -1e4;
const LN_EPS = 1e-5;

function linear(x, rows, inDim, w, b, outDim) {
  const y = new Float64Array(rows * outDim);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outDim; o++) {
      let s = b[o];
      const wr = o * inDim;
      const xr = r * inDim;
      for (let i = 0; i < inDim; i++) s += w[wr + i] * x[xr + i];
      y[r * outDim + o] = s;
    }
  }
  return y;
}

function layerNorm(x, rows, d, g, b) {
  for (let r = 0; r < rows; r++) {
    let mu = 0;
    for (let i = 0; i < d; i++) mu += x[r * d + i];
    mu /= d;
    let v = 0;
    for (let i = 0; i < d; i++) v += (x[r * d + i] - mu) ** 2;
    const inv = 1 / Math.sqrt(v / d + LN_EPS);
    for (let i = 0; i < d; i++) x[r * d + i] = (x[r * d + i] - mu) * inv * g[i] + b[i];
  }
}

/** Token states as numbers: float32 as they are, int8 (a catalog's cache, q = round(127 x)) as q / 127. */
function stateValues(s, count, what) {
  if (!s || s.length !== count) throw new OndeviceError(`${what} must hold ${count} values, got ${s ? s.length : "none"}`);
  return s instanceof Int8Array ? Float32Array.from(s, (q) => q / 127) : s;
}

/**
 * The bundle's DiPair head: logits of one pair's token states (side a: N x D, side b: M x D; all-zero rows are
 * padding, masked out of attention), task scores, the head + Hamming blend key, decisions.
 */
export class DiPairHead extends ScoredHead {
  /** Read, verify (size + SHA-256) and check the head the manifest's `dipair` block names. */
  static async load(read, manifest) {
    const block = manifest.dipair;
    if (!block || typeof block !== "object") {
      throw new OndeviceError("this bundle has no DiPair head; export one with `ondevice pairs dipair-export`");
    }
    const h = block.head || {};
    const dims = [h.n, h.m, h.d, h.layers, h.heads, h.ffn, h.outputs];
    if (!dims.every((x) => Number.isInteger(x) && x >= 1) || h.outputs > 1024 || h.d % h.heads !== 0 ||
        typeof block.weights !== "string") {
      throw new OndeviceError("manifest.json dipair block does not describe a DiPair head; re-export the bundle");
    }
    checkKind(block, "dipair");
    const pooled = Number.isInteger(h.vec_dim) && h.vec_dim > 0;
    const slots = (pooled ? 1 : 0) + h.n + h.m;
    const want = { position: [slots, h.d], segment: [2, h.d], "out.weight": [h.outputs, h.d], "out.bias": [h.outputs] };
    if (pooled) Object.assign(want, { "compare.weight": [h.d, 4 * h.d], "compare.bias": [h.d] });
    for (let l = 0; l < h.layers; l++) {
      for (const name of DIPAIR_LAYER) {
        const shape = name === "ff1.weight" ? [h.ffn, h.d] : name === "ff1.bias" ? [h.ffn] : name === "ff2.weight" ? [h.d, h.ffn]
          : name.endsWith("weight") && !name.startsWith("ln") ? [h.d, h.d] : [h.d];
        want[`layers.${l}.${name}`] = shape;
      }
    }
    const tensors = await readTensors(read, manifest, block.weights, want);
    return new DiPairHead(block, tensors, block.weights, readBlend(block, "dipair", manifest), pooled);
  }

  constructor(block, tensors, file, blend, pooled) {
    super(block, blend);
    const h = block.head;
    Object.assign(this, { n: h.n, m: h.m, d: h.d, layers: h.layers, heads: h.heads, ffn: h.ffn, outputs: h.outputs, pooled });
    const first = pooled ? 1 : 0;
    const slots = first + h.n + h.m;
    const pos = tensors.position.data;
    const seg = tensors.segment.data;
    this.embedAdd = new Float32Array(slots * h.d); // position + segment, in float32 as the graph adds them
    for (let s = 0; s < slots; s++) {
      const g = s < first + h.n ? 0 : 1;
      for (let i = 0; i < h.d; i++) this.embedAdd[s * h.d + i] = pos[s * h.d + i] + seg[g * h.d + i];
    }
    this.w = [];
    for (let l = 0; l < h.layers; l++) this.w.push(DIPAIR_LAYER.map((name) => tensors[`layers.${l}.${name}`].data));
    this.compare = pooled ? [tensors["compare.weight"].data, tensors["compare.bias"].data] : null;
    this.outW = tensors["out.weight"].data;
    this.outB = tensors["out.bias"].data;
    this.graphFile = block.file;
    this.session = null;
    this.verified = [file];
  }

  /**
   * Also run the head as the bundle's own ONNX graph (`dipair_head.onnx`, size + SHA-256 checked first) in `ort`
   * (onnxruntime-web or -node): `rerank` then scores its whole shortlist in one batched call, far faster in a page than
   * the double-precision loop, with the graph's numbers (an int8 bundle's graph is int8). Returns this head.
   */
  async attachGraph(ort, read, manifest, options = {}) {
    if (typeof this.graphFile !== "string") {
      throw new OndeviceError("manifest.json dipair block names no head graph; re-export the bundle");
    }
    const bytes = await verifyFile(manifest, this.graphFile, await read(this.graphFile));
    this.ort = ort;
    this.session = await ort.InferenceSession.create(bytes, options);
    this.verified = [...this.verified, this.graphFile];
    return this;
  }

  /** Head logits (Float32Array, count x outputs) of one side-a state set against `count` side-b sets, by the graph. */
  async graphLogits(statesA, statesB, count) {
    if (!this.session) throw new OndeviceError("no head graph attached; call attachGraph first");
    const { n, m, d } = this;
    const qa = stateValues(statesA, n * d, "side-a states");
    const a = new Float32Array(count * n * d);
    for (let i = 0; i < count; i++) a.set(qa, i * n * d);
    const b = stateValues(statesB, count * m * d, "side-b states");
    const T = this.ort.Tensor;
    const out = await this.session.run({ states_a: new T("float32", a, [count, n, d]), states_b: new T("float32", b, [count, m, d]) });
    return out.logits.data;
  }

  /** Head logits (Float64Array of `outputs`) of side-a states (N x D) and side-b states (M x D), float32 or int8. */
  logits(statesA, statesB) {
    const { n, m, d } = this;
    const a = stateValues(statesA, n * d, "side-a states");
    const b = stateValues(statesB, m * d, "side-b states");
    const first = this.pooled ? 1 : 0;
    const s = first + n + m;
    const x = new Float64Array(s * d);
    const keep = new Array(s).fill(false);
    if (this.pooled) { // the comparison slot, from the two pooled slots (slot 0 of each side)
      const f = new Float64Array(4 * d);
      for (let i = 0; i < d; i++) {
        f[i] = a[i];
        f[d + i] = b[i];
        f[2 * d + i] = a[i] * b[i];
        f[3 * d + i] = Math.abs(a[i] - b[i]);
      }
      const c = linear(f, 1, 4 * d, this.compare[0], this.compare[1], d);
      for (let i = 0; i < d; i++) x[i] = c[i] + this.embedAdd[i];
      keep[0] = true;
    }
    for (let r = first; r < s; r++) {
      const t = r - first;
      let abs = 0;
      for (let i = 0; i < d; i++) {
        const v = t < n ? a[t * d + i] : b[(t - n) * d + i];
        abs += Math.abs(v);
        x[r * d + i] = v + this.embedAdd[r * d + i];
      }
      keep[r] = abs > 0;
    }
    const dh = d / this.heads;
    const scale = 1 / Math.sqrt(dh);
    const att = new Float64Array(s);
    for (let l = 0; l < this.layers; l++) {
      const p = this.w[l];
      const rows = l === this.layers - 1 ? 1 : s; // only slot 0 reaches the logits
      const k = linear(x, s, d, p[2], p[3], d);
      const v = linear(x, s, d, p[4], p[5], d);
      const q = linear(x, rows, d, p[0], p[1], d);
      const ctx = new Float64Array(rows * d);
      for (let hd = 0; hd < this.heads; hd++) {
        const off = hd * dh;
        for (let i = 0; i < rows; i++) {
          let max = -Infinity;
          for (let j = 0; j < s; j++) {
            let dot = 0;
            for (let u = 0; u < dh; u++) dot += q[i * d + off + u] * k[j * d + off + u];
            att[j] = dot * scale + (keep[j] ? 0 : MASK_NEG);
            if (att[j] > max) max = att[j];
          }
          let sum = 0;
          for (let j = 0; j < s; j++) {
            att[j] = Math.exp(att[j] - max);
            sum += att[j];
          }
          for (let j = 0; j < s; j++) {
            const pj = att[j] / sum;
            for (let u = 0; u < dh; u++) ctx[i * d + off + u] += pj * v[j * d + off + u];
          }
        }
      }
      const o = linear(ctx, rows, d, p[6], p[7], d);
      for (let i = 0; i < o.length; i++) x[i] += o[i];
      layerNorm(x, rows, d, p[8], p[9]);
      const h1 = linear(x, rows, d, p[10], p[11], this.ffn);
      for (let i = 0; i < h1.length; i++) if (h1[i] < 0) h1[i] = 0;
      const h2 = linear(h1, rows, this.ffn, p[12], p[13], d);
      for (let i = 0; i < h2.length; i++) x[i] += h2[i];
      layerNorm(x, rows, d, p[14], p[15]);
    }
    const out = new Float64Array(this.outputs);
    for (let c = 0; c < this.outputs; c++) {
      let acc = this.outB[c];
      for (let i = 0; i < d; i++) acc += this.outW[c * d + i] * x[i];
      out[c] = acc;
    }
    return out;
  }

  /** The rank key of a pair from its logits and the two codes' Hamming distance (the blend's; else the first logit). */
  key(logits, distance) {
    return this.blendKey(logits, -distance);
  }

  /** Binary tasks: whether a pair is positive, by the blended key's dev threshold (the head's without a blend). */
  decision(logits, distance) {
    return this.blendDecision(logits, -distance);
  }

  /**
   * Rerank a Hamming shortlist: `query` is the encoder's output of the query text (side a), `ids` and `distances`
   * the shortlist (`HammingIndex.search`), `states` every catalog item's side-b states (int8 or float32, item i at
   * i x M x D, e.g. `loadCatalog(...).dipairStates`). Resolves to {ids, keys, distances} ordered by the rank key (the
   * blend where the bundle has one, else the head's score for classes and the first logit otherwise), highest first,
   * equal keys to the smaller id. With `attachGraph` the head runs as the bundle's graph, in one call.
   */
  async rerank(query, ids, distances, states) {
    if (!query.statesA) throw new OndeviceError("the query's encoder output has no token states; use a DiPair bundle");
    const per = this.m * this.d;
    if (states.length % per !== 0) throw new OndeviceError(`catalog states are not rows of ${this.m} x ${this.d}`);
    const cand = new (states instanceof Int8Array ? Int8Array : Float32Array)(ids.length * per);
    ids.forEach((id, i) => {
      if (!(id >= 0 && (id + 1) * per <= states.length)) {
        throw new OndeviceError(`catalog id ${id} has no cached states (${states.length / per} rows); rebuild the catalog`);
      }
      cand.set(states.subarray(id * per, (id + 1) * per), i * per);
    });
    const o = this.outputs;
    const flat = this.session && ids.length ? await this.graphLogits(query.statesA, cand, ids.length) : null;
    const keys = Array.from(ids, (_, i) => {
      const l = flat ? flat.subarray(i * o, (i + 1) * o) : this.logits(query.statesA, cand.subarray(i * per, (i + 1) * per));
      return this.blend || this.kind !== "classes" ? this.key(l, distances[i]) : this.score(l);
    });
    const order = Array.from(ids, (_, i) => i).sort((x, y) => keys[y] - keys[x] || ids[x] - ids[y]);
    return { ids: Int32Array.from(order, (i) => ids[i]), keys: Float64Array.from(order, (i) => keys[i]),
      distances: Int32Array.from(order, (i) => distances[i]) };
  }

  /**
   * Score, key, Hamming distance and (binary) decision of a pair from the encoder's outputs of its two texts
   * (`Encoder.encode`: the first text's `statesA` and `code`, the second's `statesB` and `code`).
   */
  pair(first, second) {
    if (!first.statesA || !second.statesB) {
      throw new OndeviceError("these encoder outputs have no token states; the bundle's encoder.onnx must come from " +
        "`ondevice pairs dipair-export`");
    }
    const distance = hammingDistance(first.code, second.code);
    return { ...this._result(this.logits(first.statesA, second.statesB), -distance), distance };
  }
}
