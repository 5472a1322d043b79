// Run by jitprof with a process's own bun, as that process's user: for each
// script named (and the scripts they import, found the way bun finds them),
// its text and bun's runtime copy of it (what JavaScriptCore compiles and
// hashes). Nothing is run or written. Prints one JSON document.
// Usage: bun transpile.js MAX_SCRIPTS MAX_BYTES script...
const [maxScripts, maxBytes, ...named] = process.argv.slice(2);
const LOADERS = { js: "js", mjs: "js", cjs: "js", jsx: "jsx", ts: "ts", mts: "ts", cts: "ts", tsx: "tsx" };
const transpilers = {};
const scripts = [];
const problems = [];
const queued = new Set();
const queue = [];
let bytes = 0;

function enqueue(path) {
  if (!queued.has(path) && queued.size < Number(maxScripts)) {
    queued.add(path);
    queue.push(path);
  }
}

function loaderOf(path) {
  const extension = path.slice(path.lastIndexOf(".") + 1);
  return LOADERS[extension];
}

named.forEach(enqueue);
while (queue.length > 0) {
  const path = queue.shift();
  const loader = loaderOf(path);
  if (!loader) continue;
  try {
    const file = Bun.file(path);
    if (file.size > Number(maxBytes) - bytes) {
      problems.push(`${path}: too large`);
      continue;
    }
    const original = await file.text();
    transpilers[loader] ??= new Bun.Transpiler({ loader, target: "bun", inline: true });
    const runtime = transpilers[loader].transformSync(original);
    bytes += original.length + runtime.length;
    scripts.push({ path, original, runtime });
    const directory = path.slice(0, path.lastIndexOf("/")) || "/";
    for (const imported of transpilers[loader].scanImports(original)) {
      try {
        const resolved = Bun.resolveSync(imported.path, directory);
        if (resolved.startsWith("/")) enqueue(resolved); // not bun's own modules ("node:fs")
      } catch {
        // not a file bun would find: not loaded either
      }
    }
  } catch (error) {
    problems.push(`${path}: ${error?.message ?? error}`);
  }
}
process.stdout.write(JSON.stringify({ scripts, problems }));
