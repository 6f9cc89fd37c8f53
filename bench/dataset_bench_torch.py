#!/usr/bin/python3
"""torchvision's half of the folders-vs-shards loader benchmark (bench/dataset_bench.cc).

Run with Debian's interpreter, which has torch 1.13 / torchvision 0.14 (the pyenv python3 on
PATH has none), under MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000
(PyTorch at its best, as in the other benchmarks; run_shard_bench.sh sets them):

  /usr/bin/python3 bench/dataset_bench_torch.py --data-path ROOT [--workers 1] [--batch 256]
      [--epochs 3] [--warmup 1] [--seed 0] [--no-pin] [--json FILE]

The reference recipe's training loader: datasets.ImageFolder(ROOT, transform=Compose([
RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet mean, std)]))
through DataLoader(batch_size=B, shuffle=True, num_workers=T, persistent_workers=True), so a
(B, 3, 224, 224) float32 batch per step; ROOT holds the class folders (e.g. DIR/train).
torch.set_num_threads(1) here and in every worker.

Cores: unless --no-pin, this process is pinned to the first max(1, T) CPUs it may run on
before the workers start (they inherit it), so that at T = 1 the worker and the main process
share one core: the per-core rate. One measured pass = one whole epoch after --warmup untimed
ones (page cache warm, workers started). Prints progress on stderr and one JSON line on
stdout: the median epoch's images/s, every epoch's, CPU seconds per image (this process and
its workers) and how busy the rest of the machine was.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

# /proc-based CPU accounting (this process + its DataLoader workers) and the machine's.
from jpeg_pipeline_bench_torch import BUSY_SHARE, MEAN, STD, others_cpu_share, sample_cpu


def pin_to_cpus(n):
    """Pins this process to the first n CPUs of its mask; returns them, or None when too few."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < n:
        return None
    os.sched_setaffinity(0, allowed[:n])
    return allowed[:n]


def worker_init(_):
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-path", required=True, help="the ImageFolder root (class folders)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.workers < 0 or args.batch < 1 or args.epochs < 1 or args.warmup < 0:
        sys.exit("want --workers >= 0, --batch >= 1, --epochs >= 1, --warmup >= 0")

    cpus = None
    if not args.no_pin:
        cpus = pin_to_cpus(max(1, args.workers))
        if cpus is None:
            print(f"WARNING: cannot pin to {max(1, args.workers)} CPUs; running unpinned", file=sys.stderr)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    ds = datasets.ImageFolder(args.data_path, transform=transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ]))
    open_s = time.perf_counter() - t0
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0, worker_init_fn=worker_init if args.workers else None)
    version = f"torch {torch.__version__}, torchvision {torchvision.__version__}"
    print(f"torchvision ImageFolder | {version} | {args.data_path} | {len(ds)} examples in {len(ds.classes)} "
          f"classes | workers {args.workers} | batch {args.batch} | cpus {cpus or 'unpinned'} | opened in "
          f"{open_s:.2f} s | warmup {args.warmup} | median of {args.epochs} epochs", file=sys.stderr, flush=True)

    rates, others, cpu_per_img = [], [], []
    first_mean = None
    images = 0
    for e in range(args.warmup + args.epochs):
        a = sample_cpu()
        n = 0
        for x, _y in loader:
            if first_mean is None:
                assert x.dtype == torch.float32 and tuple(x.shape[1:]) == (3, 224, 224), (x.dtype, x.shape)
                first_mean = float(x.mean())
            n += x.shape[0]
        b = sample_cpu()
        assert n == len(ds), (n, len(ds))
        sec = b[0] - a[0]
        if e < args.warmup:
            print(f"warm-up epoch {e + 1}: {sec:.3f} s, {n / sec:.1f} images/s", file=sys.stderr, flush=True)
            continue
        images = n
        rates.append(n / sec)
        others.append(others_cpu_share(a, b))
        cpu_per_img.append((b[2] - a[2]) / n)
        print(f"epoch {e - args.warmup + 1}: {sec:.3f} s, {rates[-1]:.1f} images/s, {1e3 * cpu_per_img[-1]:.2f} ms "
              f"CPU/image, others {100 * others[-1]:.1f}%", file=sys.stderr, flush=True)
    rate, others_med = statistics.median(rates), statistics.median(others)
    if others_med > BUSY_SHARE:
        print(f"WARNING: other processes used {100 * others_med:.1f}% of the machine's CPU time: the timings are "
              f"distorted, rerun when idle", file=sys.stderr)
    out = {
        "impl": "torchvision", "version": version, "data_path": args.data_path, "examples": len(ds),
        "workers": args.workers, "cpus": ",".join(map(str, cpus)) if cpus else "", "batch": args.batch,
        "normalize": True, "warmup": args.warmup, "epochs": args.epochs, "images_per_epoch": images,
        "img_per_s": rate, "img_per_s_per_worker": rate / max(1, args.workers), "epoch_img_per_s": rates,
        "cpu_s_per_img": statistics.median(cpu_per_img), "others_cpu": others_med, "epoch_others_cpu": others,
        "first_batch_mean": first_mean, "open_s": open_s,
    }
    line = json.dumps(out)
    print(line, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
