#!/usr/bin/python3
"""torchvision's half of the JPEG input-pipeline benchmark (bench/jpeg_pipeline_bench.cc).

Run with Debian's interpreter, which has torch 1.13 / torchvision 0.14 (the pyenv python3 on
PATH has none):

  /usr/bin/python3 bench/jpeg_pipeline_bench_torch.py --files DIR [--workers 0] [--batch 256]
      [--rounds 5] [--warmup 1] [--size 224] [--seed 0]
      [--policy none|imagenet|ra|ta_wide|augmix] [--normalize] [--breakdown] [--json FILE]

Per image, what a torchvision ImageNet training loader does on the CPU when normalisation is
left to the GPU: open the file and PIL.Image.open(f).convert("RGB") (torchvision's
pil_loader), RandomResizedCrop(size), RandomHorizontalFlip(), PILToTensor() (uint8, CHW);
then torch.stack of B images into a (B, 3, size, size) uint8 batch (default_collate).
--policy adds the automatic augmentation on the PIL image after the flip, bilinear, with
the reference recipe's defaults (torchvision's references/classification/presets.py,
ClassificationPresetTrain: AutoAugment(IMAGENET), RandAugment(magnitude 9),
TrivialAugmentWide, AugMix(severity 3)). --normalize is that preset's end: PILToTensor,
ConvertImageDtype(torch.float), Normalize(ImageNet mean, std) per image, so the batch is
(B, 3, size, size) float32.

--workers 0: everything in this process, one core (the per-core figure). --workers N: a
torch DataLoader with N worker processes (persistent, so starting them is not timed), each
building whole batches; one round then covers max(files, 2*N*B) images rounded up to a
multiple of N*B (the files repeated), so that every worker has the same number of batches.
torch.set_num_threads(1) everywhere. Reported: images/s per round, the median over the
rounds after `warmup`, and per worker.

PIL decodes at full size here: torchvision never calls Image.draft() (JPEG DCT scaling), and
this script counts draft() calls to show it.
"""

import argparse
import io
import json
import os
import resource
import statistics
import sys
import time

import PIL
import torch
import torchvision
from PIL import Image, JpegImagePlugin
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

BUSY_SHARE = 0.02  # other processes' share of the machine's CPU time above which we warn

DRAFT_CALLS = 0
_orig_draft = JpegImagePlugin.JpegImageFile.draft


def _counting_draft(self, *args, **kwargs):
    global DRAFT_CALLS
    DRAFT_CALLS += 1
    return _orig_draft(self, *args, **kwargs)


JpegImagePlugin.JpegImageFile.draft = _counting_draft


def list_jpegs(d):
    if not os.path.isdir(d):
        sys.exit(f"--files: {d!r} is not a directory")
    files = sorted(os.path.join(d, f) for f in os.listdir(d)
                   if f.lower().endswith((".jpg", ".jpeg")) and os.path.isfile(os.path.join(d, f)))
    if not files:
        sys.exit(f"no *.jpg or *.jpeg files in {d!r}")
    return files


def pil_loader(path):
    # torchvision.datasets.folder.pil_loader
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's, as in the recipe
POLICIES = ("none", "imagenet", "ra", "ta_wide", "augmix")


def make_policy(policy):
    """presets.py's auto_augment_policy branch, with its interpolation (bilinear) and defaults."""
    bilinear = transforms.InterpolationMode.BILINEAR
    if policy == "imagenet":
        return transforms.AutoAugment(transforms.AutoAugmentPolicy.IMAGENET, interpolation=bilinear)
    if policy == "ra":
        return transforms.RandAugment(interpolation=bilinear, magnitude=9)
    if policy == "ta_wide":
        return transforms.TrivialAugmentWide(interpolation=bilinear)
    if policy == "augmix":
        return transforms.AugMix(interpolation=bilinear, severity=3)
    return None


def make_normalize():
    return transforms.Compose([transforms.ConvertImageDtype(torch.float), transforms.Normalize(MEAN, STD)])


def make_transform(size, policy="none", normalize=False):
    steps = [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip()]
    aug = make_policy(policy)
    if aug is not None:
        steps.append(aug)
    steps.append(transforms.PILToTensor())
    if normalize:
        steps.append(make_normalize())
    return transforms.Compose(steps)


class Files(Dataset):
    def __init__(self, files, length, size, policy, normalize):
        self.files, self.length, self.transform = files, length, make_transform(size, policy, normalize)

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.transform(pil_loader(self.files[i % len(self.files)]))


def children_cpu_s():
    """CPU seconds of this process's live children (DataLoader workers), from /proc."""
    me, total = os.getpid(), 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[1]) == me:  # ppid
            total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


def sample_cpu():
    """(wall s, all CPUs' non-idle s incl. steal or None, CPU s of this process and its workers)."""
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
    return t, busy, ru.ru_utime + ru.ru_stime + children_cpu_s()


def others_cpu_share(a, b):
    if a[1] is None or b[1] is None or b[0] <= a[0]:
        return -1.0
    return max(0.0, (b[1] - a[1]) - (b[2] - a[2])) / ((b[0] - a[0]) * os.cpu_count())


