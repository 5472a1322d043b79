// A small program for tests/data/jitdump/record.py: hot enough to reach
// the optimizing tier, short enough to keep the dump small.
function square(value) {
  return value * value;
}

function sumSquares(count) {
  let total = 0;
  for (let index = 0; index < count; index++) total += square(index % 97);
  return total;
}

let result = 0;
for (let round = 0; round < 2000; round++) result += sumSquares(1000);
console.log(result);
