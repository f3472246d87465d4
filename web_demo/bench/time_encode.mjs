// Encode latency of ONNX graphs in onnxruntime-web's WebAssembly build (1 thread) under Node:
//   node bench/time_encode.mjs IDS_JSON RUNS ROUNDS MODEL.onnx...   -> JSON {model: [p50 per round, ms]}
// The graphs take (ids, lengths) like a bundle's encoder.onnx; IDS_JSON is one sentence's token ids.
// Rounds interleave the models, so a slow period of a shared machine hits all of them alike.
import { readFileSync } from "node:fs";
import * as ort from "onnxruntime-web";

ort.env.wasm.numThreads = 1;
const [idsJson, runs, rounds, ...models] = process.argv.slice(2);
const ids = JSON.parse(idsJson);
const feeds = () => ({
  ids: new ort.Tensor("int64", BigInt64Array.from(ids, (x) => BigInt(x)), [1, ids.length]),
  lengths: new ort.Tensor("int64", BigInt64Array.of(BigInt(ids.length)), [1]),
});
const sessions = [];
for (const m of models) {
  sessions.push(await ort.InferenceSession.create(readFileSync(m), { executionProviders: ["wasm"], graphOptimizationLevel: "all" }));
}
const out = Object.fromEntries(models.map((m) => [m, []]));
for (let r = 0; r < Number(rounds); r++) {
  for (let i = 0; i < models.length; i++) {
    for (let w = 0; w < 30; w++) await sessions[i].run(feeds());
    const t = [];
    for (let k = 0; k < Number(runs); k++) {
      const f = feeds();
      const a = performance.now();
      await sessions[i].run(f);
      t.push(performance.now() - a);
    }
    t.sort((x, y) => x - y);
    out[models[i]].push(t[Math.floor(t.length / 2)]);
  }
}
console.log(JSON.stringify(out));