def breakdown(files, size, policy, normalize):
    """Single-process us/image: read bytes, decode (open + convert), crop+resize, flip, [policy,]
    to tensor[, convert + normalise]."""
    rrc, flip = transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip()
    to_tensor = transforms.PILToTensor()
    aug, norm = make_policy(policy), make_normalize() if normalize else None
    t = dict(read=0.0, decode=0.0, crop_resize=0.0, flip=0.0)
    if aug is not None:
        t["augment"] = 0.0
    t["to_tensor"] = 0.0
    if norm is not None:
        t["normalize"] = 0.0
    for path in files:
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            data = f.read()
        t1 = time.perf_counter()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        t2 = time.perf_counter()
        img = rrc(img)
        t3 = time.perf_counter()
        img = flip(img)
        t4 = time.perf_counter()
        if aug is not None:
            img = aug(img)
        t5 = time.perf_counter()
        x = to_tensor(img)
        t6 = time.perf_counter()
        if norm is not None:
            norm(x)
        t7 = time.perf_counter()
        for k, a, b in (("read", t0, t1), ("decode", t1, t2), ("crop_resize", t2, t3), ("flip", t3, t4),
                        ("augment", t4, t5), ("to_tensor", t5, t6), ("normalize", t6, t7)):
            if k in t:
                t[k] += b - a
    return {k: v * 1e6 / len(files) for k, v in t.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--policy", choices=POLICIES, default="none")
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.workers < 0 or args.batch < 1 or args.rounds < 1 or args.warmup < 0 or args.size < 1:
        sys.exit("want --workers >= 0, --batch >= 1, --rounds >= 1, --warmup >= 0, --size >= 1")

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    files = list_jpegs(args.files)
    mean_kb = sum(os.path.getsize(f) for f in files) / len(files) / 1000
    if args.workers == 0:
        length = len(files)
    else:
        per = args.workers * args.batch
        length = -(-max(len(files), 2 * per) // per) * per
    from PIL import features
    version = (f"torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow {PIL.__version__} "
               f"(libjpeg-turbo: {features.check_feature('libjpeg_turbo')})")
    print(f"torchvision PIL pipeline | {version} | {len(files)} files (mean {mean_kb:.1f} KB) in {args.files} | "
          f"workers {args.workers} | batch {args.batch} | {length} images/round | size {args.size} | "
          f"policy {args.policy} | normalize {'f32 per image' if args.normalize else 'no (uint8 batch)'} | "
          f"warmup {args.warmup} | median of {args.rounds}", flush=True)

    # Sanity: PIL decodes at full size (no draft), the output is a uint8 batch of the right shape.
    with Image.open(files[0]) as probe:
        header_size = probe.size
        full = probe.convert("RGB")
    assert full.size == header_size, "PIL decoded at a reduced size"

    bd = None
    if args.breakdown:
        bd = breakdown(files, args.size, args.policy, args.normalize)
        total = sum(bd.values())
        print("breakdown, 1 process, us/image: " + " | ".join(f"{k} {v:.0f}" for k, v in bd.items()) +
              f" | sum {total:.0f} | read share {100 * bd['read'] / total:.1f}%", flush=True)

    ds = Files(files, length, args.size, args.policy, args.normalize)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False, num_workers=args.workers,
                        persistent_workers=args.workers > 0, drop_last=False)
    rates, others = [], []
    start = None
    for r in range(args.warmup + args.rounds):
        if r == args.warmup:
            start = sample_cpu()
        a = sample_cpu()
        n = 0
        for batch in loader:
            if r == 0 and n == 0:
                want = torch.float32 if args.normalize else torch.uint8
                assert batch.dtype == want and tuple(batch.shape[1:]) == (3, args.size, args.size), batch.shape
            n += batch.shape[0]
        b = sample_cpu()
        assert n == length, (n, length)
        if r < args.warmup:
            continue
        sec = b[0] - a[0]
        rates.append(n / sec)
        others.append(others_cpu_share(a, b))
        per = rates[-1] / max(1, args.workers)
        print(f"round {r - args.warmup + 1}: {sec:.3f} s, {rates[-1]:.1f} images/s ({per:.1f} per worker), "
              f"others {100 * others[-1]:.1f}%", flush=True)
    others_all = others_cpu_share(start, sample_cpu())
    rate = statistics.median(rates)
    procs = max(1, args.workers)
    config = f" policy {args.policy}" + (" normalize" if args.normalize else "")
    print(f"RESULT torchvision workers {args.workers}{config}: {rate:.1f} images/s, {rate / procs:.1f} per process "
          f"(median of {args.rounds} rounds); Image.draft() calls: {DRAFT_CALLS} (in this process)")
    if others_all >= 0:
        warn = ": WARNING: the timings are distorted, rerun when idle" if others_all > BUSY_SHARE else ""
        print(f"other processes used {100 * others_all:.1f}% of the machine's CPU time during the timed rounds{warn}")
    if args.json:
        out = {
            "impl": "torchvision", "version": version, "workers": args.workers, "processes": procs,
            "batch": args.batch, "size": args.size, "policy": args.policy, "normalize": args.normalize,
            "files": len(files), "images_per_round": length,
            "mean_kb": mean_kb, "warmup": args.warmup, "rounds": args.rounds, "img_per_s": rate,
            "img_per_s_per_process": rate / procs, "round_img_per_s": rates, "round_others_cpu": others,
            "others_cpu": others_all, "draft_calls": DRAFT_CALLS, "breakdown_us": bd,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
