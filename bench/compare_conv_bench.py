#!/usr/bin/python3
"""Compares conv_bench (ringtape) and conv_bench_torch.py JSON results shape by shape.

  compare_conv_bench.py --ringtape RT.json [RT2.json ...] --torch TH.json [TH2.json ...]
                        [--target 1.5] [--check]

Several files per side are rounds of the same measurement: each shape's times are then the
median over the rounds (of each round's median). ratio = ringtape ms / torch ms (lower is
better; 1.0 = as fast as PyTorch). The total is weighted by how often each shape occurs in
ResNet50 (the count column): the ratio of the time all 53 convs of one training step's
forward + backward take. --check exits with status 1 when the total ratio misses the target
(or the two sides were not measured alike).
"""

import argparse
import json
import statistics
import sys

BUSY_SHARE = 0.02  # as in the two benchmarks
KEYS = ("N", "C", "H", "W", "O", "KH", "KW", "stride", "pad", "count", "input_grad")
SETTINGS = ("format", "dtype", "warmup", "repeats", "threads")


def load_side(label, paths, problems):
    """One side's rounds merged: settings of the first, per-shape medians over the rounds."""
    docs = []
    for p in paths:
        with open(p) as f:
            docs.append(json.load(f))
    first = docs[0]
    for p, d in zip(paths[1:], docs[1:]):
        for key in SETTINGS:
            if d.get(key) != first.get(key):
                problems.append(f"{label} rounds differ in {key}: {paths[0]} {first.get(key)!r}, {p} {d.get(key)!r}")
        if [s["name"] for s in d["shapes"]] != [s["name"] for s in first["shapes"]]:
            problems.append(f"{label} rounds differ in their shapes: {paths[0]}, {p}")
    shapes = {}
    for s in first["shapes"]:
        rounds = [r for d in docs for r in d["shapes"] if r["name"] == s["name"]]
        merged = dict(s)
        for key in ("fwd_ms", "bwd_ms", "ms"):
            merged[key] = statistics.median(r[key] for r in rounds)
        merged["gflops"] = s["flops"] / (merged["ms"] * 1e6)
        shapes[s["name"]] = merged
    return {
        **{k: first.get(k) for k in SETTINGS}, "version": first.get("version", label), "rounds": len(docs),
        "order": [s["name"] for s in first["shapes"]], "shapes": shapes,
        "others_cpu": max(d.get("others_cpu", -1) for d in docs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtape", nargs="+", required=True, metavar="JSON", help="conv_bench --json output(s)")
    ap.add_argument("--torch", nargs="+", required=True, metavar="JSON", help="conv_bench_torch.py --json output(s)")
    ap.add_argument("--target", type=float, default=1.5, help="the total ratio to meet (default 1.5)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the total ratio misses the target")
    args = ap.parse_args()

    problems = []
    rt = load_side("ringtape", args.ringtape, problems)
    th = load_side("torch", args.torch, problems)
    for key in SETTINGS:
        if rt[key] != th[key]:
            problems.append(f"{key}: ringtape {rt[key]!r}, torch {th[key]!r}")
    rt_shapes, th_shapes = rt["shapes"], th["shapes"]
    names = [n for n in rt["order"] if n in th_shapes]
    if set(rt_shapes) != set(th_shapes):
        problems.append(f"shape sets differ: only ringtape {sorted(set(rt_shapes) - set(th_shapes))}, "
                        f"only torch {sorted(set(th_shapes) - set(rt_shapes))}")
    for n in names:
        diff = [k for k in KEYS if rt_shapes[n][k] != th_shapes[n][k]]
        if diff:
            problems.append(f"{n}: {', '.join(diff)} differ")
    for p in problems:
        print(f"WARNING: not like for like: {p}")
    busy = [f"{label} {100 * side['others_cpu']:.0f}%" for label, side in (("ringtape", rt), ("torch", th))
            if side["others_cpu"] > BUSY_SHARE]
    if busy:
        print(f"WARNING: other processes used CPU time during the runs ({', '.join(busy)} of the machine "
              "in the worst round): the timings are distorted, rerun when the machine is idle")

    rounds = f"; median of {rt['rounds']} rounds" if rt["rounds"] > 1 or th["rounds"] > 1 else ""
    print(f"conv2d f32 forward+backward, {rt['format']}, median of {rt['repeats']} after {rt['warmup']} warmup"
          f"{rounds}; ringtape {rt['threads']} threads, {th['version']} {th['threads']} threads")
    header = (f"{'shape':<22} {'N C H W -> O  k s p':<31} {'count':>5} {'ringtape ms':>12} {'torch ms':>10} "
              f"{'ratio':>6} {'rt GFLOP/s':>11} {'torch GFLOP/s':>14} {'fwd ratio':>10} {'bwd ratio':>10}")
    print(header)
    print("-" * len(header))
    tot_rt = tot_th = tot_flops = 0.0
    for n in names:
        a, b = rt_shapes[n], th_shapes[n]
        dims = f"{a['N']} {a['C']} {a['H']} {a['W']} -> {a['O']} {a['KH']}x{a['KW']} s{a['stride']} p{a['pad']}"
        mark = "" if a["input_grad"] else "*"
        print(f"{n + mark:<22} {dims:<31} {a['count']:>5} {a['ms']:>12.3f} {b['ms']:>10.3f} "
              f"{a['ms'] / b['ms']:>6.2f} {a['gflops']:>11.1f} {b['gflops']:>14.1f} "
              f"{a['fwd_ms'] / b['fwd_ms']:>10.2f} {a['bwd_ms'] / b['bwd_ms']:>10.2f}")
        tot_rt += a["count"] * a["ms"]
        tot_th += b["count"] * b["ms"]
        tot_flops += a["count"] * a["flops"]
    print("-" * len(header))
    convs = sum(rt_shapes[n]["count"] for n in names)
    ratio = tot_rt / tot_th
    print(f"{'TOTAL (x count)':<22} {f'{convs} convs':<31} {convs:>5} {tot_rt:>12.3f} {tot_th:>10.3f} "
          f"{ratio:>6.2f} {tot_flops / (tot_rt * 1e6):>11.1f} {tot_flops / (tot_th * 1e6):>14.1f}")
    print("* = no input gradient (the stem's input is the image): forward + filter gradient only")
    print(f"ratio = ringtape ms / torch ms (lower is better). Target: total ratio <= {args.target:g}: "
          f"{'MET' if ratio <= args.target else 'NOT MET'} ({ratio:.2f})")
    if problems:
        print("WARNING: the comparison is not like for like (see above)")
    if busy:
        print("WARNING: the machine was busy during the runs (see above)")
    if args.check and (ratio > args.target or problems):
        sys.exit(1)


if __name__ == "__main__":
    main()
