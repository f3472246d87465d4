// A SQLite catalog written by Python, read with sql.js into ondevice.js and searched (tests/test_sqlite_catalog_apps.py):
//   node test/sqlite_catalog.mjs CATALOG.db GOLDEN.json OUT.json
//   -> {"size", "bits", "vector_dim", "rev", "ids", "texts", "cases": [{"ids", "distances", "scores"}]}
import { readFileSync, writeFileSync } from "node:fs";
import initSqlJs from "sql.js";
import { SqliteCatalog } from "../ondevice.js";

const SQL = await initSqlJs();
const cat = SqliteCatalog.open(SQL, readFileSync(process.argv[2]));
const g = JSON.parse(readFileSync(process.argv[3], "utf8"));
const cases = g.cases.map((c) => {
  const out = { ids: [], distances: [], scores: [] };
  g.queries.forEach((query, qi) => {
    const filter = c.filter && { tagsAll: BigInt(c.filter.tags_all), tagsAny: BigInt(c.filter.tags_any),
      categories: c.filter.categories };
    const r = cat.searchWith(Uint8Array.from(query), c.k, { filter, rescore: c.rescore || 0,
      queryVector: Float32Array.from(g.query_vectors[qi]) });
    out.ids.push(r.ids);
    out.distances.push(Array.from(r.distances));
    out.scores.push(r.scores ? Array.from(r.scores) : null);
  });
  return out;
});
writeFileSync(process.argv[4], JSON.stringify({ size: cat.size, bits: cat.bits, vector_dim: cat.vectorDim, rev: cat.rev,
  ids: cat.ids, texts: cat.texts, tags: Array.from(cat.tags, String), cases }));
