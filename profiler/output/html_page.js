// The page of jitprof's report.html (profiler/output/html.py inlines it).
// Every text from the profile is set as text (textContent, fillText), never
// as markup. Nothing is fetched.
'use strict';
(function () {
  const opened = performance.now();
  const data = JSON.parse(document.getElementById('profile').textContent);
  const summary = data.summary;
  const functions = data.functions; // [name, file, line, module, category, kind]
  const threads = data.threads; // [pid, tid, comm]
  const stacks = data.stacks; // [thread, weight a, weight b, [function...], request]
  const requests = data.requests || [['', '']]; // [route, trace id] of the requests samples served
  const mode = data.mode; // cpu, offcpu, diff
  const ROW = 18;
  const COLORS = {
    interpreted: '#a6cee3', baseline: '#b2df8a', optimized: '#33a02c', inlined: '#1f9e89', jit: '#66c2a5',
    runtime: '#cab2d6', native: '#fdbf6f', kernel: '#ff7f00', unknown: '#cccccc', wait: '#eeeeee', work: '#f4a6b7',
    async: '#c3a6e8',
  };
  const TIER_NAMES = {
    interpreted: 'interpreted', baseline: 'baseline', optimized: 'optimized', inlined: 'inlined',
    jit: 'JIT (tier unknown)', runtime: 'runtime builtins, stubs', native: 'native', kernel: 'kernel', unknown: 'unnamed',
    wait: 'waiting (not code)', work: 'threadpool work', async: 'async callers (awaiting, not on the stack)',
  };
  // Pseudo-frames of --off-cpu: their self time is the code's that waits.
  function isCode(fn) { return functions[fn][4] !== 'wait'; }
  const MATCH_COLOR = '#e040fb';

  function element(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    for (const child of children) node.append(child);
    return node;
  }
  function percent(part, whole) { return whole ? (100 * part / whole).toFixed(2) + ' %' : '0 %'; }
  function amount(value) {
    const unit = mode === 'cpu' || (mode === 'diff' && summary.unit === 'samples') ? 'samples' : 'µs';
    if (unit === 'µs' && value >= 1e6) return (value / 1e6).toFixed(2) + ' s';
    if (unit === 'µs' && value >= 1e3) return (value / 1e3).toFixed(1) + ' ms';
    return Math.round(value).toLocaleString('en') + (unit === 'samples' ? '' : ' µs');
  }
  function place(index) {
    const [, file, line, module] = functions[index];
    const where = file || module || '';
    return where && line ? where + ':' + line : where;
  }

  // --- The page's parts --------------------------------------------------------
  const header = element('header', {});
  const title = element('h1', {}, summary.title);
  const command = element('div', { id: 'command' }, summary.command);
  const facts = [];
  if (mode === 'diff') {
    facts.push('base: ' + (summary.base_command || '?') + ' (' + summary.base_samples.toLocaleString('en') + ' samples)');
  }
  facts.push(summary.samples.toLocaleString('en') + ' samples at ' + summary.frequency_hz + ' Hz');
  if (summary.duration_s) facts.push(summary.duration_s.toFixed(1) + ' s');
  facts.push(summary.lost.toLocaleString('en') + ' lost');
  facts.push((100 * summary.unsymbolized).toFixed(1) + ' % of frames unnamed');
  if (summary.incomplete_walks) facts.push(summary.incomplete_walks.toLocaleString('en') + ' walks cut short');
  if (summary.idle_left_out_s) facts.push(summary.idle_left_out_s.toFixed(1) + ' s idle left out (--idle keeps it)');
  const factLine = element('div', { id: 'summary' }, facts.join(' · '));
  header.append(title, command, factLine);
  if (summary.warnings && summary.warnings.length) {
    // What the run said after its summary, as it said it (text, never markup).
    const said = element('details', { id: 'warnings' },
      element('summary', {}, summary.warnings.length + (summary.warnings.length === 1 ? ' warning or hint' : ' warnings and hints') + ' from the run'));
    const list = element('ul', {});
    for (const line of summary.warnings) list.append(element('li', {}, line));
    said.append(list);
    header.append(said);
  }

  const controls = element('div', { id: 'controls' });
  let view = 'both';
  if (mode === 'offcpu') {
    const viewSelect = element('select', { id: 'view', 'aria-label': 'time' },
      element('option', { value: 'both' }, 'on and off the CPU'),
      element('option', { value: 'cpu' }, 'on the CPU'),
      element('option', { value: 'off' }, 'off the CPU (waiting)'));
    viewSelect.addEventListener('change', () => { view = viewSelect.value; rebuild(); });
    controls.append(viewSelect);
  }
  const selection = element('select', { id: 'selection', 'aria-label': 'processes and threads' },
    element('option', { value: 'all' }, 'all processes'));
  const processes = new Map();
  threads.forEach(([pid, tid, comm], index) => {
    if (!processes.has(pid)) processes.set(pid, { comm, threads: [] });
    processes.get(pid).threads.push(index);
  });
  for (const [pid, process] of [...processes.entries()].sort((a, b) => a[0] - b[0])) {
    selection.append(element('option', { value: 'p' + pid }, process.comm + ' (pid ' + pid + ')'));
    if (process.threads.length > 1) {
      for (const index of process.threads) {
        const [, tid, comm] = threads[index];
        selection.append(element('option', { value: 't' + index }, '\u2003' + comm + ' (thread ' + tid + ')'));
      }
    }
  }
  selection.addEventListener('change', rebuild);
  const search = element('input', { id: 'search', type: 'search', placeholder: 'search functions', 'aria-label': 'search' });
  const matched = element('span', { id: 'matched' });
  const reset = element('button', { id: 'reset', type: 'button' }, 'reset zoom');
  controls.append(selection, search, matched, reset);
  // Requests (samples' labels): by route, and by trace id (its first characters).
  const routes = [...new Set(requests.map((request) => request[0]).filter(Boolean))].sort();
  let routeSelect = null;
  let traceInput = null;
  if (routes.length) {
    routeSelect = element('select', { id: 'route', 'aria-label': 'request route' }, element('option', { value: '*' }, 'all routes'));
    for (const route of routes) routeSelect.append(element('option', { value: route }, route));
    routeSelect.append(element('option', { value: '' }, '(no route)'));
    routeSelect.addEventListener('change', rebuild);
    controls.append(routeSelect);
  }
  if (requests.some((request) => request[1])) {
    traceInput = element('input', { id: 'trace', type: 'search', placeholder: 'trace id', 'aria-label': 'trace id' });
    traceInput.addEventListener('input', rebuild);
    controls.append(traceInput);
  }

  const legend = element('div', { id: 'legend' });
  if (mode === 'diff') {
    legend.append(element('span', { class: 'swatch', style: 'background:#e34a33' }), 'grew ',
      element('span', { class: 'swatch', style: 'background:#3182bd' }), 'shrank ',
      element('span', { class: 'swatch', style: 'background:#dddddd' }), 'unchanged');
  } else {
    const present = new Set(functions.map((fn) => fn[4]));
    for (const [category, colour] of Object.entries(COLORS)) {
      if (!present.has(category) && (category === 'wait' || category === 'work' || category === 'async')) continue;
      legend.append(element('span', { class: 'swatch', style: 'background:' + colour }), TIER_NAMES[category] + ' ');
    }
  }
  const graphBox = element('div', { id: 'graph' });
  const canvas = element('canvas', { id: 'flame' });
  const tooltip = element('div', { id: 'tooltip', hidden: '' });
  graphBox.append(canvas, tooltip);
  const table = element('table', { id: 'functions' });
  const tableHead = element('thead', {});
  const tableBody = element('tbody', {});
  table.append(tableHead, tableBody);
  const tableNote = element('div', { id: 'table-note' });
  document.body.append(header, controls, legend, graphBox, element('h2', {}, 'Functions'), tableNote, table);

  // --- The tree of the selected stacks -------------------------------------------
  function selected() {
    const value = selection.value;
    if (value === 'all') return () => true;
    if (value[0] === 'p') {
      const pid = Number(value.slice(1));
      return (thread) => threads[thread][0] === pid;
    }
    const only = Number(value.slice(1));
    return (thread) => thread === only;
  }
  function requestKept() {
    const route = routeSelect ? routeSelect.value : '*';
    const trace = traceInput ? traceInput.value.trim().toLowerCase() : '';
    if (route === '*' && !trace) return () => true;
    const kept = requests.map(([of, id]) => (route === '*' || of === route) && (!trace || id.startsWith(trace)));
    return (request) => kept[request || 0];
  }
  function weightOf(stack) {
    if (mode === 'cpu' || mode === 'diff') return stack[1];
    if (view === 'cpu') return stack[1];
    if (view === 'off') return stack[2];
    return stack[1] + stack[2];
  }
  function newNode(fn, label, parent) {
    return { fn, label, parent, value: 0, base: 0, self: 0, children: new Map() };
  }
  let root = null;
  let focus = null;
  function build() {
    const keep = selected();
    const keepRequest = requestKept();
    const tree = newNode(-1, 'all', null);
    for (const stack of stacks) {
      if (!keep(stack[0]) || !keepRequest(stack[4])) continue;
      const value = weightOf(stack);
      const base = mode === 'diff' ? stack[2] : 0;
      if (!value && !base) continue;
      const [pid, , comm] = threads[stack[0]];
      let node = tree;
      node.value += value; node.base += base;
      const key = 'p' + pid;
      let next = node.children.get(key);
      if (!next) { next = newNode(-1, comm + ' (pid ' + pid + ')', node); node.children.set(key, next); }
      node = next;
      node.value += value; node.base += base;
      for (const fn of stack[3]) {
        next = node.children.get(fn);
        if (!next) { next = newNode(fn, functions[fn][0], node); node.children.set(fn, next); }
        node = next;
        node.value += value; node.base += base;
      }
      node.self += value;
    }
    return tree;
  }

  // --- Drawing -------------------------------------------------------------------
  let boxes = []; // per depth: [x, width, node], by x
  const context = canvas.getContext('2d');
  function colourOf(node) {
    if (mode === 'diff') {
      const scale = root.value || 1;
      const delta = (node.value - node.base) / scale;
      if (Math.abs(delta) < 0.0005) return '#dddddd';
      const strength = Math.min(1, Math.abs(delta) * 20);
      const fade = Math.round(221 - 140 * strength);
      return delta > 0 ? 'rgb(227,' + fade + ',' + Math.round(fade * 0.8) + ')' : 'rgb(' + Math.round(fade * 0.8) + ',' + fade + ',227)';
    }
    if (node.fn < 0) return '#e0e0e0';
    return COLORS[functions[node.fn][4]] || COLORS.unknown;
  }
  function sortedChildren(node) {
    return [...node.children.values()].sort((a, b) => b.value - a.value || (a.label < b.label ? -1 : 1));
  }
  function layout() {
    boxes = [];
    const width = graphBox.clientWidth || 1200;
    const path = [];
    for (let node = focus; node; node = node.parent) path.unshift(node);
    path.forEach((node, depth) => { boxes[depth] = [[0, width, node]]; });
    const queue = [[focus, 0, width, path.length - 1]];
    while (queue.length) {
      const [node, x, w, depth] = queue.pop();
      let cursor = x;
      const total = node.value || 1;
      for (const child of sortedChildren(node)) {
        const childWidth = w * child.value / total;
        if (childWidth >= 0.4) {
          (boxes[depth + 1] = boxes[depth + 1] || []).push([cursor, childWidth, child]);
          queue.push([child, cursor, childWidth, depth + 1]);
        }
        cursor += childWidth;
      }
    }
    for (const row of boxes) row.sort((a, b) => a[0] - b[0]);
  }
  let pattern = '';
  function matches(node) {
    return pattern !== '' && node.fn >= 0 && functions[node.fn][0].toLowerCase().includes(pattern);
  }
  function paint() {
    const ratio = window.devicePixelRatio || 1;
    const width = graphBox.clientWidth || 1200;
    const height = Math.max(1, boxes.length) * ROW;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.font = '12px system-ui, sans-serif';
    context.textBaseline = 'middle';
    let painted = 0;
    boxes.forEach((row, depth) => {
      painted += row.length;
      for (const [x, w, node] of row) {
        context.fillStyle = matches(node) ? MATCH_COLOR : colourOf(node);
        context.fillRect(x, depth * ROW, Math.max(w - 0.5, 0.5), ROW - 1);
        if (w > 28) {
          const fits = Math.floor((w - 6) / 6.6);
          const text = node.label.length > fits ? node.label.slice(0, Math.max(fits - 1, 1)) + '…' : node.label;
          context.fillStyle = '#000';
          context.fillText(text, x + 3, depth * ROW + ROW / 2);
        }
      }
    });
    canvas.setAttribute('data-boxes', String(painted));
  }
  function hit(event) {
    const bounds = canvas.getBoundingClientRect();
    const x = event.clientX - bounds.left;
    const row = boxes[Math.floor((event.clientY - bounds.top) / ROW)];
    if (!row) return null;
    let low = 0, high = row.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const [start, width, node] = row[middle];
      if (x < start) high = middle - 1;
      else if (x >= start + width) low = middle + 1;
      else return node;
    }
    return null;
  }
  function describe(node) {
    const lines = [node.label];
    if (node.fn >= 0) {
      const where = place(node.fn);
      if (where) lines.push(where);
      lines.push(TIER_NAMES[functions[node.fn][4]] || '');
    }
    if (mode === 'diff') {
      lines.push('new ' + amount(node.value) + ', base ' + amount(node.base) + ' (' +
        (node.value >= node.base ? '+' : '') + percent(node.value - node.base, root.value) + ' of the new total)');
    } else {
      lines.push(amount(node.value) + ' (' + percent(node.value, root.value) + '), self ' + amount(node.self));
    }
    return lines.filter(Boolean).join('\n');
  }
  canvas.addEventListener('mousemove', (event) => {
    const node = hit(event);
    if (!node) { tooltip.hidden = true; return; }
    tooltip.textContent = describe(node);
    tooltip.hidden = false;
    const bounds = graphBox.getBoundingClientRect();
    tooltip.style.left = Math.min(event.clientX - bounds.left + 12, bounds.width - 320) + 'px';
    tooltip.style.top = (event.clientY - bounds.top + 14) + 'px';
  });
  canvas.addEventListener('mouseleave', () => { tooltip.hidden = true; });
  canvas.addEventListener('click', (event) => {
    const node = hit(event);
    if (node) { focus = node; redraw(); }
  });
  reset.addEventListener('click', () => { focus = root; redraw(); });

  function matchedShare() {
    if (!pattern) return '';
    let total = 0;
    const walk = (node) => {
      if (matches(node)) { total += node.value; return; }
      for (const child of node.children.values()) walk(child);
    };
    walk(root);
    return 'matched: ' + percent(total, root.value);
  }
  search.addEventListener('input', () => {
    pattern = search.value.trim().toLowerCase();
    matched.textContent = matchedShare();
    paint();
    fillTable();
  });

  // --- The functions ----------------------------------------------------------------
  // Self time first: the table starts where the time is spent, not at
  // _start and the event loop that every stack passes through.
  let sortColumn = mode === 'diff' ? 'total' : 'self';
  const codeFilter = element('select', { id: 'code-filter', 'aria-label': 'which functions' },
    element('option', { value: 'all' }, 'all functions'),
    element('option', { value: 'jit' }, 'JavaScript and other JIT code only'));
  codeFilter.addEventListener('change', () => fillTable());
  tableNote.before(codeFilter);
  const columns = mode === 'diff'
    ? [['name', 'function'], ['place', 'file:line'], ['tier', 'tier'], ['total', 'new'], ['base', 'base'], ['delta', 'change']]
    : [['name', 'function'], ['place', 'file:line'], ['tier', 'tier'], ['self', 'self'], ['selfShare', 'self %'],
      ['total', 'total'], ['totalShare', 'total %']];
  const headRow = element('tr', {});
  for (const [key, label] of columns) {
    const cell = element('th', { 'data-column': key }, label);
    cell.addEventListener('click', () => { sortColumn = key; fillTable(); });
    headRow.append(cell);
  }
  tableHead.append(headRow);
  let rows = [];
  function tally() {
    const keep = selected();
    const keepRequest = requestKept();
    const self = new Float64Array(functions.length);
    const total = new Float64Array(functions.length);
    const base = new Float64Array(functions.length);
    const stamp = new Int32Array(functions.length).fill(-1);
    stacks.forEach((stack, index) => {
      if (!keep(stack[0]) || !keepRequest(stack[4])) return;
      const value = weightOf(stack);
      const baseValue = mode === 'diff' ? stack[2] : 0;
      if (!value && !baseValue) return;
      const path = stack[3];
      let leaf = path.length - 1;
      while (leaf > 0 && !isCode(path[leaf])) leaf--;
      if (path.length) self[path[leaf]] += value;
      for (const fn of path) {
        if (stamp[fn] === index) continue; // recursion: counted once per stack
        stamp[fn] = index;
        total[fn] += value;
        base[fn] += baseValue;
      }
    });
    rows = [];
    for (let fn = 0; fn < functions.length; fn++) {
      if (total[fn] || base[fn]) rows.push({ fn, self: self[fn], total: total[fn], base: base[fn] });
    }
  }
  function fillTable() {
    const whole = root.value || 1;
    const key = { selfShare: 'self', totalShare: 'total', delta: 'delta' }[sortColumn] || sortColumn;
    const value = (row) => key === 'delta' ? Math.abs(row.total - row.base) : row[key];
    const jitOnly = codeFilter.value === 'jit';
    const shown = rows.filter((row) => (!pattern || functions[row.fn][0].toLowerCase().includes(pattern))
      && (!jitOnly || functions[row.fn][5] === 'jit'));
    if (key === 'name') shown.sort((a, b) => (functions[a.fn][0] < functions[b.fn][0] ? -1 : 1));
    else if (key === 'place') shown.sort((a, b) => (place(a.fn) < place(b.fn) ? -1 : 1));
    else if (key === 'tier') shown.sort((a, b) => (functions[a.fn][4] < functions[b.fn][4] ? -1 : 1));
    else shown.sort((a, b) => value(b) - value(a));
    const limit = 500;
    tableBody.replaceChildren();
    for (const row of shown.slice(0, limit)) {
      const [name, , , , category] = functions[row.fn];
      const swatch = element('span', { class: 'swatch', style: 'background:' + (COLORS[category] || COLORS.unknown) });
      const cells = [element('td', { class: 'name' }, swatch, name), element('td', {}, place(row.fn)),
        element('td', {}, TIER_NAMES[category] || category)];
      if (mode === 'diff') {
        cells.push(element('td', { class: 'number' }, amount(row.total)), element('td', { class: 'number' }, amount(row.base)),
          element('td', { class: 'number' }, (row.total >= row.base ? '+' : '') + percent(row.total - row.base, whole)));
      } else {
        cells.push(element('td', { class: 'number' }, amount(row.self)), element('td', { class: 'number' }, percent(row.self, whole)),
          element('td', { class: 'number' }, amount(row.total)), element('td', { class: 'number' }, percent(row.total, whole)));
      }
      const line = element('tr', {}, ...cells);
      line.addEventListener('click', () => { search.value = name; search.dispatchEvent(new Event('input')); });
      tableBody.append(line);
    }
    tableNote.textContent = shown.length > limit
      ? 'the ' + limit + ' first of ' + shown.length.toLocaleString('en') + ' functions; search to find others'
      : shown.length.toLocaleString('en') + ' functions';
  }

  function redraw() { layout(); paint(); }
  function rebuild() {
    root = build();
    focus = root;
    tally();
    matched.textContent = matchedShare();
    redraw();
    fillTable();
  }
  window.addEventListener('resize', redraw);
  // A link can open the page on a selection, a search and the table's
  // functions, a route and a trace: #select=p1234&search=leaf&code=jit&route=/checkout&trace=4bf9
  const wanted = new URLSearchParams(location.hash.slice(1));
  if (routeSelect && wanted.has('route') && [...routeSelect.options].some((option) => option.value === wanted.get('route'))) {
    routeSelect.value = wanted.get('route');
  }
  if (traceInput && wanted.has('trace')) traceInput.value = wanted.get('trace');
  if (wanted.get('code') === 'jit') codeFilter.value = 'jit';
  if (wanted.has('select') && [...selection.options].some((option) => option.value === wanted.get('select'))) {
    selection.value = wanted.get('select');
  }
  rebuild();
  if (wanted.has('search')) {
    search.value = wanted.get('search');
    search.dispatchEvent(new Event('input'));
  }
  document.body.setAttribute('data-ready', 'yes');
  document.body.setAttribute('data-open-ms', String(Math.round(performance.now() - opened)));
})();
