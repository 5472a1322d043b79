// tsc's checker on typescript.js, in a loop, for the paired BPF measurement:
// a steady program with stacks 60 to 200 JS frames deep.
// Usage: node tsc_loop.js TYPESCRIPT_DIR FILE SECONDS
"use strict";
const ts = require(process.argv[2]);
const file = process.argv[3];
const end = Date.now() + Number(process.argv[4]) * 1000;
const options = { noEmit: true, allowJs: true, checkJs: true, skipLibCheck: true, target: ts.ScriptTarget.ES2020 };
while (Date.now() < end) ts.getPreEmitDiagnostics(ts.createProgram([file], options));
