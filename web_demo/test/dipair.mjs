// Node parity check of ondevice.js's DiPair head against a bundle's golden DiPair files (`ondevice pairs dipair-export
// --golden`).
//
//   node test/dipair.mjs BUNDLE_DIR [--backend node|web] [--python-states A.npy,B.npy] [--pairs PAIRS.json]
//
// Prints key=value lines: the head's logits on golden/dipair_states_{a,b}.npy rows dipair_pair_a, dipair_pair_b
// vs golden/dipair_logits.npy (the fp32 head graph's); the blend keys of those golden logits and the pairs' golden
// code distances vs golden/dipair_blend_keys.npy; the JS encoder's token states of the golden sentences vs the
// golden states (the fp32 encoder graph's) and, with --python-states, vs the Python runtime's states of this bundle;
// a rerank of every golden side-b row for golden side-a row 0 by the double-precision loop and by the head graph.
// With --pairs (a JSON list of [a, b] texts), one JSON line per pair scored end to end (both texts through
// encoder.onnx, then the head). Exit code 0 even on mismatches: the caller asserts. A bundle error is one line and
// exit code 2.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DiPairHead, Encoder, OndeviceError, hammingDistance, loadBundle, parseNpy } from "../ondevice.js";

const args = process.argv.slice(2);
const dir = args[0];
const opt = (name) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const read = async (name) => new Uint8Array(readFileSync(join(dir, name)));
const golden = (name) => parseNpy(readFileSync(join(dir, "golden", name)));

function maxDiff(got, want, offset = 0) {
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[offset + i]));
  return worst;
}

try {
  const bundle = await loadBundle(read);
  const head = await DiPairHead.load(read, bundle.manifest);
  const { n, m, d } = head;
  const sa = golden("dipair_states_a.npy").data;
  const sb = golden("dipair_states_b.npy").data;
  const ia = golden("dipair_pair_a.npy").data;
  const ib = golden("dipair_pair_b.npy").data;
  const want = golden("dipair_logits.npy").data;
  let logitDiff = 0;
  for (let p = 0; p < ia.length; p++) {
    const l = head.logits(sa.subarray(ia[p] * n * d, (ia[p] + 1) * n * d), sb.subarray(ib[p] * m * d, (ib[p] + 1) * m * d));
    logitDiff = Math.max(logitDiff, maxDiff(l, want, p * head.outputs));
  }
  console.log(`task=${head.task}`);
  console.log(`kind=${head.kind}`);
  console.log(`pairs=${ia.length}`);
  console.log(`max_abs_diff=${logitDiff}`);
  if (head.blend) {
    const codes = golden("codes.npy");
    const cb = bundle.manifest.code_bytes;
    const keys = golden("dipair_blend_keys.npy").data;
    let keyDiff = 0;
    for (let p = 0; p < ia.length; p++) {
      const dist = hammingDistance(codes.data.subarray(ia[p] * cb, (ia[p] + 1) * cb), codes.data.subarray(ib[p] * cb, (ib[p] + 1) * cb));
      keyDiff = Math.max(keyDiff, Math.abs(head.key([want[p * head.outputs]], dist) - keys[p]));
    }
    console.log(`blend_max_abs_diff=${keyDiff}`);
  }

  const backend = opt("--backend") || "node";
  const ort = backend === "web" ? await import("onnxruntime-web") : await import("onnxruntime-node");
  if (backend === "web") ort.env.wasm.numThreads = 1;
  const encoder = await Encoder.create(ort, bundle, backend === "web" ? { executionProviders: ["wasm"] } : { intraOpNumThreads: 1 });
  const rows = sa.length / (n * d);
  const tokenIds = readFileSync(join(dir, "golden", "token_ids.txt"), "utf8").split("\n").slice(0, rows)
    .map((l) => (l.trim() ? l.trim().split(/\s+/).map(Number) : []));
  const py = opt("--python-states") ? opt("--python-states").split(",").map((f) => parseNpy(readFileSync(f)).data) : null;
  let goldenDiff = 0;
  let pyDiff = 0;
  for (let r = 0; r < rows; r++) {
    const out = await encoder.runIds(tokenIds[r]);
    goldenDiff = Math.max(goldenDiff, maxDiff(out.statesA, sa, r * n * d), maxDiff(out.statesB, sb, r * m * d));
    if (py) pyDiff = Math.max(pyDiff, maxDiff(out.statesA, py[0], r * n * d), maxDiff(out.statesB, py[1], r * m * d));
  }
  console.log(`sentences=${rows}`);
  console.log(`states_max_abs_diff_vs_golden=${goldenDiff}`);
  if (py) console.log(`states_max_abs_diff_vs_python=${pyDiff}`);

  // a shortlist of every golden side-b row for golden side-a row 0, reranked by the double-precision loop and by the
  // bundle's head graph (onnxruntime): the order of the first 10 and the largest key difference
  const cb = bundle.manifest.code_bytes;
  const codes = golden("codes.npy").data;
  const ids = Int32Array.from({ length: rows }, (_, i) => i);
  const dists = Int32Array.from(ids, (i) => hammingDistance(codes.subarray(0, cb), codes.subarray(i * cb, (i + 1) * cb)));
  const query = { statesA: sa.subarray(0, n * d) };
  const byLoop = await head.rerank(query, ids, dists, sb);
  await head.attachGraph(ort, read, bundle.manifest, backend === "web" ? { executionProviders: ["wasm"] } : { intraOpNumThreads: 1 });
  const byGraph = await head.rerank(query, ids, dists, sb);
  const keyOf = (r) => new Map(Array.from(r.ids, (id, i) => [id, r.keys[i]]));
  const loopKeys = keyOf(byLoop);
  const graphKeys = keyOf(byGraph);
  console.log(`rerank_top10_loop=${Array.from(byLoop.ids.subarray(0, 10)).join(",")}`);
  console.log(`rerank_top10_graph=${Array.from(byGraph.ids.subarray(0, 10)).join(",")}`);
  console.log(`rerank_key_max_abs_diff=${Math.max(...Array.from(ids, (i) => Math.abs(loopKeys.get(i) - graphKeys.get(i))))}`);
  console.log(`verified=${head.verified.join(",")}`);

  if (opt("--pairs")) {
    for (const [a, b] of JSON.parse(readFileSync(opt("--pairs"), "utf8"))) {
      const p = head.pair(await encoder.encode(a), await encoder.encode(b));
      console.log(JSON.stringify({ score: p.score, key: p.key, distance: p.distance, decision: p.decision }));
    }
  }
} catch (e) {
  if (!(e instanceof OndeviceError)) throw e;
  console.error(`error: ${e.message}`);
  process.exit(2);
}
