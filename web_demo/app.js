// The demo page: load and verify a bundle and a catalog, then encode typed text and search it.
import * as ort from "onnxruntime-web";
import { DiPairHead, Encoder, PairHead, loadBundle, loadCatalog } from "./ondevice.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const assets = new URL(params.get("assets") || "assets/", location.href);
const TOP_K = 10;
const SHORTLIST = 100; // Hamming candidates a DiPair head reranks (catalogs with cached token states)

function reader(base) {
  return async (name) => {
    const res = await fetch(new URL(name, base), { cache: "no-store" });
    if (!res.ok) throw new Error(`${new URL(name, base).pathname}: HTTP ${res.status}; build the site with tools/make_catalog.py`);
    return new Uint8Array(await res.arrayBuffer());
  };
}

async function start() {
  ort.env.wasm.numThreads = 1; // the .wasm file is found beside the bundled module (vendor/)
  $("status").textContent = "Verifying the bundle (SHA-256)…";
  const bundle = await loadBundle(reader(new URL("bundle/", assets)));
  $("status").textContent = "Verifying the catalog…";
  const catalog = await loadCatalog(reader(new URL("catalog/", assets)), bundle.manifest);
  const t0 = performance.now();
  const encoder = await Encoder.create(ort, bundle, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  await encoder.encode("warm up");
  const loadMs = performance.now() - t0;
  const m = bundle.manifest;
  // a bundle with a pair head (`ondevice pairs export`, e.g. the shipped QQP head) or a DiPair head (`ondevice pairs
  // dipair-export`) also compares two sentences
  const bundleFiles = reader(new URL("bundle/", assets));
  const pairHead = m.pairs ? await PairHead.load(bundleFiles, m) : m.dipair ? await DiPairHead.load(bundleFiles, m) : null;
  const dipair = pairHead instanceof DiPairHead;
  const rerank = dipair && catalog.dipairStates !== undefined;
  if (rerank) { // the shortlist is scored by the head's own graph, in one call
    await pairHead.attachGraph(ort, bundleFiles, m, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  }
  $("info").textContent = [
    `bundle: ${m.precision}, ${m.dim}-d embedding, ${m.bits}-bit codes, vocabulary ${bundle.tokenizer.vocab.length}`,
    `student: ${JSON.stringify(m.student)}`,
    `verified (size + SHA-256): ${[...bundle.verified, ...(pairHead ? pairHead.verified : [])].join(", ")}; ` +
      `catalog ${catalog.verified.join(", ")}`,
    ...(pairHead && !dipair ? [`pair head: ${pairHead.task} (${pairHead.kind}), ${pairHead.hidden} hidden units` +
      (pairHead.blend ? `, blended with the cosine (w = ${pairHead.blend.weight})` : "")] : []),
    ...(dipair ? [`DiPair head: ${pairHead.task} (${pairHead.kind}), ${pairHead.n} + ${pairHead.m} token states of ` +
      `${pairHead.d}, ${pairHead.layers} layer(s)` +
      (pairHead.blend ? `, blended with the Hamming distance (w = ${pairHead.blend.weight})` : "")] : []),
    `catalog: ${catalog.info.count} sentences; session created in ${loadMs.toFixed(0)} ms`,
    ...(rerank ? [`search: the Hamming top ${SHORTLIST} reranked by the DiPair head (catalog token states cached)`] : []),
    `onnxruntime-web ${ort.env.versions ? ort.env.versions.web : ""}, wasm, ${ort.env.wasm.numThreads} thread`,
  ].join("\n");
  $("status").textContent = `Ready: ${m.precision} bundle verified, ${catalog.info.count.toLocaleString("en")} ` +
    `catalog sentences of ${m.bits} bits.`;
  window.ondeviceDemo = { ort, bundle, catalog, encoder, search, pairHead };
  $("query").disabled = $("go").disabled = false;
  if (pairHead) {
    $("pairs").hidden = false;
    $("pairs-task").textContent = pairHead.task === "qqp" ? "Are these two questions duplicates?" :
      `Score a pair (${pairHead.task})`;
    $("pairs").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const a = $("pair-a").value;
      const b = $("pair-b").value;
      const t = performance.now();
      const ea = await encoder.encode(a);
      const eb = await encoder.encode(b);
      const p = dipair ? pairHead.pair(ea, eb) : pairHead.pair(ea.embedding, eb.embedding);
      const ms = performance.now() - t;
      const out = $("pair-result");
      Object.assign(out.dataset, { score: String(p.score), key: String(p.key), a, b });
      if (p.decision !== undefined) out.dataset.decision = String(p.decision);
      const verdict = p.decision === undefined ? "" : p.decision ? (pairHead.task === "qqp" ? "duplicate" : "positive") :
        (pairHead.task === "qqp" ? "not a duplicate" : "negative");
      out.textContent = `${verdict ? verdict + ": " : ""}` +
        `${pairHead.kind === "binary" ? "probability" : "score"} ${p.score.toFixed(3)}, rank key ${p.key.toFixed(3)} ` +
        `(both sentences encoded and scored in ${ms.toFixed(1)} ms)`;
    });
  }
  $("query").focus();
  document.body.dataset.state = "ready";

  async function search(text) {
    const a = performance.now();
    const query = await encoder.encode(text);
    const b = performance.now();
    let { ids, distances } = catalog.index.search(query.code, rerank ? SHORTLIST : TOP_K);
    let keys = null;
    const c = performance.now();
    if (rerank) {
      ({ ids, distances, keys } = await pairHead.rerank(query, ids, distances, catalog.dipairStates));
      [ids, distances, keys] = [ids.subarray(0, TOP_K), distances.subarray(0, TOP_K), keys.subarray(0, TOP_K)];
    }
    const d = performance.now();
    return { code: query.code, ids, distances, keys, encodeMs: b - a, searchMs: c - b, rerankMs: d - c };
  }

  $("search").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = $("query").value;
    const r = await search(text);
    const list = $("results");
    list.replaceChildren(...Array.from(r.ids, (row, i) => {
      const li = document.createElement("li");
      li.dataset.row = String(row);
      li.dataset.distance = String(r.distances[i]);
      if (r.keys) li.dataset.key = String(r.keys[i]);
      li.innerHTML = '<span class="rank"></span><span class="dist"></span><span class="text"></span>';
      li.children[0].textContent = `${i + 1}.`;
      li.children[1].textContent = `d = ${r.distances[i]}`;
      li.children[2].textContent = catalog.sentences[row];
      return li;
    }));
    $("timing").textContent = `encode ${r.encodeMs.toFixed(2)} ms · search ${r.searchMs.toFixed(2)} ms ` +
      `over ${catalog.info.count.toLocaleString("en")} codes` +
      (r.keys ? ` · DiPair rerank of ${Math.min(SHORTLIST, catalog.info.count)} in ${r.rerankMs.toFixed(2)} ms` : "");
    list.dataset.query = text;
  });
}

start().catch((err) => {
  document.body.dataset.state = "error";
  $("status").textContent = `Error: ${err.message}`;
  console.error(err);
});
