"""A self-contained interactive flame graph (hover, click to zoom, search),
laid out like flamegraph.pl and inferno output."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from html import escape as _escape
from typing import TextIO

from profiler.model.profile import Frame, FrameKind, Profile, microseconds

IMAGE_WIDTH = 1200
FRAME_HEIGHT = 16
FONT_SIZE = 12
FONT_WIDTH = 0.59
X_PAD = 10
TOP_PAD = FONT_SIZE * 3
BOTTOM_PAD = FONT_SIZE * 2 + 10
MIN_WIDTH_PX = 0.1

# Characters XML 1.0 does not allow at all, even escaped: a frame name with
# one (a control byte in a JIT name) would make the whole file unreadable.
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(text: str) -> str:
    """Text for an XML element or attribute: escaped, characters XML cannot
    carry replaced by U+FFFD."""
    return _escape(_NOT_XML.sub("\ufffd", text))


@dataclass
class _Node:
    label: str
    frame: Frame | None
    count: int = 0
    off_cpu: int = 0  # --off-cpu: of count, the time off the CPU
    children: dict[tuple[str, str, bool], _Node] = field(default_factory=dict)
    tiers: Counter[str] = field(default_factory=Counter)
    lines: Counter[int] = field(default_factory=Counter)  # exact source lines, where known


@dataclass(frozen=True)
class _Box:
    label: str
    tooltip: str
    start: int  # in samples
    width: int  # in samples
    depth: int
    fill: str


def _colour(label: str, frame: Frame | None) -> str:
    digest = hashlib.md5(label.encode("utf-8", "replace")).digest()  # noqa: S324  (colour only)
    vary = digest[0] / 255, digest[1] / 255
    if frame is None:
        return "rgb(200,200,200)"
    if frame.kind is FrameKind.UNKNOWN:
        return f"rgb({int(170 + 30 * vary[0])},{int(170 + 30 * vary[0])},{int(170 + 30 * vary[0])})"
    if frame.kind is FrameKind.KERNEL:
        return f"rgb({int(200 + 55 * vary[0])},{int(120 + 50 * vary[1])},40)"
    if frame.kind is FrameKind.ASYNC:  # violet: awaiting, not on the stack
        return f"rgb({int(170 + 40 * vary[0])},{int(130 + 40 * vary[1])},{int(210 + 40 * vary[0])})"
    if frame.kind is FrameKind.JIT and frame.inlined:  # teal apart from the green of compiled functions
        return f"rgb({int(40 + 40 * vary[0])},{int(160 + 50 * vary[1])},{int(190 + 50 * vary[0])})"
    if frame.kind is FrameKind.JIT:
        return f"rgb({int(50 + 60 * vary[0])},{int(170 + 60 * vary[1])},{int(50 + 60 * vary[0])})"
    if frame.inlined:  # a native function the compiler inlined: paler than the functions around it
        return f"rgb({int(235 + 20 * vary[0])},{int(190 + 40 * vary[1])},{int(120 + 40 * vary[0])})"
    return f"rgb({int(205 + 50 * vary[0])},{int(50 + 180 * vary[1])},{int(50 * vary[0])})"


def _off_cpu_colour(label: str) -> str:
    """Time off the CPU: blues and violets, apart from the warm colours of CPU time."""
    digest = hashlib.md5(label.encode("utf-8", "replace")).digest()  # noqa: S324  (colour only)
    vary = digest[0] / 255, digest[1] / 255
    return f"rgb({int(60 + 70 * vary[0])},{int(110 + 70 * vary[1])},{int(210 + 45 * vary[0])})"


def _tree(profile: Profile) -> _Node:
    root = _Node("all", None)
    counts = profile.stack_counts()
    off_cpu: dict[tuple[str, tuple[int, ...]], int] = {}
    if profile.info.off_cpu:
        off_cpu = {key: microseconds(weight.off_cpu_ns) for key, weight in profile.stack_weights().items()}
    for stack_key, count in counts.items():
        comm, frame_ids = stack_key
        waited = off_cpu.get(stack_key, 0)
        root.count += count
        root.off_cpu += waited
        node = root.children.setdefault(("process", comm, False), _Node(comm, None))
        node.count += count
        node.off_cpu += waited
        for frame_id in frame_ids:
            frame = profile.frames[frame_id]
            # Merged by what the box shows: one function in several tiers
            # (interpreted, then optimised code) is one box, as in folded output.
            key = (frame.kind.value, frame.name, frame.inlined)
            node = node.children.get(key) or node.children.setdefault(key, _Node(frame.name, frame))
            node.count += count
            node.off_cpu += waited
            if frame.tier:
                node.tiers[frame.tier] += count
            if frame.line_exact:
                node.lines[frame.line] += count
    return root


def _details(node: _Node) -> list[str]:
    """Kind, tier(s), inlining, module, full path and hottest line, for the tooltip."""
    frame = node.frame
    assert frame is not None
    parts = [frame.kind.value]
    if node.tiers:
        parts.append("/".join(tier for tier, _ in node.tiers.most_common()))
    if frame.inlined:
        parts.append("inlined")
    if frame.module:
        parts.append(frame.module)
    if frame.file:
        parts.append(f"{frame.file}:{frame.line}" if frame.line and not node.lines else frame.file)
    if node.lines:
        line, count = node.lines.most_common(1)[0]
        parts.append(f"hottest line {line} ({100 * count / node.count:.0f}%)")
    return parts


@dataclass(frozen=True)
class Baseline:
    """For a differential flame graph: the older profile's tree, its counts
    scaled by `scale` to be comparable with the new one's."""

    root: _Node
    scale: float


