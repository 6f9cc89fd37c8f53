#!/usr/bin/env python3
"""The kernel lab against a GPU (docs/gpu-check.md, the `lab` tier of tools/gpu_check.sh).

Joins the lab's step report (bench/run_kernel_lab.sh's report.json: per hand-written kernel at
its launch site, the counters of one training step on the emulated GPU and the bound of an H200
at the target batch, docs/kernel-lab.md) with what a GPU measured for the same step:

  - each kernel's device time per step, from the profiler's CUPTI records of a few warm steps
    (trace.json written by `train_step_bench --profile-steps A:B`): the kernels of each step are
    summed per kernel name and the median over the steps is the measurement;
  - where Nsight Compute ran (`ncu --csv --metrics`, the metrics of NCU_METRICS), its counters
    of one step's hand-written kernels, against the lab's counters at the batch ncu ran.

and writes a Markdown table (kernel, calls per step, measured us per step against the lab's
bound, the limiter, and with ncu the sector efficiency, bank conflicts per request, DRAM bytes
and registers, lab against ncu), the totals, the kernels found on one side only, and a JSON.

  python3 tools/kernel_lab_compare.py --trace T.json [--report report.json] [--profile P.json]
      [--ncu ncu.csv --ncu-batch 4] [--batch 256] [--ncu-note TEXT] [--md OUT.md] [--json OUT.json]
  python3 tools/kernel_lab_compare.py --ncu-metrics     # the metrics to give ncu, comma-separated

Exit status: 0 written; 1 an input is missing or not what it should be (the message says which
and how to make it); 2 a bad command line. Python's standard library only: it runs on the GPU
machine, which has python3 but no Bazel. tools/kernel_lab_compare_test.py tests it.

How kernel names are joined: Note [Kernel names on both sides] below.
"""

import argparse
import csv
import json
import math
import os
import re
import statistics
import sys

FORMAT = "ringtape kernel lab comparison 1"
LAB_FORMAT = "ringtape kernel lab report 1"

