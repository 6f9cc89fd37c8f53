#!/usr/bin/env python3
"""Data-parallel scaling model: projects a training step's time, its communication overlap
and the scaling efficiency on machines we do not have, from one step's measured (or
synthesised) backward timeline and an alpha-beta model of the links.

Input: a step's timeline, per GPU
  - F: the time outside backward (forward, loss, optimizer step, loading);
  - B: backward's compute time;
  - the gradient buckets in launch order: bytes, and when each became ready during backward
    (its last gradient computed), in seconds from backward's start.
It comes from a run's <output-dir>/timeline.jsonl (`ringtape train ... --comm-timeline`,
Note [Timeline file] in train/data_parallel.cc; per-field medians over the steps after
--skip-steps), or from --synthetic resnet50 (below).

Assumptions (the model is no better than these):
  1. Weak scaling: every GPU keeps its batch, so F, B and the ready times are the same at
     every GPU count (the timeline's). Stragglers, jitter, network congestion from other jobs,
     and the slowdown that communication kernels cause to compute (NCCL uses SMs and memory
     bandwidth) are ignored: a real run is slower.
  2. Buckets are all-reduced one at a time in launch order (Note [Bucket launch order] of the
     reducer): bucket i starts at max(ready_i, end_{i-1}) and ends t_allreduce(bytes_i) later.
     The optimizer waits for the last bucket: step = F + max(B, end_last).
  3. Overlap = the part of the all-reduce time that lies before backward's end, over the
     all-reduce time (the reducer's definition, distributed/reducer.cc); efficiency = (F + B) / step:
     each GPU's throughput over one GPU's without communication.
  4. The machine: N GPUs, G per node (8), M = N / G nodes. Links are alpha-beta: a message
     costs alpha + bytes / bandwidth. Within a node every GPU has `intra` bus bandwidth (NVLink
     through NVSwitch); between nodes each node has `nics` NICs of `inter` bandwidth
     (rail-optimised: traffic spreads over them). The bus bandwidth of a collective
     spanning nodes is Beff = min(B_intra, nics * B_inter); within one node Beff = B_intra.
  5. Algorithms, with NCCL's own cost model's structure (latency: intra-node hops cost
     alpha_intra, inter-node hops alpha_inter):
       ring: 2(N-1)/N * S/Beff + 2(N-M) alpha_intra + 2(M-1) alpha_inter
             (one node: the textbook 2(N-1)/N * S/B + 2(N-1) alpha)
       tree: 2 S/Beff + 2((G-1) alpha_intra + ceil(log2 M) alpha_inter)
             (NCCL's double binary tree between nodes, a chain within each: every byte goes
             up and down once, so 2 S/B, which the ring's bandwidth term approaches for large
             N; within one node the tree is never faster than the ring)
       library: per bucket the faster of the two (what NCCL's tuner chooses, roughly; NCCL
             also has NVLS/CollNet/SHARP algorithms, not modelled).
  6. Link figures are typical published figures, not measurements: NVLink 4.0 (H100/H200
     SXM, NVSwitch) ~450 GB/s per direction per GPU, alpha ~3 us; InfiniBand NDR 400 Gb/s =
     50 GB/s per NIC, one NIC per GPU, alpha ~5-10 us (7); 100 GbE = 12.5 GB/s, one NIC per
     node, alpha ~20-50 us (30). Achieved bus bandwidth is typically 70-90% of these
     (--link-efficiency scales every bandwidth).

--synthetic resnet50: the bucket layout of torchvision's ResNet50 (25.6M parameters, in
reverse registration order, first bucket 1 MiB, then --bucket-cap-mb, exactly as
distributed/reducer.cc assigns them), with backward compute time assumed proportional to the
conv/fc FLOPs behind each parameter (batch norm, ReLU and pooling are not counted; a conv's
backward is 2x its forward FLOPs, the first conv's 1x: its input needs no gradient). F and
B come from --step-ms and --backward-fraction (defaults: batch 256 per GPU at 7,950 img/s,
MLPerf Training's published ResNet50 rate per H200, 2/3 of the step in backward): an
assumption, not a measurement.

Examples:
  bench/dp_scaling_model.py --synthetic resnet50                      # H200 nodes, NVLink + IB NDR
  bench/dp_scaling_model.py --synthetic resnet50 --inter eth-100g
  bench/dp_scaling_model.py --timeline runs/x/timeline.jsonl --gpus 8,64,512
  bench/dp_scaling_model.py --timeline T.jsonl --intra loopback --fit-allreduce A.json \\
      --gpus 2 --gpus-per-node 2 --measured-step-ms 850          # the CPU check
"""
import argparse
import json
import math
import statistics
import sys