def _diff_colour(new: float, old: float) -> str:
    """Red for growth, blue for shrinkage, white for level (as difffolded)."""
    change = (new - old) / max(new, old, 1e-9)
    strength = int(min(abs(change), 1.0) * 200)
    if change > 0:
        return f"rgb(255,{255 - strength},{255 - strength})"
    return f"rgb({255 - strength},{255 - strength},255)"


def _layout(root: _Node, total: int, baseline: Baseline | None = None, unit: str = "samples") -> list[_Box]:
    boxes: list[_Box] = []
    min_samples = total * MIN_WIDTH_PX / (IMAGE_WIDTH - 2 * X_PAD)
    stack: list[tuple[_Node, _Node | None, int, int]] = [(root, baseline.root if baseline else None, 0, 0)]
    while stack:
        node, old, start, depth = stack.pop()
        if node.count < min_samples:
            continue
        share = 100.0 * node.count / total if total else 0.0
        detail = ""
        if node.frame is not None:
            detail = " [" + ", ".join(_details(node)) + "]"
        waited = f", {100.0 * node.off_cpu / node.count:.0f}% off-CPU" if node.off_cpu and node.count else ""
        tooltip = f"{node.label}{detail} ({node.count:,} {unit}{waited}, {share:.2f}%)"
        # Mostly off the CPU: cool colours (the whole of a wait's own frames).
        off_cpu = node.off_cpu * 2 > node.count or (node.frame is not None and node.frame.kind is FrameKind.WAIT)
        fill = _off_cpu_colour(node.label) if off_cpu else _colour(node.label, node.frame)
        if baseline is not None:
            before = (old.count if old is not None else 0) * baseline.scale
            change = (node.count - before) / before * 100 if before else float("inf")
            tooltip = f"{node.label}{detail} (base {before:,.0f} → new {node.count:,} {unit}, {change:+.1f}%)"
            fill = _diff_colour(node.count, before)
        boxes.append(_Box(node.label, tooltip, start, node.count, depth, fill))
        cursor = start
        for key, child in sorted(node.children.items(), key=lambda item: item[1].label):
            stack.append((child, old.children.get(key) if old is not None else None, cursor, depth + 1))
            cursor += child.count
    return boxes


OFF_CPU_TITLE = "Flame Graph: time on and off the CPU (width: time; warm: on the CPU, blue: waiting)"


