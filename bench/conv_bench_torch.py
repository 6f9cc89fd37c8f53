#!/usr/bin/python3
"""PyTorch's half of the conv benchmark: the same shapes, method and output as conv_bench.cc.

Run with Debian's interpreter, which has torch 1.13 (the pyenv python3 on PATH has none):

  /usr/bin/python3 bench/conv_bench_torch.py [--repeats 3] [--warmup 1] [--threads 2]
                                             [--channels-last] [--json FILE] [--only SUBSTRING]

Per shape: x (N, C, H, W) and w (O, C, KH, KW) from torch.randn, no bias, both requiring grad
except the stem's input (conv1); each repetition times y = F.conv2d(x, w) and then
y.backward(seed); the first `warmup` repetitions are dropped, the median of the rest is
reported. FLOPs are counted as in conv_bench.cc.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
BUSY_SHARE = 0.02  # other processes' share of the machine's CPU time above which we warn
FIELDS = ("N", "C", "H", "W", "O", "KH", "KW", "stride", "pad", "count")


def read_shapes(path):
    """Columns: name N C H W O KH KW stride pad count; '#' starts a comment."""
    shapes = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            if len(parts) != 1 + len(FIELDS):
                sys.exit(f"{path}:{lineno}: want 'name {' '.join(FIELDS)}', got {line.strip()!r}")
            try:
                s = dict(zip(FIELDS, map(int, parts[1:])))
            except ValueError:
                sys.exit(f"{path}:{lineno}: not an integer in {line.strip()!r}")
            s["name"] = parts[0]
            shapes.append(s)
    if not shapes:
        sys.exit(f"no shapes in {path}")
    return shapes


def sample_cpu():
    """(wall s, all CPUs' non-idle s incl. steal or None, this process's CPU s): as conv_bench.cc."""
    t = time.perf_counter()
    busy = None
    try:
        with open("/proc/stat") as f:
            v = f.readline().split()
        if v[0] == "cpu":
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, v[1:9])
            busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return t, busy, ru.ru_utime + ru.ru_stime


def others_cpu_share(a, b):
    """The share of all CPUs' time between samples a and b that other processes used (-1: unknown)."""
    if a[1] is None or b[1] is None or b[0] <= a[0]:
        return -1.0
    return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / ((b[0] - a[0]) * os.cpu_count())


def run_one(s, args):
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    ho = (s["H"] + 2 * s["pad"] - s["KH"]) // s["stride"] + 1
    wo = (s["W"] + 2 * s["pad"] - s["KW"]) // s["stride"] + 1
    input_grad = s["name"] != "conv1"  # the stem's input is the image
    fwd_flops = 2.0 * s["N"] * s["O"] * ho * wo * s["C"] * s["KH"] * s["KW"]
    flops = fwd_flops * (3.0 if input_grad else 2.0)

    # The weight takes the input's format, as model.to(memory_format=...) does.
    x = torch.randn(s["N"], s["C"], s["H"], s["W"]).contiguous(memory_format=fmt)
    w = torch.randn(s["O"], s["C"], s["KH"], s["KW"]).contiguous(memory_format=fmt)
    seed = torch.randn(s["N"], s["O"], ho, wo).contiguous(memory_format=fmt)
    x.requires_grad_(input_grad)
    w.requires_grad_(True)

    fwd, bwd, tot = [], [], []
    for i in range(args.warmup + args.repeats):
        x.grad = None
        w.grad = None
        t0 = time.perf_counter()
        y = F.conv2d(x, w, None, stride=s["stride"], padding=s["pad"])
        t1 = time.perf_counter()
        y.backward(seed)
        t2 = time.perf_counter()
        if i == 0:
            assert tuple(y.shape) == (s["N"], s["O"], ho, wo), (s["name"], tuple(y.shape))
            assert w.grad is not None and w.grad.shape == w.shape, s["name"]
            assert (x.grad is not None) == input_grad, s["name"]
        del y
        if i >= args.warmup:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            tot.append((t2 - t0) * 1e3)
    ms = statistics.median(tot)
    return {
        "name": s["name"], **{k: s[k] for k in FIELDS}, "HO": ho, "WO": wo, "input_grad": input_grad,
        "flops": flops, "fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd), "ms": ms,
        "gflops": flops / (ms * 1e6), "ms_all": tot,
    }


def print_result(r):
    """The same line format as conv_bench.cc."""
    dims = (f"{r['N']}x{r['C']}x{r['H']}x{r['W']}->{r['O']} k{r['KH']}x{r['KW']} "
            f"s{r['stride']} p{r['pad']}")
    count = f"x{r['count']}"
    print(f"{r['name']:<22} {dims:<32} {count:<4} {'   ' if r['input_grad'] else '(*)'} "
          f"fwd {r['fwd_ms']:9.3f} ms  bwd {r['bwd_ms']:9.3f} ms  total {r['ms']:9.3f} ms  "
          f"{r['gflops']:7.1f} GFLOP/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions per shape; the median is reported")
    ap.add_argument("--warmup", type=int, default=1, help="untimed repetitions first")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (torch defaults to 1 here)")
    ap.add_argument("--channels-last", action="store_true", help="NHWC input, weight and gradients")
    ap.add_argument("--json", help="also write the results as JSON")
    ap.add_argument("--only", help="only the shapes whose name contains this")
    ap.add_argument("--shapes", default=os.path.join(HERE, "conv_shapes.txt"), help="the shape list")
    args = ap.parse_args()
    if args.repeats < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--repeats and --threads want >= 1, --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    shapes = read_shapes(args.shapes)
    if args.only:
        shapes = [s for s in shapes if args.only in s["name"]]
        if not shapes:
            ap.error(f"no shape name contains {args.only!r}")
    fmt = "nhwc" if args.channels_last else "nchw"
    print(f"torch {torch.__version__} conv2d f32 cpu | threads {torch.get_num_threads()} | {fmt} | "
          f"warmup {args.warmup} | median of {args.repeats} | {args.shapes}", flush=True)

    start = sample_cpu()
    results = []
    for s in shapes:
        results.append(run_one(s, args))
        print_result(results[-1])
    total_ms = sum(r["count"] * r["ms"] for r in results)
    total_flops = sum(r["count"] * r["flops"] for r in results)
    convs = sum(r["count"] for r in results)
    others = others_cpu_share(start, sample_cpu())
    print(f"TOTAL {convs} convs, count-weighted: {total_ms:.3f} ms  {total_flops / (total_ms * 1e6):.1f} GFLOP/s"
          "   ((*) = no input gradient)")
    if others >= 0:
        print(f"other processes used {100 * others:.1f}% of the machine's CPU time during the run"
              + (": the timings are distorted, rerun when the machine is idle" if others > BUSY_SHARE else ""))

    if args.json:
        doc = {
            "impl": "torch", "version": f"torch {torch.__version__} (mkldnn {torch.backends.mkldnn.is_available()})",
            "threads": torch.get_num_threads(), "format": fmt, "dtype": "f32",
            "warmup": args.warmup, "repeats": args.repeats, "shapes": results, "others_cpu": others,
            "total": {"convs": convs, "ms": total_ms, "flops": total_flops,
                      "gflops": total_flops / (total_ms * 1e6)},
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
