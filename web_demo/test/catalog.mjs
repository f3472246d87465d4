// Load a catalog with ondevice.js's loadCatalog against a bundle's manifest (what the page does).
//
//   node test/catalog.mjs BUNDLE_DIR CATALOG_DIR
//
// Prints key=value lines (count, verified files, cached DiPair states); a bad catalog is one line and exit code 2.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { OndeviceError, loadBundle, loadCatalog } from "../ondevice.js";

const [bundleDir, catalogDir] = process.argv.slice(2);
const reader = (dir) => async (name) => new Uint8Array(readFileSync(join(dir, name)));
try {
  const bundle = await loadBundle(reader(bundleDir));
  const catalog = await loadCatalog(reader(catalogDir), bundle.manifest);
  console.log(`count=${catalog.sentences.length}`);
  console.log(`verified=${catalog.verified.join(",")}`);
  console.log(`dipair_states=${catalog.dipairStates ? catalog.dipairStates.length : 0}`);
} catch (e) {
  if (!(e instanceof OndeviceError)) throw e;
  console.error(`error: ${e.message}`);
  process.exit(2);
}
