// Recorded into V8 code logs by record.py: inlined from another script.
"use strict";
exports.square = function square(x) {
  return (x * x) % 65521;
};