def write_svg(profile: Profile, stream: TextIO, title: str = "Flame Graph", baseline: Baseline | None = None) -> None:
    root = _tree(profile)
    total = max(root.count, 1)
    if profile.info.off_cpu and title == "Flame Graph":
        title = OFF_CPU_TITLE
    boxes = _layout(root, total, baseline, profile.weight_unit)
    max_depth = max((box.depth for box in boxes), default=0)
    height = TOP_PAD + BOTTOM_PAD + (max_depth + 1) * FRAME_HEIGHT
    subtitle = " ".join(profile.info.command) if profile.info.command else "pids " + ", ".join(map(str, profile.info.pids))
    stream.write('<?xml version="1.0" standalone="no"?>\n')
    stream.write(
        f'<svg version="1.1" width="{IMAGE_WIDTH}" height="{height}" onload="init(evt)" '
        f'viewBox="0 0 {IMAGE_WIDTH} {height}" xmlns="http://www.w3.org/2000/svg" '
        'xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:fg="http://github.com/jonhoo/inferno">\n'
    )
    stream.write(f"<!-- Flame graph written by jitprof: {profile.info.frequency_hz} Hz, {root.count} {profile.weight_unit} -->\n")
    stream.write(_STYLE)
    stream.write(
        f'<script type="text/ecmascript"><![CDATA[\nvar fontsize = {FONT_SIZE}; var fontwidth = {FONT_WIDTH}; var xpad = {X_PAD};\n{_SCRIPT}\n]]></script>\n'
    )
    stream.write(f'<rect x="0" y="0" width="100%" height="{height}" fill="url(#background)"/>\n')
    stream.write(f'<text id="title" x="50%" y="{FONT_SIZE * 2}">{escape(title)}</text>\n')
    stream.write(f'<text id="subtitle" x="50%" y="{FONT_SIZE * 3}">{escape(subtitle)}</text>\n')
    stream.write(f'<text id="details" x="{X_PAD}" y="{height - FONT_SIZE / 2 - 4}"> </text>\n')
    stream.write(f'<text id="unzoom" class="hide" x="{X_PAD}" y="{FONT_SIZE * 2}">Reset Zoom</text>\n')
    stream.write(f'<text id="search" x="{IMAGE_WIDTH - X_PAD - 100}" y="{FONT_SIZE * 2}">Search</text>\n')
    stream.write(f'<text id="ignorecase" x="{IMAGE_WIDTH - X_PAD - 16}" y="{FONT_SIZE * 2}">ic</text>\n')
    stream.write(f'<text id="matched" x="{IMAGE_WIDTH - X_PAD - 100}" y="{height - FONT_SIZE / 2 - 4}"> </text>\n')
    stream.write(f'<svg id="frames" x="{X_PAD}" width="{IMAGE_WIDTH - 2 * X_PAD}" total_samples="{root.count}">\n')
    for box in boxes:
        x = 100.0 * box.start / total
        width = 100.0 * box.width / total
        y = height - BOTTOM_PAD - (box.depth + 1) * FRAME_HEIGHT
        stream.write(
            f"<g><title>{escape(box.tooltip)}</title>"
            f'<rect x="{x:.4f}%" y="{y}" width="{width:.4f}%" height="{FRAME_HEIGHT - 1}" '
            f'fill="{box.fill}" fg:x="{box.start}" fg:w="{box.width}"/>'
            f'<text x="{x + 0.0833:.4f}%" y="{y + FRAME_HEIGHT - 4.5}">{escape(box.label)}</text></g>\n'
        )
    stream.write("</svg>\n</svg>\n")


_STYLE = """<defs><linearGradient id="background" y1="0" y2="1" x1="0" x2="0">
<stop stop-color="#eeeeee" offset="5%"/><stop stop-color="#eeeeb0" offset="95%"/></linearGradient></defs>
<style type="text/css">
text { font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }
#title { text-anchor: middle; font-size: 17px; }
#subtitle { text-anchor: middle; fill: rgb(100,100,100); }
#search, #ignorecase { opacity: 0.3; cursor: pointer; }
#search:hover, #search.show, #ignorecase:hover, #ignorecase.show { opacity: 1; }
#unzoom { cursor: pointer; }
#frames > *:hover { stroke: black; stroke-width: 0.5; cursor: pointer; }
.hide { display: none; }
.parent { opacity: 0.5; }
</style>
"""