# name: (bandwidth GB/s per direction, alpha us, NICs per node (inter only), description)
INTRA = {
    "nvlink4": (450.0, 3.0, None, "NVLink 4.0 via NVSwitch (H100/H200 SXM): ~450 GB/s per direction per GPU, ~3 us"),
    "pcie5": (50.0, 5.0, None, "PCIe 5.0 x16 through the host: ~50 GB/s per direction, ~5 us"),
    "loopback": (None, None, None, "this machine's processes over TCP loopback (Gloo): fitted, --fit-allreduce"),
}
INTER = {
    "ib-ndr": (50.0, 7.0, 8, "InfiniBand NDR 400 Gb/s = 50 GB/s per NIC, one NIC per GPU, ~5-10 us"),
    "ib-hdr": (25.0, 7.0, 8, "InfiniBand HDR 200 Gb/s = 25 GB/s per NIC, one NIC per GPU, ~5-10 us"),
    "eth-100g": (12.5, 30.0, 1, "100 GbE = 12.5 GB/s, one NIC per node, ~20-50 us"),
}
ALGOS = ("ring", "tree", "library")


class Links:
    def __init__(self, intra_bw, intra_alpha, inter_bw, inter_alpha, nics, gpus_per_node):
        self.intra_bw = intra_bw * 1e9      # bytes/s
        self.intra_alpha = intra_alpha * 1e-6
        self.inter_bw = inter_bw * 1e9
        self.inter_alpha = inter_alpha * 1e-6
        self.nics = nics
        self.g = gpus_per_node

    def shape(self, n):
        """(nodes, bus bandwidth) of a collective over n GPUs."""
        m = max(1, math.ceil(n / self.g))
        bw = self.intra_bw if m == 1 else min(self.intra_bw, self.nics * self.inter_bw)
        return m, bw

    def ring(self, nbytes, n):
        if n == 1:
            return 0.0
        m, bw = self.shape(n)
        return 2 * (n - 1) / n * nbytes / bw + 2 * (n - m) * self.intra_alpha + 2 * (m - 1) * self.inter_alpha

    def tree(self, nbytes, n):
        if n == 1:
            return 0.0
        m, bw = self.shape(n)
        per_node = min(n, self.g)
        return 2 * nbytes / bw + 2 * ((per_node - 1) * self.intra_alpha + math.ceil(math.log2(m)) * self.inter_alpha)

    def time(self, algo, nbytes, n):
        if algo == "ring":
            return self.ring(nbytes, n)
        if algo == "tree":
            return self.tree(nbytes, n)
        return min(self.ring(nbytes, n), self.tree(nbytes, n))


def union_before(intervals, limit):
    """Length of the union of [a, b) clipped to end at `limit`."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted((a, min(b, limit)) for a, b in intervals):
        if b <= a:
            continue
        if cur_b is not None and a <= cur_b:
            cur_b = max(cur_b, b)
        else:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def simulate(tl, links, algo, n):
    """One step at n GPUs: dict of step, comm (union), exposed, overlap, efficiency (seconds/fractions)."""
    end = 0.0
    iv = []
    for nbytes, ready in tl["buckets"]:
        start = max(ready, end)
        end = start + links.time(algo, nbytes, n)
        iv.append((start, end))
    F, B = tl["F"], tl["B"]
    step = F + max(B, end)
    comm = union_before(iv, math.inf)
    hidden = union_before(iv, B)
    return {"step": step, "comm": comm, "exposed": step - (F + B),
            "overlap": hidden / comm if comm > 0 else 1.0, "efficiency": (F + B) / step}


# ---- timelines -----------------------------------------------------------------------------

def load_timeline(path, skip):
    """Per-field medians of a timeline.jsonl's steps after the first `skip`."""
    steps = [json.loads(line) for line in open(path) if line.strip()]
    if len(steps) <= skip:
        sys.exit(f"{path}: {len(steps)} step(s), fewer than --skip-steps {skip} + 1")
    steps = steps[skip:]
    nb = len(steps[0]["buckets"])
    F = statistics.median(s["before_backward_s"] for s in steps if s["before_backward_s"] is not None)
    B = statistics.median(s["backward_end_s"] for s in steps)
    buckets = [(steps[0]["buckets"][i]["bytes"], statistics.median(s["buckets"][i]["ready"] for s in steps))
               for i in range(nb)]
    period = [s["before_backward_s"] + s["wait_end_s"] for s in steps if s["before_backward_s"] is not None]
    comm = []
    for s in steps:  # the measured all-reduce time per step (the union of the buckets' intervals)
        iv = [(b["launched"], b["completed"]) for b in s["buckets"] if b["completed"] >= 0]
        comm.append(union_before(iv, math.inf))
    return {"F": F, "B": B, "buckets": buckets, "source": f"{path} ({len(steps)} steps)",
            "world": steps[0]["world_size"], "measured_period": statistics.median(period) if period else None,
            "measured_comm": statistics.median(comm)}


