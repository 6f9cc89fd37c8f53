"""PyTorch's twin of one bench/run_dp_scaling.sh configuration: the same ResNet, global batch
and thread budget, trained with torch.nn.parallel.DistributedDataParallel over Gloo on
--nproc CPU processes (one process: the plain model, as ringtape trains with one process).

Each process gets --global-batch / nproc images and --threads / nproc threads; SGD with
momentum 0.9 and weight decay 5e-4, lr 0.1, cross-entropy, channels-last, a fixed random
batch per rank (the data pipeline is not what is measured). Rank 0 times every step
(zero_grad, forward, loss, backward with DDP's bucketed all-reduce, optimizer step) and
prints one JSON line: the per-step times and their median after --warmup steps.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_step_bench_torch import make_model  # noqa: E402  (the same torchvision-based ResNet)


def run(rank, a, port, out):
    n = a.nproc
    torch.set_num_threads(max(1, a.threads // n))
    torch.manual_seed(0)
    c, h, w = (int(x) for x in a.size.split("x"))
    model = make_model(a.model, a.classes, c, a.width, a.small_stem, a.stem_stride).to(memory_format=torch.channels_last)
    if n > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=n)
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)
    g = torch.Generator().manual_seed(1 + rank)
    b = a.global_batch // n
    x = torch.randn(b, c, h, w, generator=g).to(memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (b,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    times = []
    for _ in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    if n > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        steps = times[a.warmup:]
        with open(out, "w") as f:
            json.dump({"impl": "torch", "nproc": n, "threads_per_proc": max(1, a.threads // n), "batch_per_proc": b,
                       "global_batch": a.global_batch, "step_s": statistics.median(steps), "steps_s": steps,
                       "torch": torch.__version__}, f)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="threads in all (split over the processes)")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--size", default="3x32x32")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--small-stem", action="store_true")
    ap.add_argument("--stem-stride", type=int, default=1)
    ap.add_argument("--bucket-cap-mb", type=float, default=25)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", required=True, help="where rank 0 writes its result")
    a = ap.parse_args()
    if a.global_batch % a.nproc:
        ap.error("--global-batch must divide by --nproc")
    if a.nproc == 1:
        run(0, a, 0, a.json)
    else:
        mp.spawn(run, args=(a, free_port(), a.json), nprocs=a.nproc, join=True)
    with open(a.json) as f:
        print(f.read())


if __name__ == "__main__":
    main()
