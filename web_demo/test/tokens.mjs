// Tokens of each line of a JSONL file of strings (tokenizer spec v1), one JSON line out per line in:
//   node test/tokens.mjs IN.jsonl OUT.jsonl
// Each output line is [tokens, unassigned]: `unassigned` says this JavaScript engine's Unicode data does not
// assign the string's first code point (\p{Cn}), where an engine with older or newer data may differ.
import { readFileSync, writeFileSync } from "node:fs";
import { tokenize } from "../ondevice.js";

const texts = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const out = texts.map((t) => JSON.stringify([tokenize(t), /^\p{Cn}/u.test(t)]));
writeFileSync(process.argv[3], out.join("\n") + "\n");