def resnet50_params():
    """(name, numel, backward multiply-adds per image behind it) in registration order, 224x224."""
    out = []

    def conv(name, cin, cout, k, hw_out, first=False):
        macs = cin * cout * k * k * hw_out * hw_out
        out.append((name + ".weight", cout * cin * k * k, macs * (1 if first else 2)))

    def bn(name, c):
        out.append((name + ".weight", c, 0))
        out.append((name + ".bias", c, 0))

    conv("conv1", 3, 64, 7, 112, first=True)
    bn("bn1", 64)
    cin, hw = 64, 56
    for li, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], 1):
        for b in range(blocks):
            p = f"layer{li}.{b}"
            s = stride if b == 0 else 1
            hw_out = hw // s
            conv(p + ".conv1", cin, width, 1, hw)          # v1.5: the stride is on the 3x3
            bn(p + ".bn1", width)
            conv(p + ".conv2", width, width, 3, hw_out)
            bn(p + ".bn2", width)
            conv(p + ".conv3", width, width * 4, 1, hw_out)
            bn(p + ".bn3", width * 4)
            if b == 0:
                conv(p + ".downsample.0", cin, width * 4, 1, hw_out)
                bn(p + ".downsample.1", width * 4)
            cin, hw = width * 4, hw_out
    out.append(("fc.weight", 1000 * 2048, 2 * 2048 * 1000))
    out.append(("fc.bias", 1000, 0))
    return out


def buckets_like_reducer(sizes_bytes, first_cap, cap):
    """distributed/reducer.cc's assignment: reverse registration order, the open bucket's cap is
    first_cap while it is the first, a parameter that does not fit opens a new bucket.
    Returns lists of registration indices."""
    groups, used = [], []
    for k in reversed(range(len(sizes_bytes))):
        c = first_cap if len(groups) == 1 else cap
        if not groups or used[-1] + sizes_bytes[k] > c:
            groups.append([])
            used.append(0)
        groups[-1].append(k)
        used[-1] += sizes_bytes[k]
    return groups


def synthetic_resnet50(step_s, backward_fraction, grad_bytes, first_cap, cap):
    params = resnet50_params()
    sizes = [n * 4 for _, n, _ in params]  # the buckets hold the fp32 gradients (masters')
    total = sum(m for _, _, m in params)
    # Backward runs from the last layer to the first: parameter k is ready when the work of
    # every parameter after it, and its own, is done.
    ready, acc = [0.0] * len(params), 0.0
    for k in reversed(range(len(params))):
        acc += params[k][2]
        ready[k] = acc / total
    B = step_s * backward_fraction
    buckets = []
    for g in buckets_like_reducer(sizes, first_cap, cap):
        # --grad-reduce-dtype bf16 carries each bucket in 2 bytes per element (Note [Reduce dtype]).
        buckets.append((sum(params[k][1] for k in g) * grad_bytes, max(ready[k] for k in g) * B))
    n = sum(p[1] for p in params)
    return {"F": step_s - B, "B": B, "buckets": buckets, "world": None, "measured_period": None,
            "measured_comm": None,
            "source": f"synthetic ResNet50 ({n / 1e6:.2f}M parameters, {grad_bytes}-byte gradients, "
                      f"{len(buckets)} buckets; step {step_s * 1e3:.1f} ms assumed, {backward_fraction:.0%} backward)"}


# ---- the loopback fit ----------------------------------------------------------------------

def fit_alpha_beta(path, world, algo):
    """The ring formula fitted to allreduce_bench's --json rows for (world, algo)."""
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("world") == world and r.get("algo") == algo:
                rows.append((float(r["bytes"]), float(r["seconds"])))
    if len(rows) < 2:
        sys.exit(f"{path}: fewer than 2 rows for world {world}, algo {algo}")
    return fit_rows(rows, world)


