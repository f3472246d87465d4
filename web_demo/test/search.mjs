// Hamming top-k with ondevice.js over a catalog .npy for each query row of a queries .npy:
//   node test/search.mjs CATALOG.npy QUERIES.npy K OUT.json    -> {"ids": [[...]], "distances": [[...]]}
import { readFileSync, writeFileSync } from "node:fs";
import { HammingIndex, parseNpy } from "../ondevice.js";

const [catalogPath, queriesPath, k, outPath] = process.argv.slice(2);
const catalog = parseNpy(readFileSync(catalogPath));
const queries = parseNpy(readFileSync(queriesPath));
const width = catalog.shape[1];
const index = new HammingIndex(catalog.data, width);
const ids = [];
const distances = [];
for (let q = 0; q < queries.shape[0]; q++) {
  const r = index.search(queries.data.subarray(q * width, (q + 1) * width), Number(k));
  ids.push(Array.from(r.ids));
  distances.push(Array.from(r.distances));
}
writeFileSync(outPath, JSON.stringify({ ids, distances }));