_SCRIPT = r"""
var details, searchbtn, unzoombtn, matchedtxt, svg, searching, frames, total_samples, ignorecase = false, currentSearchTerm;
function init(evt) {
  details = document.getElementById("details").firstChild;
  searchbtn = document.getElementById("search");
  unzoombtn = document.getElementById("unzoom");
  matchedtxt = document.getElementById("matched");
  svg = document.getElementsByTagName("svg")[0];
  frames = document.getElementById("frames");
  total_samples = parseInt(frames.attributes.total_samples.value);
  searching = 0;
  var el = frames.children;
  for (var i = 0; i < el.length; i++) update_text(el[i]);
  var params = new URLSearchParams(window.location.search);
  if (params.get("s")) search(params.get("s"));
}
window.addEventListener("click", function(e) {
  var target = find_group(e.target);
  if (target) {
    if (target.nodeName == "a") { if (e.ctrlKey === false) return; e.preventDefault(); }
    if (target.classList.contains("parent")) unzoom();
    zoom(target);
  } else if (e.target.id == "unzoom") { unzoom(); }
  else if (e.target.id == "search") { search_prompt(); }
  else if (e.target.id == "ignorecase") { toggle_ignorecase(); }
}, false);
window.addEventListener("mouseover", function(e) {
  var target = find_group(e.target);
  if (target) details.nodeValue = "Function: " + g_to_text(target);
}, false);
window.addEventListener("mouseout", function(e) {
  if (find_group(e.target)) details.nodeValue = " ";
}, false);
window.addEventListener("keydown", function(e) {
  if (e.keyCode === 114 || (e.ctrlKey && e.keyCode === 70)) { e.preventDefault(); search_prompt(); }
  else if (e.ctrlKey && e.keyCode === 73) { e.preventDefault(); toggle_ignorecase(); }
}, false);
function find_child(node, selector) {
  var children = node.querySelectorAll(selector);
  if (children.length) return children[0];
}
function find_group(node) {
  var parent = node.parentElement;
  if (!parent) return;
  if (parent.id == "frames") return node;
  return find_group(parent);
}
function orig_save(e, attr, val) {
  if (e.attributes["fg:orig_" + attr] != undefined) return;
  if (e.attributes[attr] == undefined) return;
  if (val == undefined) val = e.attributes[attr].value;
  e.setAttribute("fg:orig_" + attr, val);
}
function orig_load(e, attr) {
  if (e.attributes["fg:orig_" + attr] == undefined) return;
  e.attributes[attr].value = e.attributes["fg:orig_" + attr].value;
  e.removeAttribute("fg:orig_" + attr);
}
function g_to_text(e) { return find_child(e, "title").firstChild.nodeValue; }
function g_to_func(e) { return g_to_text(e).replace(/ \[.*\] \(.*$/, "").replace(/ \(\d[\d,]* samples.*$/, ""); }
function update_text(e) {
  var r = find_child(e, "rect"), t = find_child(e, "text");
  var w = parseFloat(r.attributes.width.value) * frames.attributes.width.value / 100 - 3;
  var txt = g_to_func(e);
  t.attributes.x.value = format_percent(parseFloat(r.attributes.x.value) + (100 * 3 / frames.attributes.width.value));
  if (w < 2 * fontsize * fontwidth) { t.textContent = ""; return; }
  t.textContent = txt;
  if (t.getComputedTextLength && t.getComputedTextLength() < w) return;
  var fit = Math.floor(w / (fontsize * fontwidth));
  t.textContent = txt.length > fit ? txt.substring(0, Math.max(fit - 2, 0)) + ".." : txt;
}
function zoom_reset(e) {
  if (e.tagName == "rect") { orig_load(e, "x"); orig_load(e, "width"); }
  if (e.childNodes == undefined) return;
  for (var i = 0, c = e.childNodes; i < c.length; i++) zoom_reset(c[i]);
}
function zoom_child(e, x, zoomed_width_samples) {
  if (e.tagName == "text") {
    var parent_x = parseFloat(find_child(e.parentNode, "rect[x]").attributes.x.value);
    e.attributes.x.value = format_percent(parent_x + (100 * 3 / frames.attributes.width.value));
  } else if (e.tagName == "rect") {
    e.attributes.x.value = format_percent((e.attributes["fg:x"].value - x) / zoomed_width_samples);
    e.attributes.width.value = format_percent(e.attributes["fg:w"].value / zoomed_width_samples);
  }
  if (e.childNodes == undefined) return;
  for (var i = 0, c = e.childNodes; i < c.length; i++) zoom_child(c[i], x, zoomed_width_samples);
}
function zoom_parent(e) {
  if (e.attributes) {
    if (e.attributes.x != undefined) e.attributes.x.value = "0.0%";
    if (e.attributes.width != undefined) e.attributes.width.value = "100.0%";
  }
  if (e.childNodes == undefined) return;
  for (var i = 0, c = e.childNodes; i < c.length; i++) zoom_parent(c[i]);
}
function zoom(node) {
  var attr = find_child(node, "rect").attributes;
  var width = parseInt(attr["fg:w"].value);
  var xmin = parseInt(attr["fg:x"].value);
  var xmax = xmin + width;
  var ymin = parseFloat(attr.y.value);
  unzoombtn.classList.remove("hide");
  var el = frames.children;
  for (var i = 0; i < el.length; i++) {
    var e = el[i];
    var a = find_child(e, "rect").attributes;
    var ex = parseInt(a["fg:x"].value);
    var ew = parseInt(a["fg:w"].value);
    var upstack = parseFloat(a.y.value) > ymin;
    if (upstack) {
      if (ex <= xmin && (ex + ew) >= xmax) {
        e.classList.add("parent");
        zoom_parent(e);
        update_text(e);
      } else { e.classList.add("hide"); }
    } else {
      if (ex < xmin || ex >= xmax) { e.classList.add("hide"); }
      else { zoom_child(e, xmin, width / 100); update_text(e); }
    }
  }
  search();
}
function unzoom() {
  unzoombtn.classList.add("hide");
  var el = frames.children;
  for (var i = 0; i < el.length; i++) {
    el[i].classList.remove("parent");
    el[i].classList.remove("hide");
    zoom_reset(el[i]);
    update_text(el[i]);
  }
  search();
}
function toggle_ignorecase() {
  ignorecase = !ignorecase;
  document.getElementById("ignorecase").classList.toggle("show", ignorecase);
  search();
}
function reset_search() {
  var el = frames.children;
  for (var i = 0; i < el.length; i++) orig_load(find_child(el[i], "rect"), "fill");
}
function search_prompt() {
  if (!searching) {
    var term = prompt("Enter a search term (regexp allowed, eg: ^ext4_)" + (ignorecase ? ", ignoring case" : ""), "");
    if (term != null) search(term);
  } else {
    reset_search();
    searching = 0;
    currentSearchTerm = null;
    searchbtn.classList.remove("show");
    searchbtn.firstChild.nodeValue = "Search";
    matchedtxt.classList.add("hide");
    matchedtxt.firstChild.nodeValue = "";
  }
}
function format_percent(n) { return n.toFixed(4) + "%"; }
function search(term) {
  if (term) currentSearchTerm = term;
  if (currentSearchTerm === undefined || currentSearchTerm === null) return;
  var re = new RegExp(currentSearchTerm, ignorecase ? "i" : "");
  var el = frames.children;
  var matches = {};
  var maxwidth = 0;
  for (var i = 0; i < el.length; i++) {
    var e = el[i];
    if (e.classList.contains("hide") || e.classList.contains("parent")) continue;
    var func = g_to_func(e);
    var rect = find_child(e, "rect");
    if (func == null || rect == null) continue;
    var w = parseInt(rect.attributes["fg:w"].value);
    if (w > maxwidth) maxwidth = w;
    if (func.match(re)) {
      var x = parseInt(rect.attributes["fg:x"].value);
      orig_save(rect, "fill");
      rect.attributes.fill.value = "rgb(230,0,230)";
      if (matches[x] == undefined || matches[x] < w) matches[x] = w;
      searching = 1;
    }
  }
  if (!searching) return;
  searchbtn.classList.add("show");
  searchbtn.firstChild.nodeValue = "Reset Search";
  var count = 0, lastx = -1, lastw = 0, keys = [];
  for (var k in matches) if (matches.hasOwnProperty(k)) keys.push(k);
  keys.sort(function(a, b) { return a - b; });
  for (var j = 0; j < keys.length; j++) {
    var x = parseInt(keys[j]), w = matches[keys[j]];
    if (x >= lastx + lastw) { count += w; lastx = x; lastw = w; }
  }
  matchedtxt.classList.remove("hide");
  var pct = 100 * count / maxwidth;
  if (pct != 100) pct = pct.toFixed(1);
  matchedtxt.firstChild.nodeValue = "Matched: " + pct + "%";
}
"""


def baseline_from(profile: Profile, scale: float) -> Baseline:
    return Baseline(_tree(profile), scale)