def fit_timeline(path, skip):
    """The ring formula fitted to the all-reduces of a timeline.jsonl itself: each bucket's
    time from when it could start (launched, or the previous bucket's completion) to its
    completion. Not a prediction: it tells the link's share of an error from the schedule's."""
    steps = [json.loads(line) for line in open(path) if line.strip()][skip:]
    rows = []
    for s in steps:
        prev = -math.inf
        for b in s["buckets"]:
            if b["completed"] >= 0:
                rows.append((float(b["bytes"]), b["completed"] - max(b["launched"], prev)))
                prev = b["completed"]
    return fit_rows(rows, steps[0]["world_size"])


def fit_rows(rows, world):
    """Least squares of t = 2(W-1)/W * S/B + 2(W-1) alpha over (bytes, seconds) rows, weighted
    by 1/t (relative errors). Returns (GB/s, us, max relative residual)."""
    # t = x * p + q with x = 2(W-1)/W * S, p = 1/B, q = 2(W-1) alpha; weights 1/t^2.
    sw = sxx = sx = sy = sxy = 0.0
    for s, t in rows:
        w = 1.0 / (t * t)
        x = 2 * (world - 1) / world * s
        sw += w; sx += w * x; sy += w * t; sxx += w * x * x; sxy += w * x * t
    det = sw * sxx - sx * sx
    p = (sw * sxy - sx * sy) / det
    q = (sxx * sy - sx * sxy) / det
    p = max(p, 1e-15)
    q = max(q, 0.0)
    resid = max(abs((2 * (world - 1) / world * s * p + q) - t) / t for s, t in rows)
    return 1.0 / p / 1e9, q / (2 * (world - 1)) * 1e6, resid


# ---- main ----------------------------------------------------------------------------------