# The ncu metric of each lab field (docs/gpu-check.md has the table with what differs).
NCU_METRICS = [
    ("time_ns", "gpu__time_duration.sum"),
    ("registers", "launch__registers_per_thread"),
    ("occupancy_pct", "sm__maximum_warps_per_active_cycle_pct"),
    ("gld_req", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    ("gld_sec", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    ("gst_req", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    ("gst_sec", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    ("gld_used_pct", "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"),
    ("gst_used_pct", "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct"),
    ("shld_req", "smsp__inst_executed_op_shared_ld.sum"),
    ("shst_req", "smsp__inst_executed_op_shared_st.sum"),
    ("shld_wave", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    ("shst_wave", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    ("shld_conf", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    ("shst_conf", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    ("dram_read", "dram__bytes_read.sum"),
    ("dram_write", "dram__bytes_write.sum"),
    ("lanes", "smsp__thread_inst_executed_per_inst_executed.ratio"),
]
FIELD_OF_METRIC = {m: f for f, m in NCU_METRICS}

# A GPU record belongs to the step whose host range holds its midpoint, within this margin: the
# records are shifted onto the host clock to within about a microsecond
# (Note [CUPTI timestamps] in profile/cupti_tracer.h), and each profiled step waits for the
# device at both ends (profile/session.h), so a step's kernels lie inside its range.
STEP_MARGIN_US = 5.0


class InputError(Exception):
    """An input file that is missing or not what it should be."""


# ---- kernel names ---------------------------------------------------------------------------------

# Note [Kernel names on both sides]
# The lab names a kernel as GCC prints its instantiation ("rt::cuda::{anonymous}::map_vec<...>",
# "(& rt::cuda::detail::channel_finalize)" where the launch deduced it), or by the demangled
# symbol; CUPTI and ncu give the demangled device symbol ("void rt::cuda::(anonymous
# namespace)::map_vec<...>(long, ...)"). Both are brought to one key as cuda_emu/ptxas.cc does
# for ptxas's reports (Note [Kernel names across compilers] there): the return type and the
# parameter list dropped, every namespace and class qualifier dropped (the kernel's and its
# template arguments'), const/volatile/struct/class and spaces dropped, the builtin integer types
# written one way ("short unsigned int" and "unsigned short" are ushort), integer suffixes and
# casts to integer types dropped ("256u" is 256), character literals as numbers, a lambda as
# lambda(its parameters). The key, "map_vec<__nv_bfloat16,BinaryFwd<Add,float>>", joins the two
# sides in three steps, each only where the previous left a kernel unmatched:
#   1. equal keys;
#   2. the same function and number of template arguments, each argument equal or, on either
#      side, a lambda or an enum value (the demangler writes "(Dist)0" where GCC names the
#      enumerator "normal": nothing maps one to the other), when this pairs exactly one kernel of
#      each side;
#   3. last resort: the same function name alone, when exactly one kernel of each side is left
#      with it (a spelling neither rule knows; the table marks such a row "name only").
# A kernel launched from several sites is one row of the lab per site: they are summed per key,
# as the device knows one kernel per symbol. Hand-written kernels on the device are those in
# namespace rt; the others (cuDNN's, cuBLAS's, NCCL's) are library kernels.


IDENT, NUMBER, CHARLIT, PUNCT, ANON, LAMBDA, GROUP = range(7)
CLOSE = {"<": ">", "(": ")", "[": "]", "{": "}"}


class Node:
    __slots__ = ("kind", "text", "open", "kids")

    def __init__(self, kind, text="", open_="", kids=None):
        self.kind, self.text, self.open, self.kids = kind, text, open_, kids or []


def _ident_char(c):
    return c.isalnum() or c in "_$"


def _matching(s, at):
    """Where the bracket opened at `at` closes, counting parentheses inside it; len(s) if never."""
    open_, close = s[at], CLOSE.get(s[at], ">")
    depth = parens = 0
    for i in range(at, len(s)):
        c = s[i]
        if open_ != "(" and c == "(":
            parens += 1
        elif open_ != "(" and c == ")":
            parens -= 1
        elif c == open_ and parens == 0:
            depth += 1
        elif c == close and parens == 0:
            depth -= 1
            if depth == 0:
                return i
    return len(s)


def _parse_seq(s, pos, close):
    out, n = [], len(s)
    while pos < n:
        c = s[pos]
        if c.isspace():
            pos += 1
        elif s.startswith("(anonymous namespace)", pos):
            out.append(Node(ANON, "{anon}"))
            pos += 21
        elif s.startswith("{anonymous}", pos):
            out.append(Node(ANON, "{anon}"))
            pos += 11
        elif s.startswith("<unnamed>", pos):
            out.append(Node(ANON, "{anon}"))
            pos += 9
        elif s.startswith("{lambda(", pos) or s.startswith("<lambda(", pos):
            # GCC's <lambda(float)>, the demangler's {lambda(float)#1}: the parameters are kept.
            params = pos + 7
            out.append(Node(LAMBDA, s[params + 1:min(_matching(s, params), n)]))
            pos = min(_matching(s, pos), n - 1) + 1
        elif c == "{":  # {unnamed type#1} and the like: one opaque name
            end = min(_matching(s, pos), n - 1)
            out.append(Node(IDENT, s[pos:end + 1]))
            pos = end + 1
        elif c in "<([":
            kids, pos = _parse_seq(s, pos + 1, CLOSE[c])
            out.append(Node(GROUP, open_=c, kids=kids))
        elif c == close:
            return out, pos + 1
        elif s.startswith("::", pos):
            out.append(Node(PUNCT, "::"))
            pos += 2
        elif c == "'":
            end = pos + 1
            while end < n and s[end] != "'":
                end += 2 if s[end] == "\\" else 1
            end = min(end, n - 1)
            out.append(Node(CHARLIT, s[pos:end + 1]))
            pos = end + 1
        elif c.isdigit():
            end = pos
            while end < n and (_ident_char(s[end]) or s[end] == "."):
                end += 1
            out.append(Node(NUMBER, s[pos:end]))
            pos = end
        elif _ident_char(c):
            end = pos
            while end < n and _ident_char(s[end]):
                end += 1
            out.append(Node(IDENT, s[pos:end]))
            pos = end
        else:
            out.append(Node(PUNCT, c))
            pos += 1
    return out, pos


def _parse_tree(s):
    out, pos = [], 0
    while pos < len(s):  # a stray closing bracket ends _parse_seq early: go on after it
        part, pos = _parse_seq(s, pos, "\0")
        out += part
    return out


def _is_group(n, open_):
    return n.kind == GROUP and n.open == open_


def _is_unit_name(n):
    return n.kind in (IDENT, ANON, LAMBDA)


def _drop_qualifiers(seq):
    """The nodes with every qualifier ("a::", "S<3>::", "f<int>()::") removed."""
    out = []
    for n in seq:
        if n.kind != PUNCT or n.text != "::":
            out.append(n)
            continue
        while out and out[-1].kind == IDENT and out[-1].text == "const":  # "f() const::<lambda()>"
            out.pop()
        if out and _is_group(out[-1], "("):
            out.pop()
        if out and _is_group(out[-1], "<"):
            out.pop()
        if out and _is_unit_name(out[-1]):
            out.pop()
    return out


BUILTIN_WORDS = {"signed", "unsigned", "short", "long", "int", "char", "double"}
DROPPED_WORDS = {"const", "volatile", "struct", "class", "enum", "union", "typename", "__restrict__", "__restrict"}
INTEGER_TYPES = {"char", "schar", "uchar", "short", "ushort", "int", "unsigned", "long", "ulong", "llong", "ullong",
                 "bool", "wchar_t", "char8_t", "char16_t", "char32_t"}


def _builtin_type(words):
    """One spelling of a run of builtin type words ("long unsigned int" and "unsigned long": ulong)."""
    longs = words.count("long")
    u = "u" if "unsigned" in words else ""
    if "double" in words:
        return "ldouble" if longs else "double"
    if "char" in words:
        return "uchar" if u else "schar" if "signed" in words else "char"
    if "short" in words:
        return u + "short"
    if longs >= 2:
        return u + "llong"
    if longs == 1:
        return u + "long"
    return "unsigned" if u else "int"


def _char_value(lit):
    """A character literal as GCC prints it ('A', '\\n', '\\000', '\\x41'), as its number."""
    inner = lit[1:-1] if len(lit) >= 2 else lit
    if len(inner) == 1:
        return str(ord(inner))
    if len(inner) >= 2 and inner[0] == "\\":
        e = inner[1]
        if e in "01234567":
            return str(int(inner[1:], 8))
        if e == "x":
            return str(int(inner[2:], 16))
        return str(ord({"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}.get(e, e)))
    return lit


def _append(out, piece):
    if piece and out and _ident_char(out[-1]) and _ident_char(piece[0]):
        out += " "
    return out + piece


def _render_list(kids):
    """The comma-separated parts of a group, rendered: (parts, each part's wildcard flag)."""
    parts, flags, part = [], [], []
    for n in kids + [None]:
        if n is None or (n.kind == PUNCT and n.text == ","):
            if n is not None or part or parts:
                text, wild = _render(part)
                parts.append(text)
                flags.append(wild)
            part = []
        else:
            part.append(n)
    return parts, flags


def _render(seq):
    """One spelling of a type or template argument, and whether it is a wildcard (a lambda, an
    enum value written as a cast, nvcc's wrapper of an extended lambda)."""
    items = _drop_qualifiers(seq)
    out, wild, i = "", False, 0
    while i < len(items):
        n = items[i]
        if n.kind == IDENT:
            if n.text in BUILTIN_WORDS:
                words = []
                while i < len(items) and items[i].kind == IDENT and items[i].text in BUILTIN_WORDS:
                    words.append(items[i].text)
                    i += 1
                i -= 1
                out = _append(out, _builtin_type(words))
            elif n.text not in DROPPED_WORDS:
                wild |= "__nv_dl_" in n.text or "__nv_hdl_" in n.text
                out = _append(out, n.text)
        elif n.kind == NUMBER:
            v = n.text
            if not v.lower().startswith("0x"):
                v = v.rstrip("uUlL") or v
            out = _append(out, v)
        elif n.kind == CHARLIT:
            out = _append(out, _char_value(n.text))
        elif n.kind == ANON:
            out = _append(out, "{anon}")
        elif n.kind == LAMBDA:
            wild = True
            params, _ = _render_list(_parse_tree(n.text))
            out = _append(out, "lambda(" + ",".join(params) + ")")
        elif n.kind == GROUP:
            parts, flags = _render_list(n.kids)
            nxt = items[i + 1] if i + 1 < len(items) else None
            value_follows = nxt is not None and (
                nxt.kind in (NUMBER, CHARLIT) or
                (nxt.kind == PUNCT and nxt.text == "-" and i + 2 < len(items) and items[i + 2].kind == NUMBER))
            after_name = i > 0 and (_is_unit_name(items[i - 1]) or items[i - 1].kind == GROUP)
            if n.open == "(" and value_follows and not after_name and len(parts) == 1:
                # The demangler's cast of a template argument's value: (char)65, (rt::cuda::Op)3.
                if parts[0] not in INTEGER_TYPES:
                    wild = True  # an enum value: GCC names the enumerator instead
                    out = _append(out, "(" + parts[0] + ")")
            else:
                wild |= any(flags)
                out = _append(out, n.open + ",".join(parts) + CLOSE[n.open])
        else:
            out = _append(out, n.text)
        i += 1
    return out, wild


class Name:
    """A kernel's name in one spelling: base ("map_vec"), template arguments, the key."""

    def __init__(self, raw):
        self.raw = raw
        s = raw.strip()
        m = re.fullmatch(r"\(\s*&\s*(.+?)\s*\)", s)  # GCC's "(& f)": a kernel whose arguments were deduced
        if m:
            s = m.group(1)
        tree = _parse_tree(s)
        end = len(tree)
        if end and _is_group(tree[end - 1], "("):  # the demangler's parameter list
            end -= 1
        at, args = end, None
        if at and _is_group(tree[at - 1], "<"):
            at -= 1
            args = tree[at]
        self.args, self.wild, self.scope = [], [], []
        if at == 0 or not _is_unit_name(tree[at - 1]):  # not a name: all of it is the key
            self.base = self.key = _render(tree)[0]
            self.is_template = False
            return
        at -= 1
        base = tree[at]
        self.base = "lambda" if base.kind == LAMBDA else "{anon}" if base.kind == ANON else base.text
        while at and tree[at - 1].kind == PUNCT and tree[at - 1].text == "::":  # the qualifiers before it
            at -= 1
            while at and (tree[at - 1].kind == GROUP or (tree[at - 1].kind == IDENT and tree[at - 1].text == "const")):
                at -= 1
            if at and _is_unit_name(tree[at - 1]):
                at -= 1
                self.scope.insert(0, "lambda" if tree[at].kind == LAMBDA else tree[at].text)
            else:
                self.scope.insert(0, "")
        self.is_template = args is not None
        self.key = self.base
        if args is not None:
            self.args, self.wild = _render_list(args.kids)
            self.key += "<" + ",".join(self.args) + ">"

    def hand_written(self):
        """A kernel of ours: declared in namespace rt."""
        return bool(self.scope) and self.scope[0] == "rt"

    def compatible(self, other):
        """Step 2 of Note [Kernel names on both sides]."""
        if self.base != other.base or self.is_template != other.is_template or len(self.args) != len(other.args):
            return False
        return all(a == b or wa or wb for a, b, wa, wb in zip(self.args, other.args, self.wild, other.wild))


_NAMES = {}


def parse_name(raw):
    """Name(raw), parsed once per spelling: a step repeats each kernel's name hundreds of times."""
    n = _NAMES.get(raw)
    if n is None:
        n = _NAMES[raw] = Name(raw)
    return n


def kernel_key(name):
    return parse_name(name).key


# ---- inputs --------------------------------------------------------------------------------------

def read_json(path, what, how):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"cannot read {what} '{path}': {e.strerror}; {how}")
    except json.JSONDecodeError as e:
        raise InputError(f"{what} '{path}' is not JSON ({e}); {how}")


LAB_COUNTERS = ("launches", "global_load_requests", "global_load_sectors", "global_load_sectors_ideal",
                "global_store_requests", "global_store_sectors", "global_store_sectors_ideal", "shared_load_requests",
                "shared_store_requests", "shared_wavefronts", "shared_bank_conflicts", "dram_bytes")


def lab_counters_at(row, batch, batches, target):
    """A lab row's counters at `batch`: measured there, the target's, or on the line through the two
    largest measured batches (Note [Extrapolating the lab] in profile/kernel_lab.h)."""
    if batch == target:
        return row.get("at_target", {})
    measured = row.get("measured", [])
    if batch in batches and len(measured) == len(batches):
        return measured[batches.index(batch)]
    if len(batches) < 2 or len(measured) != len(batches):
        return row.get("at_target", {})
    lo, hi, b_lo, b_hi = measured[-2], measured[-1], batches[-2], batches[-1]
    return {k: max(0.0, hi.get(k, 0.0) + (batch - b_hi) * (hi.get(k, 0.0) - lo.get(k, 0.0)) / (b_hi - b_lo))
            for k in LAB_COUNTERS}


def load_report(path, ncu_batch):
    """The lab's rows: hand-written kernels summed per key, and the summary."""
    how = "make it with `bash bench/run_kernel_lab.sh` (out/kernel_lab/<config>/report.json)"
    doc = read_json(path, "the kernel lab report", how)
    if not isinstance(doc, dict) or doc.get("format") != LAB_FORMAT or not isinstance(doc.get("rows"), list):
        raise InputError(f"'{path}' is not a kernel lab report (no \"format\": \"{LAB_FORMAT}\"); {how}")
    batches, target = list(doc.get("measured_batches", [])), doc.get("target_batch", 0)
    kernels = {}
    for r in doc["rows"]:
        if r.get("kind") != "kernel":
            continue
        name = Name(r.get("kernel", ""))
        k = kernels.get(name.key)
        if k is None:
            k = kernels[name.key] = {"key": name.key, "name": name, "lab_names": [], "sites": [], "calls": 0.0,
                                     "bound_us": 0.0, "registers": set(), "occupancy": None, "limiter": "",
                                     "top_bound": -1.0, "target": {c: 0.0 for c in LAB_COUNTERS},
                                     "at_ncu": {c: 0.0 for c in LAB_COUNTERS}}
        if r["kernel"] not in k["lab_names"]:
            k["lab_names"].append(r["kernel"])
        k["sites"].append(r.get("site", ""))
        t = r.get("at_target", {})
        k["calls"] += t.get("launches", 0.0)
        k["bound_us"] += r.get("bound_us", 0.0)
        if r.get("registers_per_thread") is not None:
            k["registers"].add(int(r["registers_per_thread"]))
        if r.get("bound_us", 0.0) > k["top_bound"]:  # the row that weighs most speaks for the kernel
            k["top_bound"] = r.get("bound_us", 0.0)
            k["limiter"], k["occupancy"] = r.get("limiter", ""), r.get("occupancy")
        for c in LAB_COUNTERS:
            k["target"][c] += t.get(c, 0.0)
        if ncu_batch:
            at = lab_counters_at(r, ncu_batch, batches, target)
            for c in LAB_COUNTERS:
                k["at_ncu"][c] += at.get(c, 0.0)
    return doc, kernels


def load_trace(path):
    """Per GPU record class, the steps' records: ({key: [per-step us]}, {key: calls}, names, steps)."""
    how = "it is written by train_step_bench --profile-steps A:B --profile-dir DIR (DIR/trace.json)"
    doc = read_json(path, "the profiler's trace", how)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError(f"'{path}' has no traceEvents: not the profiler's trace.json; {how}")
    steps = sorted((e["ts"], e["ts"] + e.get("dur", 0.0), e.get("name", "")) for e in events
                   if e.get("ph") == "X" and e.get("cat") == "step")
    if not steps:
        raise InputError(f"'{path}' holds no profiled step (no slice of category \"step\"); {how}")
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "memcpy", "memset")]
    if not any(e["cat"] == "kernel" for e in gpu):
        raise InputError(f"'{path}' holds no kernel records: was it recorded on a GPU with CUPTI? {how}")
    per_step = {}   # key -> [us in step 0, 1, ...]
    calls = {}      # key -> calls over the steps
    names = {}      # key -> (Name, class): class "kernel" (ours), "library", "copy"
    outside = 0
    starts = [s[0] for s in steps]
    for e in gpu:
        mid = e["ts"] + e.get("dur", 0.0) / 2
        i = max(0, _bisect_right(starts, mid + STEP_MARGIN_US) - 1)
        if not steps[i][0] - STEP_MARGIN_US <= mid <= steps[i][1] + STEP_MARGIN_US:
            outside += 1
            continue
        if e["cat"] == "kernel":
            name = parse_name(e.get("name", ""))
            key, cls = name.key, "kernel" if name.hand_written() else "library"
        else:
            name, key, cls = None, e["cat"], "copy"
        if key not in per_step:
            per_step[key] = [0.0] * len(steps)
            calls[key] = 0
            names[key] = (name, cls, e.get("name", ""))
        per_step[key][i] += e.get("dur", 0.0)
        calls[key] += 1
    return {"steps": steps, "per_step": per_step, "calls": calls, "names": names, "outside": outside}


def _bisect_right(a, x):
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def _number(value, unit):
    v = (value or "").strip().replace(",", "")
    try:
        x = float(v)
    except ValueError:
        return None  # "n/a", "": the metric is not there for this launch
    return x * UNIT_SCALE.get((unit or "").strip().lower(), 1)


def load_ncu(path):
    """ncu's --csv output (one row per launch and metric): {key: {"launches": n, field: [values]}}."""
    how = "it is written by `ncu --csv --log-file FILE --metrics ...` (tools/gpu_check.sh run --tier lab)"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"cannot read ncu's output '{path}': {e.strerror}; {how}")
    head = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if head is None:
        raise InputError(f"'{path}' has no ncu CSV header (\"ID\",...): ncu profiled nothing; {how}")
    launches = {}
    for row in csv.DictReader(lines[head:]):
        if not (row.get("ID") or "").strip().isdigit() or not row.get("Metric Name"):
            continue  # ncu's own ==PROF== and ==WARNING== lines between the rows
        field = FIELD_OF_METRIC.get(row["Metric Name"].strip())
        launch = launches.setdefault(row["ID"], {"name": row.get("Kernel Name", "")})
        if field:
            launch[field] = _number(row.get("Metric Value"), row.get("Metric Unit"))
    by_key = {}
    for launch in launches.values():
        name = parse_name(launch["name"])
        k = by_key.setdefault(name.key, {"name": name, "launches": 0, **{f: [] for f, _ in NCU_METRICS}})
        k["launches"] += 1
        for f, _ in NCU_METRICS:
            if launch.get(f) is not None:
                k[f].append(launch[f])
    return by_key, len(launches)


# ---- the join ------------------------------------------------------------------------------------

def join(lab, dev):
    """Pairs of (lab key, device key, how) and the keys left on each side
    (Note [Kernel names on both sides])."""
    lab_left, dev_left = set(lab), set(dev)
    pairs = []
    for k in sorted(lab_left & dev_left):
        pairs.append((k, k, "exact"))
    lab_left -= dev_left
    dev_left -= {p[1] for p in pairs}
    for rule in ("wildcard", "name only"):
        progress = True
        while progress:
            progress = False
            for lk in sorted(lab_left):
                ln = lab[lk]
                fits = (lambda a, b: a.compatible(b)) if rule == "wildcard" else (lambda a, b: a.base == b.base)
                cands = [dk for dk in sorted(dev_left) if fits(ln, dev[dk])]
                if len(cands) != 1 or [k for k in lab_left if fits(lab[k], dev[cands[0]])] != [lk]:
                    continue
                pairs.append((lk, cands[0], rule))
                lab_left.discard(lk)
                dev_left.discard(cands[0])
                progress = True
                break
    return pairs, sorted(lab_left), sorted(dev_left)


def _ratio(a, b):
    return a / b if b else None


def lab_metrics(c):
    sec = c["global_load_sectors"] + c["global_store_sectors"]
    req = c["shared_load_requests"] + c["shared_store_requests"]
    return {
        "sector_efficiency": _ratio(c["global_load_sectors_ideal"] + c["global_store_sectors_ideal"], sec),
        "load_sectors_per_request": _ratio(c["global_load_sectors"], c["global_load_requests"]),
        "store_sectors_per_request": _ratio(c["global_store_sectors"], c["global_store_requests"]),
        "bank_conflicts_per_request": _ratio(c["shared_bank_conflicts"], req),
        "shared_wavefronts_per_request": _ratio(c["shared_wavefronts"], req),
        "dram_bytes": c["dram_bytes"],
        "launches": c["launches"],
    }


def ncu_metrics(k, calls_per_step):
    s = {f: sum(k[f]) for f, _ in NCU_METRICS}
    n = k["launches"]
    used = None
    if k["gld_used_pct"] or k["gst_used_pct"]:  # bytes used per sector fetched, weighted by sectors
        pairs = list(zip(k["gld_used_pct"], k["gld_sec"])) + list(zip(k["gst_used_pct"], k["gst_sec"]))
        w = sum(x for _, x in pairs)
        used = sum(p / 100 * x for p, x in pairs) / w if w else None
    mode = lambda v: max(set(v), key=v.count) if v else None  # noqa: E731 (the most frequent value)
    scale = calls_per_step / n if n and calls_per_step and calls_per_step > n else 1.0
    return {
        "launches": n,
        "sector_efficiency": used,
        "load_sectors_per_request": _ratio(s["gld_sec"], s["gld_req"]),
        "store_sectors_per_request": _ratio(s["gst_sec"], s["gst_req"]),
        "bank_conflicts_per_request": _ratio(s["shld_conf"] + s["shst_conf"], s["shld_req"] + s["shst_req"]),
        "shared_wavefronts_per_request": _ratio(s["shld_wave"] + s["shst_wave"], s["shld_req"] + s["shst_req"]),
        # Per step: scaled up where the launch count stopped ncu before the step's last call.
        "dram_bytes": (s["dram_read"] + s["dram_write"]) * scale,
        "dram_bytes_scaled": scale != 1.0,
        "registers": mode([int(r) for r in k["registers"]]),
        "occupancy": mode(k["occupancy_pct"]) / 100 if k["occupancy_pct"] else None,
        "active_lanes_per_instruction": statistics.mean(k["lanes"]) if k["lanes"] else None,
        "time_us": s["time_ns"] / 1e3,
    }


def compare(report_path, trace_path, ncu_path=None, ncu_batch=0, batch=0, profile_path=None, ncu_note=""):
    lab_doc, lab = load_report(report_path, ncu_batch) if report_path else ({}, {})
    tr = load_trace(trace_path)
    nsteps = len(tr["steps"])
    med = {k: statistics.median(v) for k, v in tr["per_step"].items()}
    per_call = {k: c / nsteps for k, c in tr["calls"].items()}
    # A kernel the lab knows is ours whatever its namespace (a name CUPTI could not demangle, say).
    for k, (name, cls, raw) in tr["names"].items():
        if cls == "library" and k in lab:
            tr["names"][k] = (name, "kernel", raw)
    dev = {k: tr["names"][k][0] for k in tr["per_step"] if tr["names"][k][1] == "kernel"}
    step_sum = lambda cls: statistics.median(  # noqa: E731 (the median over steps of a class's sum)
        [sum(v[i] for k, v in tr["per_step"].items() if tr["names"][k][1] == cls) for i in range(nsteps)])
    ncu, ncu_launches = ({}, 0)
    if ncu_path:
        ncu, ncu_launches = load_ncu(ncu_path)

    pairs, lab_only, dev_only = join({k: v["name"] for k, v in lab.items()}, dev)
    # ncu's kernels join the device's by key; a kernel ncu saw but CUPTI did not joins the lab the same way.
    ncu_of = {}
    if ncu:
        npairs, _, _ = join({dk: dev[dk] for dk in dev}, {k: v["name"] for k, v in ncu.items()})
        ncu_of = {a: b for a, b, _ in npairs}

    rows = []
    for lk, dk, how in pairs:
        rows.append(_row(lab.get(lk), lk, dk, how, med, per_call, ncu.get(ncu_of.get(dk)) if dk else None))
    for dk in dev_only:
        rows.append(_row(None, None, dk, "", med, per_call, ncu.get(ncu_of.get(dk))))
    for lk in lab_only:
        rows.append(_row(lab[lk], lk, None, "", med, per_call, None))
    rows.sort(key=lambda r: (-(r["gpu_us"] or 0), -(r["lab_bound_us"] or 0), r["kernel"]))

    summary = lab_doc.get("summary", {})
    matched_gpu = sum(r["gpu_us"] for r in rows if r["lab_key"] and r["device_key"])
    matched_bound = sum(r["lab_bound_us"] for r in rows if r["lab_key"] and r["device_key"])
    totals = {
        "steps": nsteps,
        "step_ms_median": statistics.median([(e - b) / 1e3 for b, e, _ in tr["steps"]]),
        "hand_written_us": step_sum("kernel"),
        "hand_written_launches": sum(per_call[k] for k in dev),
        "lab_kernel_bound_us": summary.get("kernel_bound_us"),
        "lab_kernel_launches": summary.get("kernel_launches"),
        "matched_gpu_us": matched_gpu,
        "matched_lab_bound_us": matched_bound,
        "library_us": step_sum("library"),
        "lab_library_bound_us": summary.get("library_bound_us"),
        "copy_us": step_sum("copy"),
        "lab_copy_bound_us": summary.get("copy_bound_us"),
        "lab_bound_us": summary.get("bound_us"),
        "records_outside_steps": tr["outside"],
    }
    totals["gpu_busy_us"] = totals["hand_written_us"] + totals["library_us"] + totals["copy_us"]
    out = {
        "format": FORMAT,
        "report": report_path or "",
        "lab_target_batch": lab_doc.get("target_batch"),
        "lab_measured_batches": lab_doc.get("measured_batches"),
        "batch": batch or None,
        "trace": trace_path,
        "ncu": {"csv": ncu_path or "", "batch": ncu_batch or None, "launches": ncu_launches, "note": ncu_note},
        "totals": totals,
        "rows": rows,
        "lab_only": [r["kernel"] for r in rows if r["lab_key"] and not r["device_key"]],
        "device_only": [r["kernel"] for r in rows if r["device_key"] and not r["lab_key"]],
        "device_kernel_names": {k: tr["names"][k][2] for k in dev},
    }
    if profile_path:  # the profiler's own per-kernel totals: the same records, a check of the split into steps
        prof = read_json(profile_path, "the profiler's profile.json", "it is written next to trace.json")
        calls = sum(r.get("calls", 0) for r in prof.get("by_kernel", []))
        out["profile_kernel_calls"] = calls
        out["trace_gpu_records"] = sum(tr["calls"].values()) + tr["outside"]
    return out


def _row(lab_k, lk, dk, how, med, per_call, ncu_k):
    lab_t = lab_metrics(lab_k["target"]) if lab_k else None
    r = {
        "kernel": lk or dk,
        "lab_key": lk,
        "device_key": dk,
        "match": how,
        "lab_names": lab_k["lab_names"] if lab_k else [],
        "sites": lab_k["sites"] if lab_k else [],
        "lab_calls": lab_k["calls"] if lab_k else None,
        "gpu_calls": per_call.get(dk) if dk else None,
        "gpu_us": med.get(dk) if dk else None,
        "lab_bound_us": lab_k["bound_us"] if lab_k else None,
        "limiter": lab_k["limiter"] if lab_k else "",
        "lab_registers": sorted(lab_k["registers"]) if lab_k else [],
        "lab_occupancy": lab_k["occupancy"] if lab_k else None,
        "lab_at_target": lab_t,
    }
    r["gpu_over_bound"] = _ratio(r["gpu_us"], r["lab_bound_us"]) if r["gpu_us"] is not None else None
    if ncu_k:
        r["ncu"] = ncu_metrics(ncu_k, r["gpu_calls"])
        r["lab_at_ncu_batch"] = lab_metrics(lab_k["at_ncu"]) if lab_k else None
    return r


# ---- output --------------------------------------------------------------------------------------

def _f(v, fmt):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _pair(a, b, fmt):
    return f"{_f(a, fmt)} / {_f(b, fmt)}"


def markdown(res):
    t = res["totals"]
    have_ncu = any("ncu" in r for r in res["rows"])
    lines = []
    b = res["batch"] or res["lab_target_batch"]
    lines.append(f"Kernel lab against the GPU: each hand-written kernel's device time per step (CUPTI, median of "
                 f"{t['steps']} warm steps at batch {b}) against the lab's H200 bound"
                 + (f" at batch {res['lab_target_batch']}" if res["lab_target_batch"] else " (no lab report)")
                 + (f"; counters from Nsight Compute at batch {res['ncu']['batch']} against the lab's at that batch"
                    if have_ncu else "") + ".")
    if res["lab_target_batch"] and res["batch"] and res["batch"] != res["lab_target_batch"]:
        lines.append(f"WARNING: measured at batch {res['batch']}, the lab's bound is at batch "
                     f"{res['lab_target_batch']}: the times do not compare.")
    lines.append("")
    head = ["kernel", "calls lab / GPU", "GPU us/step", "lab bound us", "GPU / bound", "limiter"]
    if have_ncu:
        head += ["ncu calls", "sect. eff. lab / ncu", "confl./req lab / ncu", "DRAM MB lab / ncu", "regs lab / ncu"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + " --- |" * len(head))
    for r in res["rows"]:
        name = f"`{r['kernel']}`" + (f" ({r['match']})" if r["match"] not in ("", "exact") else "")
        if not r["device_key"]:
            name += " (lab only)"
        elif not r["lab_key"]:
            name += " (GPU only)"
        cells = [name, _pair(r["lab_calls"], r["gpu_calls"], ".0f"), _f(r["gpu_us"], ".1f"),
                 _f(r["lab_bound_us"], ".1f"), _f(r["gpu_over_bound"], ".2f"), r["limiter"] or "-"]
        if have_ncu:
            n, lb = r.get("ncu"), r.get("lab_at_ncu_batch") or {}
            if n:
                regs = "/".join(str(x) for x in r["lab_registers"]) or "-"
                dram_ncu = _f(n["dram_bytes"] / 1e6, ".1f") + ("~" if n["dram_bytes_scaled"] else "")
                cells += [str(n["launches"]), _pair(lb.get("sector_efficiency"), n["sector_efficiency"], ".2f"),
                          _pair(lb.get("bank_conflicts_per_request"), n["bank_conflicts_per_request"], ".2f"),
                          f"{_f(lb['dram_bytes'] / 1e6 if lb else None, '.1f')} / {dram_ncu}",
                          f"{regs} / {_f(n['registers'], 'd')}"]
            else:
                cells += ["-"] * 5
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    def vs(gpu, bound):  # "352.0 us against the lab's 464.0 us (0.76x)", or the measurement alone
        if bound is None:
            return f"{_f(gpu, '.1f')} us"
        return f"{_f(gpu, '.1f')} us against the lab's {_f(bound, '.1f')} us" + (
            f" ({gpu / bound:.2f}x)" if gpu is not None and bound else "")
    launches = f"{_f(t['hand_written_launches'], '.0f')} launches" + (
        f" against the lab's {_f(t['lab_kernel_launches'], '.0f')}" if t["lab_kernel_launches"] is not None else "")
    lines.append(f"- hand-written kernels per step: {vs(t['hand_written_us'], t['lab_kernel_bound_us'])}; {launches}")
    if any(r["lab_key"] and r["device_key"] for r in res["rows"]):
        lines.append(f"- the kernels found on both sides: {vs(t['matched_gpu_us'], t['matched_lab_bound_us'])}")
    lines.append(f"- library kernels (cuDNN, cuBLAS): {vs(t['library_us'], t['lab_library_bound_us'])}")
    lines.append(f"- copies and memsets: {vs(t['copy_us'], t['lab_copy_bound_us'])}")
    lines.append(f"- the step: {t['step_ms_median']:.3f} ms of wall time (median), the GPU busy "
                 f"{vs(t['gpu_busy_us'], t['lab_bound_us'])}")
    if t["records_outside_steps"]:
        lines.append(f"- GPU records outside every profiled step, left out: {t['records_outside_steps']}")
    only_lab = [r for r in res["rows"] if not r["device_key"]]
    only_gpu = [r for r in res["rows"] if not r["lab_key"]]
    if only_lab:
        lines.append("- only in the lab: " + ", ".join(
            f"`{r['kernel']}` ({_f(r['lab_calls'], '.0f')} calls, {_f(r['lab_bound_us'], '.1f')} us)"
            for r in only_lab))
    if only_gpu:
        lines.append("- only on the GPU: " + ", ".join(
            f"`{r['kernel']}` ({_f(r['gpu_calls'], '.0f')} calls, {_f(r['gpu_us'], '.1f')} us)" for r in only_gpu))
    if res["ncu"]["note"]:
        lines.append(f"- Nsight Compute: {res['ncu']['note']}")
    elif have_ncu:
        lines.append(f"- Nsight Compute: {res['ncu']['launches']} launches profiled; '~': DRAM bytes scaled to the "
                     "step's calls where ncu stopped before the kernel's last one")
    return "\n".join(lines) + "\n"


def main(argv):
    p = argparse.ArgumentParser(prog="kernel_lab_compare.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", help="the profiler's trace.json of the measured steps")
    p.add_argument("--report", help="the kernel lab's report.json (bench/run_kernel_lab.sh)")
    p.add_argument("--profile", help="the profiler's profile.json beside the trace (a cross-check)")
    p.add_argument("--ncu", help="Nsight Compute's --csv output for one step's hand-written kernels")
    p.add_argument("--ncu-batch", type=int, default=0, help="the batch ncu ran at (the lab's counters are taken there)")
    p.add_argument("--ncu-note", default="", help="a line on ncu for the table (why it did not run, say)")
    p.add_argument("--batch", type=int, default=0, help="the batch the trace was measured at")
    p.add_argument("--md", help="where the Markdown goes (default: stdout)")
    p.add_argument("--json", help="where the JSON goes")
    p.add_argument("--ncu-metrics", action="store_true", help="print the metrics to give ncu and exit")
    a = p.parse_args(argv)
    if a.ncu_metrics:
        print(",".join(m for _, m in NCU_METRICS))
        return 0
    if not a.trace:
        p.error("--trace is required (the profiler's trace.json)")
    if a.ncu and not a.ncu_batch:
        p.error("--ncu needs --ncu-batch: the batch ncu ran at")
    try:
        res = compare(a.report, a.trace, a.ncu, a.ncu_batch, a.batch, a.profile, a.ncu_note)
    except InputError as e:
        print(f"kernel_lab_compare: {e}", file=sys.stderr)
        return 1
    md = markdown(res)
    res["markdown"] = md
    if a.md:
        with open(a.md, "w", encoding="utf-8") as f:
            f.write(md)
    else:
        sys.stdout.write(md)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1, default=_jsonable)
            f.write("\n")
        os.replace(tmp, a.json)
    return 0


def _jsonable(v):
    if isinstance(v, set):
        return sorted(v)
    if isinstance(v, Name):
        return v.key
    raise TypeError(type(v).__name__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
