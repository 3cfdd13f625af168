// check-types.mjs DOC TYPES: checks that the TypeScript types openapi-typescript
// generated from the OpenAPI document DOC (TYPES, a .d.ts) keep every required
// property of every error schema required: "field: string", not "field?: string".
// (With the error subtypes written as allOf branches that only listed required
// names, the generator dropped them.) Exits 1, naming each one lost.
import { readFileSync } from "node:fs";

const [docPath, typesPath] = process.argv.slice(2);
const doc = JSON.parse(readFileSync(docPath, "utf8"));
const types = readFileSync(typesPath, "utf8");

// body returns the text of the type of schema name in the generated file: from
// "name: {" to its closing brace.
function body(name) {
  const start = types.search(new RegExp(`^\\s*${name}: [^\\n]*\\{$`, "m"));
  if (start < 0) return null;
  let depth = 0;
  for (let i = types.indexOf("{", start); i < types.length; i++) {
    if (types[i] === "{") depth++;
    if (types[i] === "}" && --depth === 0) return types.slice(start, i + 1);
  }
  return null;
}

let checked = 0;
const lost = [];
for (const [name, schema] of Object.entries(doc.components.schemas)) {
  // The required names of the schema, and of its allOf branches (the old form).
  const required = [schema, ...(schema.allOf ?? [])].flatMap((s) => s.required ?? []);
  if (!name.endsWith("Error") || name === "Error" || required.length === 0) continue;
  const b = body(name);
  if (b === null) {
    lost.push(`${name}: no such type in the generated file`);
    continue;
  }
  for (const field of required) {
    checked++;
    if (!new RegExp(`^\\s*"?${field}"?: `, "m").test(b)) {
      lost.push(`${name}.${field}: not required in the generated type`);
    }
  }
}
if (checked < 20) lost.push(`only ${checked} required fields checked: the document's error schemas were not found`);
for (const l of lost) console.error(`check-types: ${l}`);
if (lost.length > 0) process.exit(1);
console.log(`check-types: ${checked} required fields of the error schemas are required in the generated types`);