def parse_list(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--timeline", help="a run's timeline.jsonl (ringtape train --comm-timeline)")
    src.add_argument("--synthetic", choices=["resnet50"], help="a synthesised timeline (see above)")
    ap.add_argument("--skip-steps", type=int, default=2, help="timeline steps left out at the start (warm-up)")
    ap.add_argument("--step-ms", type=float, default=256 / 7950 * 1e3,
                    help="synthetic: one GPU's step without communication (default: batch 256 at 7,950 img/s)")
    ap.add_argument("--backward-fraction", type=float, default=2 / 3, help="synthetic: share of the step in backward")
    ap.add_argument("--grad-bytes", type=int, default=4,
                    help="synthetic: bytes per gradient element the all-reduce carries (4 fp32; 2 with "
                         "--grad-reduce-dtype bf16); the buckets are laid out by the fp32 gradients either way")
    ap.add_argument("--bucket-cap-mb", type=float, default=25, help="synthetic: bucket cap (the first is 1 MiB)")
    ap.add_argument("--batch", type=int, default=256, help="images per GPU per step (for img/s)")
    ap.add_argument("--gpus", default="8,16,32,64,128,256,512,1024", help="GPU counts, comma-separated")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--intra", default="nvlink4", choices=sorted(INTRA))
    ap.add_argument("--inter", default="ib-ndr", help="inter-node preset (" + ", ".join(sorted(INTER)) + ") or all")
    ap.add_argument("--intra-bw", type=float, help="GB/s, overrides the preset's")
    ap.add_argument("--intra-alpha-us", type=float)
    ap.add_argument("--inter-bw", type=float, help="GB/s per NIC, overrides the preset's")
    ap.add_argument("--inter-alpha-us", type=float)
    ap.add_argument("--nics-per-node", type=int)
    ap.add_argument("--link-efficiency", type=float, default=1.0, help="multiplies every bandwidth (achieved/nominal)")
    ap.add_argument("--fit-allreduce", help="allreduce_bench --json output: fit the loopback preset's alpha/beta")
    ap.add_argument("--fit-algo", default="library", help="which algorithm's rows to fit (the run's --allreduce)")
    ap.add_argument("--algos", default="ring,tree,library")
    ap.add_argument("--measured-step-ms", type=float, help="a measured step at --gpus: print the prediction's error")
    ap.add_argument("--json", action="store_true", help="also print one JSON line per row")
    a = ap.parse_args(argv)

    if a.timeline:
        tl = load_timeline(a.timeline, a.skip_steps)
    else:
        tl = synthetic_resnet50(a.step_ms / 1e3, a.backward_fraction, a.grad_bytes, min(1 << 20, int(a.bucket_cap_mb * 2**20)),
                                int(a.bucket_cap_mb * 2**20))
    gpus = parse_list(a.gpus)
    algos = [x for x in a.algos.split(",") if x]
    for x in algos:
        if x not in ALGOS:
            ap.error(f"--algos: {x} is not one of {', '.join(ALGOS)}")

    ibw, ialpha, _, idesc = INTRA[a.intra]
    if a.intra == "loopback":
        if a.fit_allreduce:
            world = max(gpus) if len(gpus) == 1 else 2
            ibw, ialpha, resid = fit_alpha_beta(a.fit_allreduce, world, a.fit_algo)
            idesc = (f"loopback fitted to {a.fit_allreduce} ({a.fit_algo}, {world} ranks): "
                     f"{ibw:.3f} GB/s, alpha {ialpha:.0f} us, worst relative residual {resid:.0%}")
        elif a.intra_bw is None or a.intra_alpha_us is None:
            ap.error("--intra loopback needs --fit-allreduce FILE or --intra-bw and --intra-alpha-us")
    ibw = a.intra_bw if a.intra_bw is not None else ibw
    ialpha = a.intra_alpha_us if a.intra_alpha_us is not None else ialpha
    inters = sorted(INTER) if a.inter == "all" else [a.inter]
    for name in inters:
        if name not in INTER:
            ap.error(f"--inter: {name} is not one of {', '.join(sorted(INTER))} or all")

    total_bytes = sum(b for b, _ in tl["buckets"])
    print(f"timeline: {tl['source']}")
    print(f"  F (outside backward) {tl['F'] * 1e3:.2f} ms, B (backward) {tl['B'] * 1e3:.2f} ms, "
          f"{len(tl['buckets'])} buckets, {total_bytes / 2**20:.1f} MiB: " +
          ", ".join(f"{b / 2**20:.2f} MiB @ {r * 1e3:.1f} ms" for b, r in tl["buckets"]))
    if tl["measured_comm"] is not None:
        print(f"  measured in that run ({tl['world']} ranks): all-reduce {tl['measured_comm'] * 1e3:.2f} ms per step, "
              f"step period {tl['measured_period'] * 1e3:.2f} ms (timeline's own clock)")
    print(f"intra-node: {idesc}" + (f"; used: {ibw:.3f} GB/s, alpha {ialpha:.1f} us" if a.intra != "loopback" or not a.fit_allreduce else ""))
    rows = []
    for name in inters:
        ebw, ealpha, enics, edesc = INTER[name]
        ebw = a.inter_bw if a.inter_bw is not None else ebw
        ealpha = a.inter_alpha_us if a.inter_alpha_us is not None else ealpha
        enics = a.nics_per_node if a.nics_per_node is not None else enics
        links = Links(ibw * a.link_efficiency, ialpha, ebw * a.link_efficiency, ealpha, enics, a.gpus_per_node)
        if max(gpus) > a.gpus_per_node:
            print(f"inter-node: {edesc}; used: {ebw:.1f} GB/s x {enics} NIC(s) per node, alpha {ealpha:.1f} us"
                  f"{'' if a.link_efficiency == 1 else f', bandwidths x {a.link_efficiency}'}")
        print(f"{'GPUs':>5} {'nodes':>5} {'algo':>8} {'all-reduce ms':>13} {'exposed ms':>10} {'step ms':>8} "
              f"{'overlap':>8} {'efficiency':>10} {'img/s':>10}")
        for n in gpus:
            for algo in algos:
                r = simulate(tl, links, algo, n)
                m, _ = links.shape(n)
                ips = n * a.batch / r["step"]
                print(f"{n:>5} {m:>5} {algo:>8} {r['comm'] * 1e3:>13.2f} {r['exposed'] * 1e3:>10.2f} "
                      f"{r['step'] * 1e3:>8.2f} {r['overlap']:>8.1%} {r['efficiency']:>10.1%} {ips:>10.0f}")
                row = dict(r, gpus=n, nodes=m, algo=algo, inter=name, img_per_s=ips)
                rows.append(row)
                if a.json:
                    print(json.dumps(row))
        if a.measured_step_ms is not None:
            for algo in algos:
                pred = [r for r in rows if r["inter"] == name and r["algo"] == algo][-1]["step"] * 1e3
                print(f"check ({algo}): predicted {pred:.2f} ms, measured {a.measured_step_ms:.2f} ms, "
                      f"error {(pred - a.measured_step_ms) / a.measured_step_ms:+.1%}; without communication "
                      f"(F + B) {(tl['F'] + tl['B']) * 1e3:.2f} ms, "
                      f"error {((tl['F'] + tl['B']) * 1e3 - a.measured_step_ms) / a.measured_step_ms:+.1%}")
    return rows


if __name__ == "__main__":
    main()
