"""One step of a ringtape profile timeline (the profiler's trace.json) as a standalone SVG.

    python3 bench/trace_picture.py TRACE.json [-o OUT.svg] [--step N] [--width PX]

Draws the time window of step N (default: the first "step" slice; N is the number in its
name, "step 5") and a small margin:
  - a title line, a legend, a time axis in ms from the step's start (dashed: its edges);
  - one lane per track (pid, tid) with slices in the window, labelled with its thread name,
    under a heading per process (host: "main" first, then loader, communication; GPU streams).
    Slices stack by nesting depth, from containment per track (step > phase > module > op);
    those narrower than --min-px are left out, names are drawn where they fit (shortened
    otherwise), and each slice has a tooltip (<title>) with its duration and arguments;
  - colours by category; modules by kind (conv, bn, layer ...), ops and kernels by name (conv2d
    has one colour everywhere, "X backward" a darker shade of X's);
  - the memory counters ("memory cpu", "memory cuda:0") as step lines: allocated MiB filled,
    reserved MiB a line, with a small y axis.
Flow events ("s"/"f") are ignored. Exit code 2 with a message for input it cannot draw.
"""
import argparse
import colorsys
import json
import math
import os
import re
import sys
import zlib
from xml.sax.saxutils import escape

ROW = 15          # px per nesting level
COUNTER_H = 60    # px per counter plot
PHASE_COLOURS = {"data": "#c7e9c0", "forward": "#c6dbef", "backward": "#fdd0a2",
                 "optimizer": "#dadaeb"}
FIXED = {"step": "#d9d9d9", "range": "#f6d55c", "memcpy": "#e377c2", "memset": "#c5b0d5"}
ALLOC, RESERVED = "#65788a", "#e45756"
STYLE = ("text{font-family:DejaVu Sans,Arial,sans-serif;font-size:10px;fill:#111}"
         ".a{fill:#555}.l{font-size:11px}.h{font-size:11px;font-weight:bold}"
         ".ti{font-size:14px;font-weight:bold}.grid{stroke:#e4e4e4}.axis{stroke:#555}"
         ".edge{stroke:#666;stroke-dasharray:3,3}.sep{stroke:#bbb}"
         "rect{stroke:#fff;stroke-width:0.4}.n{stroke:none}")
# Hues come from a hash of the name; this salt gives ResNet's common ops (conv2d, the batch
# norms, add, copy, max_pool2d, sgd_step) hues at least 30 degrees apart.
SALT = "3355"


class InputError(Exception):
    pass


def colour(e):
    """Fill colour of a slice: by category; phases, modules, ops and kernels by name."""
    def hsl(key, s, l):
        h = (zlib.crc32((SALT + key).encode()) * 0.618034) % 1.0  # stable across runs
        return "#%02x%02x%02x" % tuple(round(c * 255) for c in colorsys.hls_to_rgb(h, l, s))
    cat, name = e.get("cat", ""), e["name"]
    if cat == "phase":
        return PHASE_COLOURS.get(name) or hsl(name, 0.45, 0.75)
    if cat == "module":  # by kind: "layer1.0.conv2" -> "conv"; "layer1.0" -> "block"
        return hsl(re.sub(r"[\d_]+$", "", name.split(".")[-1]) or "block", 0.22, 0.84)
    if cat in ("op", "kernel"):
        base, backward = re.subn(r" backward$", "", name)
        return hsl(base, 0.55, 0.56 if backward else 0.70)
    return FIXED.get(cat, "#bbbbbb")


