// SPDX-License-Identifier: MIT
// validate.mjs — the second validator of bench/schema_coverage.py: ajv (draft 2020-12, 2019-09,
// 07/06, and 04 through ajv-draft-04) with ajv-formats, sharing nothing with python3-jsonschema
// or daemon/grammar/. Reads JSON lines {"schema": TEXT, "instance": TEXT} on standard input and
// writes one line per input: {"ok": true}, {"ok": false, "error": "..."}, or {"compiled": false,
// "error": "..."} for a schema ajv itself cannot compile (counted apart, not as invalid).
import { createInterface } from "node:readline";
import Ajv from "ajv";
import Ajv2019 from "ajv/dist/2019.js";
import Ajv2020 from "ajv/dist/2020.js";
import AjvDraft04 from "ajv-draft-04";
import addFormats from "ajv-formats";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
// Draft 06's meta-schema is not in ajv's draft-07 class by default: without it a schema that
// names draft-06 in $schema cannot compile (ajv's docs: add it with addMetaSchema).
const draft06 = require("ajv/dist/refs/json-schema-draft-06.json");

// Real-world schemas carry unknown keywords and formats: not errors for a validator (strict
// off), and a format ajv does not know is not checked (validateFormats on, unknown ignored).
const options = { strict: false, allErrors: false, validateFormats: true, unicodeRegExp: true };

function make(Klass) {
  const ajv = new Klass(options);
  addFormats(ajv);
  return ajv;
}

const engines = { d2020: make(Ajv2020), d2019: make(Ajv2019), d07: make(Ajv), d04: make(AjvDraft04) };
engines.d07.addMetaSchema(draft06);

function engineFor(schema) {
  const s = typeof schema === "object" && schema ? String(schema.$schema || "") : "";
  if (s.includes("draft-04") || s.includes("draft-03")) return engines.d04;
  if (s.includes("draft-06") || s.includes("draft-07")) return engines.d07;
  if (s.includes("2019-09")) return engines.d2019;
  return engines.d2020;
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (!line.trim()) continue;
  let out;
  try {
    const { schema, instance } = JSON.parse(line);
    const s = JSON.parse(schema);
    let validate;
    try {
      const ajv = engineFor(s);
      if (typeof s === "object" && s) delete s.$id, delete s.id; // ids would clash across lines
      validate = ajv.compile(s);
    } catch (e) {
      out = { compiled: false, error: String(e.message).slice(0, 200) };
    }
    if (validate) {
      const ok = validate(JSON.parse(instance));
      out = ok ? { ok: true } : { ok: false, error: JSON.stringify(validate.errors).slice(0, 300) };
    }
  } catch (e) {
    out = { ok: false, error: "unreadable: " + String(e.message).slice(0, 200) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
