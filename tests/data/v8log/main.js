// Recorded into V8 code logs by record.py (see tests/test_v8log.py).
"use strict";
const { square } = require("./helper.js");

const table = {
  "weird,name"(x) {
    return (x ^ 0x5bd1) % 977;
  },
};

function outer(n) {
  let sum = 0;
  for (let i = 0; i < n; i++) sum += square(i) + table["weird,name"](i);
  return sum;
}

// Optimise, throw the code away, collect it, optimise again: the new code
// may land where the old code was (address reuse) and compaction moves code.
let sink = 0;
for (let round = 0; round < 3; round++) {
  for (let k = 0; k < 200; k++) sink += outer(2000);
  %DeoptimizeFunction(outer);
  globalThis.gc();
}
console.log(sink);
