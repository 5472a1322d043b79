// Run by jitprof with its own bun, as a bun process's user: the scripts that
// process runs (those its arguments name, `bun test`'s test files, and what
// they import, found the way bun finds them), each with its text, and bun's
// runtime copy of each script asked for (what JavaScriptCore compiles and
// hashes). Nothing is run or written. Prints one JSON document.
// Usage: bun transpile.js find MAX_SCRIPTS MAX_BYTES DIRECTORY ARGUMENT...
//   (the process's working directory and its arguments after bun's path):
//   the scripts and their texts, no copies;
// bun transpile.js copy MAX_SCRIPTS MAX_BYTES DIRECTORY PATH...:
//   these scripts' texts and copies (those jitprof keeps no copy of).
const [mode, maxScripts, maxBytes, directory, ...commandLine] = process.argv.slice(2);
const LOADERS = { js: "js", mjs: "js", cjs: "js", jsx: "jsx", ts: "ts", mts: "ts", cts: "ts", tsx: "tsx" };
const TEST_FILES = "**/*{.test,_test,.spec,_spec}.{js,jsx,ts,tsx,mjs,cjs,mts,cts}";
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

function resolved(specifier, from) {
  try {
    const path = Bun.resolveSync(specifier, from);
    return path.startsWith("/") ? path : undefined; // not bun's own modules ("node:fs")
  } catch {
    return undefined; // not a file bun would find: not loaded either
  }
}

// What the arguments name: `bun app.ts`, `bun run app`, `bun ./src/index`.
for (const argument of mode === "find" ? commandLine : []) {
  if (argument.startsWith("-")) continue;
  const path = resolved(argument.startsWith("/") ? argument : `./${argument}`, directory);
  if (path && loaderOf(path)) enqueue(path);
}
if (mode === "copy") {
  for (const path of commandLine) if (path.startsWith("/") && loaderOf(path)) enqueue(path);
} else if (commandLine.find((argument) => !argument.startsWith("-")) === "test") {
  for (const relative of new Bun.Glob(TEST_FILES).scanSync({ cwd: directory, onlyFiles: true })) {
    if (queued.size >= Number(maxScripts)) break;
    if (!relative.split("/").includes("node_modules")) enqueue(`${directory}/${relative}`);
  }
}
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
    if (mode === "copy") {
      const runtime = transpilers[loader].transformSync(original);
      bytes += original.length + runtime.length;
      scripts.push({ path, original, runtime });
      continue;
    }
    bytes += original.length;
    scripts.push({ path, original });
    const importer = path.slice(0, path.lastIndexOf("/")) || "/";
    for (const imported of transpilers[loader].scanImports(original)) {
      const found = resolved(imported.path, importer);
      if (found) enqueue(found);
    }
  } catch (error) {
    problems.push(`${path}: ${error?.message ?? error}`);
  }
}
process.stdout.write(JSON.stringify({ scripts, problems }));
