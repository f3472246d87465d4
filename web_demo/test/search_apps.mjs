// Filters and int8 rescoring with ondevice.js on a golden file written by Python (tests/test_search_apps.py):
//   node test/search_apps.mjs GOLDEN.json OUT.json    -> {"cases": [{"ids": [[...]], "distances": [[...]], "scores": ...}]}
import { readFileSync, writeFileSync } from "node:fs";
import { HammingIndex } from "../ondevice.js";

const g = JSON.parse(readFileSync(process.argv[2], "utf8"));
const index = new HammingIndex(Uint8Array.from(g.codes.flat()), g.code_bytes);
index.setAttributes(g.tags.map((t) => BigInt(t)), g.categories);
index.setVectors(Int8Array.from(g.vectors.flat()), Float32Array.from(g.scales), g.dim);
const cases = g.cases.map((c) => {
  const out = { ids: [], distances: [], scores: [] };
  g.queries.forEach((query, qi) => {
    const filter = c.filter && { tagsAll: BigInt(c.filter.tags_all), tagsAny: BigInt(c.filter.tags_any),
      categories: c.filter.categories };
    const r = index.searchWith(Uint8Array.from(query), c.k, { filter, rescore: c.rescore || 0,
      queryVector: Float32Array.from(g.query_vectors[qi]) });
    out.ids.push(Array.from(r.ids));
    out.distances.push(Array.from(r.distances));
    out.scores.push(r.scores ? Array.from(r.scores) : null);
  });
  return out;
});
writeFileSync(process.argv[3], JSON.stringify({ cases }));