def load(path):
    """The trace's metadata, slices (with a number ts and dur) and counters."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}")
    if not text.strip():
        raise InputError(f"{path} is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not JSON: {err}")
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(f"{path} has no traceEvents list")
    out = []
    for e in events:  # flows ("s", "f") and the rest are not drawn
        if isinstance(e, dict) and (e.get("ph") == "M" or e.get("ph") in ("X", "C") and
                                    isinstance(e.get("ts"), (int, float))):
            e = {"name": "", "pid": 0, "tid": 0, **e}
            e["name"] = str(e["name"])
            e["args"] = e.get("args") if isinstance(e.get("args"), dict) else {}
            e["dur"] = max(float(e.get("dur") or 0), 0.0)
            out.append(e)
    return out


def step_number(e):
    m = re.search(r"(\d+)\s*$", e["name"])
    return int(m.group(1)) if m else None


def pick_step(events, path, n):
    steps = sorted((e for e in events if e["ph"] == "X" and e.get("cat") == "step"),
                   key=lambda e: (e["ts"], e["pid"]))
    if not steps:
        raise InputError(f"{path} has no 'step' slices (is it a ringtape trace.json?)")
    step = steps[0] if n is None else next((e for e in steps if step_number(e) == n), None)
    if step is None:
        have = sorted({step_number(e) for e in steps} - {None})
        raise InputError(f"step {n} is not in {path}; its steps: {', '.join(map(str, have))}")
    if step["dur"] <= 0:
        raise InputError(f"{step['name']} in {path} has no duration")
    return step


def with_depths(slices):
    """(slice, depth) pairs: depth = how many slices of the same track contain it."""
    out, ends = [], []
    for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        while ends and ends[-1] <= e["ts"] + 1e-3:
            ends.pop()
        out.append((e, len(ends)))
        ends.append(e["ts"] + e["dur"])
    return out


def nice(x, steps=(1, 2, 5, 10)):
    """The 1-2-5 number (or one of steps) nearest above x."""
    p = 10 ** math.floor(math.log10(x))
    return next(m * p for m in steps if m * p >= x * 0.999)


def text_w(s):
    """Width in px of s at 10 px, about (DejaVu Sans's advances, rounded up)."""
    return sum(3.4 if c in "ijlft.,:;' ()[]" else 9.7 if c in "mwMW\u2026" else
               7.2 if c.isupper() else 6.3 for c in s)


def fit(name, px):
    """What of name fits in px: all of it, its last dotted part ("layer2.0.downsample" ->
    "downsample"), or the start of that and an ellipsis; "" when not even three letters fit."""
    if text_w(name) <= px - 4:
        return name
    name = name.rsplit(".", 1)[-1]
    for n in range(len(name), 2, -1):
        s = name if n == len(name) else name[:n] + "\u2026"
        if text_w(s) <= px - 4:
            return s
    return ""


def tooltip(e):
    a = e["args"]
    parts = [f"{e['name']} ({e.get('cat', '')}): {e['dur'] / 1000:.3f} ms"]
    parts += [f"{k}: {a[k]}" for k in ("layer", "inputs", "phase") if a.get(k)]
    if a.get("flops") and e["dur"]:
        parts.append(f"{a['flops'] / e['dur'] / 1e3:.1f} GFLOP/s")
    return "\n".join(parts)


class Svg:
    """SVG elements in drawing order."""

    def __init__(self):
        self.parts = []

    def text(self, x, y, s, cls=None, anchor=None):
        c, a = f' class="{cls}"' if cls else "", f' text-anchor="{anchor}"' if anchor else ""
        self.parts.append(f'<text{c} x="{x:.1f}" y="{y:.1f}"{a}>{escape(s)}</text>')

    def line(self, x1, y1, x2, y2, cls):
        self.parts.append(f'<line class="{cls}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" '
                          f'y2="{y2:.1f}"/>')

    def heading(self, y, s, width):
        self.text(6, y + 11, s, "h")
        self.line(6, y + 14, width - 6, y + 14, "sep")


def lanes(svg, slices, names, procs, X, width, min_px):
    """The tracks' slices from y = 0, under a heading per process; returns the height, the
    colour of each category and the time of each op (kernel) name."""
    y, pid, cats, op_time = 0, None, {}, {}
    for k in sorted(slices, key=lambda k: (k[0], names[k] != "main", k[1])):
        if k[0] != pid:
            pid = k[0]
            svg.heading(y + 6, procs.get(pid, f"process {pid}"), width)
            y += 24
        placed = with_depths(slices[k])
        svg.text(12, y + 11, names[k], "l")
        for e, d in placed:
            cat = e.get("cat", "")
            cats.setdefault(cat if cat != "phase" else "phase " + e["name"], colour(e))
            if cat in ("op", "kernel"):
                op_time[e["name"]] = op_time.get(e["name"], 0) + e["dur"]
            xa, xb = X(e["ts"]), X(e["ts"] + e["dur"])
            if xb - xa < min_px:
                continue
            ry, thin = y + d * ROW, ' class="n"' if xb - xa < 3 else ""  # n: no outline
            svg.parts.append(f'<g><title>{escape(tooltip(e))}</title><rect{thin} '
                             f'x="{xa:.1f}" y="{ry}" width="{max(xb - xa, 1):.1f}" '
                             f'height="{ROW - 2}" fill="{colour(e)}"/></g>')
            if fit(e["name"], xb - xa):
                svg.text(xa + 2, ry + ROW - 5, fit(e["name"], xb - xa))
        y += (max(d for _, d in placed) + 1) * ROW + 4
    return y, cats, op_time


def counter_plots(svg, y, counters, procs, X, t0, t1, width):
    """Step-line plots of the memory counters from y; returns the new y and whether any."""
    plots = [(k, sorted(v, key=lambda c: c["ts"])) for k, v in sorted(counters.items())
             if any(t0 <= c["ts"] <= t1 for c in v)]
    if plots:
        svg.heading(y + 6, "memory (MiB)", width)
        y += 28
    xa, xb = X(t0), X(t1)
    for (pid, name), samples in plots:
        shown = [c for c in samples if c["ts"] < t0][-1:] + \
            [c for c in samples if t0 <= c["ts"] <= t1]  # the value at t0, then changes
        vals = {k: [float(c["args"].get(k, 0)) for c in shown]
                for k in ("allocated MiB", "reserved MiB")}
        top = nice(max(vals["allocated MiB"] + vals["reserved MiB"] + [1e-3]),
                   (1, 1.2, 1.6, 2, 2.5, 3, 4, 5, 6, 8, 10))
        Y = lambda v: y + COUNTER_H - v / top * COUNTER_H
        many = len({k[0] for k, _ in plots}) > 1
        svg.text(12, y + COUNTER_H / 2 + 4, f"{name}, {procs.get(pid, pid)}" if many else name,
                 "l")
        for v in (0, top / 2, top):
            svg.text(xa - 4, Y(v) + 3.5, f"{v:.3g}" if v < 100 else f"{v:.0f}", "a", "end")
            svg.line(xa, Y(v), xb, Y(v), "grid")
        for key, line, fill in (("allocated MiB", ALLOC, f'"{ALLOC}" fill-opacity="0.35"'),
                                ("reserved MiB", RESERVED, '"none"')):
            pts = list(zip((c["ts"] for c in shown), vals[key]))
            d = f"M{X(pts[0][0]):.1f},{Y(pts[0][1]):.1f}" + "".join(
                f"H{X(ts):.1f}V{Y(v):.1f}" for ts, v in pts[1:]) + f"H{xb:.1f}"
            if key == "allocated MiB":  # close the area along the x axis
                d += f"V{Y(0):.1f}H{X(pts[0][0]):.1f}Z"
            svg.parts.append(f'<path d="{d}" stroke="{line}" fill={fill}/>')
        y += COUNTER_H + 18
    return y, bool(plots)


def legend(svg, items, first_by_name, width):
    """Swatches in rows from y = 40 (the names' colours after "by name:"); returns the last
    row's y."""
    x, y = 10.0, 40
    for n, c in items:
        pre = 52 if n == first_by_name else 0
        w = pre + 16 + text_w(n) + 12
        if x + w > width - 10:
            x, y = 10.0, y + 16
        if pre:
            svg.text(x, y, "by name:", "a")
        svg.parts.append(f'<rect x="{x + pre:.1f}" y="{y - 9}" width="11" height="11" '
                         f'fill="{c}"/>')
        svg.text(x + pre + 15, y, n)
        x += w
    return y


def time_axis(svg, y, bottom, step, X, t0, t1):
    """Ticks at y (1-2-5, ms from the step's start); grid lines and the step's edges down to
    bottom."""
    tick = nice((t1 - t0) / 1000 / 12)
    digits, i = max(0, -math.floor(math.log10(tick))), math.ceil((t0 - step["ts"]) / 1000 / tick)
    while step["ts"] + i * tick * 1000 <= t1:
        tx = X(step["ts"] + i * tick * 1000)
        svg.line(tx, y, tx, bottom, "grid")
        svg.text(tx, y - 4, f"{i * tick:.{digits}f}", "a", "middle")
        i += 1
    svg.text(X(t0) - 4, y - 4, "ms", "a", "end")
    svg.line(X(t0), y, X(t1), y, "axis")
    for edge in (step["ts"], step["ts"] + step["dur"]):
        svg.line(X(edge), y, X(edge), bottom, "edge")


def draw(events, step, width, min_px):
    """The SVG document of step's window."""
    t0, t1 = step["ts"] - 0.015 * step["dur"], step["ts"] + 1.015 * step["dur"]
    procs, threads, slices, counters = {}, {}, {}, {}
    for e in events:
        key = (e["pid"], e["tid"])
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = str(e["args"].get("name", ""))
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[key] = str(e["args"].get("name", ""))
        elif e["ph"] == "X" and e["ts"] < t1 and e["ts"] + e["dur"] > t0:
            slices.setdefault(key, []).append(e)
        elif e["ph"] == "C":
            counters.setdefault((e["pid"], e["name"]), []).append(e)
    plain = {k: threads.get(k, f"thread {k[1]}") for k in slices}
    names = {k: f"{n} (tid {k[1]})"  # two "loader" threads in one process: which is which
             if [j for j in plain if j[0] == k[0] and plain[j] == n][1:] else n
             for k, n in plain.items()}
    x0 = 10 + max([12 + 1.1 * text_w(n) for n in names.values()] +  # labels are 11 px
                  [6 + 1.2 * text_w(p) for p in procs.values()] +
                  [48 + 1.1 * text_w(n) for _, n in counters])  # and the y axis' numbers
    X = lambda ts: x0 + (min(max(ts, t0), t1) - t0) / (t1 - t0) * (width - x0 - 14)

    body, head = Svg(), Svg()
    y, cats, op_time = lanes(body, slices, names, procs, X, width, min_px)
    y, memory = counter_plots(body, y, counters, procs, X, t0, t1, width)
    if memory:
        cats["memory allocated"], cats["memory reserved"] = ALLOC, RESERVED
    by_name = sorted(op_time, key=op_time.get, reverse=True)[:10]  # most time first
    items = [(n, c) for n, c in cats.items() if n not in ("op", "kernel")] + \
        [(n, colour({"cat": "op", "name": n})) for n in by_name]
    axis_y = legend(head, items, by_name[0] if by_name else None, width) + 34
    time_axis(head, axis_y, axis_y + 8 + y, step, X, t0, t1)
    title = (f"ringtape trace: step {step_number(step)}, {step['dur'] / 1000:.1f} ms, "
             f"{procs.get(step['pid'], 'process %s' % step['pid'])}")
    height = round(axis_y + y + 16)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">', f"<style>{STYLE}</style>",
        f'<rect width="{width}" height="{height}" fill="#fff" stroke="none"/>',
        f'<text class="ti" x="10" y="20">{escape(title)}</text>', *head.parts,
        f'<g transform="translate(0,{axis_y + 4})">', *body.parts, "</g>", "</svg>", ""])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="trace.json written by ringtape's profiler")
    ap.add_argument("-o", "--output", help="the SVG (default: trace_step<N>.svg beside TRACE)")
    ap.add_argument("--step", type=int, help="step number (default: the first step)")
    ap.add_argument("--width", type=int, default=1600, help="picture width in px (1600)")
    ap.add_argument("--min-px", type=float, default=0.5,
                    help="leave out slices narrower than this (0.5 px)")
    args = ap.parse_args()
    if args.width < 400:
        ap.error("--width must be at least 400")
    try:
        events = load(args.trace)
        step = pick_step(events, args.trace, args.step)
        svg = draw(events, step, args.width, args.min_px)
    except InputError as err:
        print(f"trace_picture: {err}", file=sys.stderr)
        return 2
    out = args.output or os.path.join(os.path.dirname(args.trace),
                                      f"trace_step{step_number(step)}.svg")
    with open(out, "w") as f:
        f.write(svg)
    print(f"wrote {out} ({len(svg.encode()) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
