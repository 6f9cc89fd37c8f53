#!/usr/bin/python3
"""Table of run_jpeg_pipeline_bench.sh's results (ringtape vs torchvision JPEG pipeline).

  compare_jpeg_pipeline_bench.py --out DIR --corpus DIR [--threads 1,2] [--rounds R]
                                 [--gpu-rate 8000] [--target 2.0] [--check]

Reads DIR/rt_<name>.<r>.json and DIR/tv_<name>.<r>.json (r = 1..R), takes the median of
img_per_s over the rounds, prints the table and writes DIR/summary.json. The configuration
(--policy, --normalize) comes from the JSON files, labels the rows and must be the same on
both sides (else a problem is reported). ratio = ringtape
images/s / torchvision images/s (higher is better for ringtape). Cores for a GPU at
--gpu-rate images/s = rate / (images/s per core). --check exits 1 when ringtape's per-core
ratio is under --target (or a file is missing).
"""

import argparse
import json
import math
import os
import statistics
import sys

from PIL import Image

BUSY_SHARE = 0.02  # as in the two programs


def load(out, prefix, name, rounds, problems):
    docs = []
    for r in range(1, rounds + 1):
        p = os.path.join(out, f"{prefix}_{name}.{r}.json")
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            problems.append(f"cannot read {p}: {e}")
    if not docs:
        return None
    return {
        "img_per_s": statistics.median(d["img_per_s"] for d in docs),
        "rounds": [d["img_per_s"] for d in docs],
        "others_cpu": max(d.get("others_cpu", -1) for d in docs),
        "first": docs[0],
    }


POLICY_NAMES = {"none": "", "imagenet": "AutoAugment(IMAGENET)", "ra": "RandAugment(9)",
                "ta_wide": "TrivialAugmentWide", "augmix": "AugMix(3)"}


def config_of(doc):
    """(short label, description of the steps) of one program's JSON."""
    policy, norm = doc.get("policy", "none"), bool(doc.get("normalize", False))
    label = "decode+RRC+flip" + (f"+{policy}" if policy != "none" else "") + ("+normalize" if norm else "")
    steps = f"RandomResizedCrop({doc['size']}) + flip" + (f" + {POLICY_NAMES.get(policy, policy)} (bilinear)"
                                                          if policy != "none" else "")
    if norm:
        steps += " + normalise (ImageNet mean/std)"
    return label, steps, policy, norm


def corpus_stats(d):
    files = sorted(f for f in os.listdir(d) if f.lower().endswith((".jpg", ".jpeg")))
    nbytes = pixels = 0
    for f in files:
        p = os.path.join(d, f)
        nbytes += os.path.getsize(p)
        with Image.open(p) as im:
            pixels += im.size[0] * im.size[1]
    stats = {"files": len(files), "mean_kb": nbytes / len(files) / 1000, "mean_kpixel": pixels / len(files) / 1000,
             "bits_per_pixel": 8 * nbytes / pixels, "source": "given directory"}
    try:
        with open(os.path.join(d, "corpus.json")) as f:
            made = json.load(f)
        stats["source"] = f"{made['source']}, quality {made['quality']}, {made['subsampling']}"
    except (OSError, ValueError, KeyError):
        pass
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gpu-rate", type=float, default=8000)
    ap.add_argument("--target", type=float, default=2.0)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    problems = []
    L = lambda prefix, name: load(args.out, prefix, name, args.rounds, problems)  # noqa: E731

    rt1, rt1_full, tv_in = L("rt", "t1_region"), L("rt", "t1_full"), L("tv", "inproc")
    rows = []
    for t in threads:
        rows.append((t, L("rt", f"t{t}_region") if t > 1 else rt1, L("tv", f"w{t}")))
    if rt1 is None or tv_in is None:
        print("\n".join(problems))
        sys.exit(1)

    cs = corpus_stats(args.corpus)
    rtf, tvf = rt1["first"], tv_in["first"]
    label, steps, policy, norm = config_of(rtf)
    for _, r, v in rows:
        for x in (r, v, rt1_full):
            if x is not None and config_of(x["first"])[0] != label:
                problems.append(f"configuration mismatch: {config_of(x['first'])[0]} next to {label}")
    if config_of(tvf)[0] != label:
        problems.append(f"configuration mismatch: torchvision {config_of(tvf)[0]}, ringtape {label}")
    S = rtf['size']
    out_batch = (f"({rtf['batch']}, 3, {S}, {S}) float32 batch" if norm else
                 f"({rtf['batch']}, {S}, {S}, 3) uint8 batch")
    lines = [
        f"JPEG input pipeline [{label}]: read file + decode + {steps} -> {out_batch}",
        f"corpus: {cs['files']} JPEGs ({cs['source']}) in {args.corpus}: mean {cs['mean_kb']:.1f} KB, "
        f"{cs['mean_kpixel']:.0f} kpixel, {cs['bits_per_pixel']:.2f} bits/pixel",
        f"ringtape: train_transform, {rtf['version']}; torchvision: {tvf['version']}, PIL pipeline "
        f"(full-size decode: Image.draft() calls {tvf.get('draft_calls')})",
        f"medians over {args.rounds} rounds of each program's median of {rtf['rounds']} passes",
    ]
    if norm:
        lines.append("normalise: torchvision per image in its workers (ConvertImageDtype + Normalize, then "
                     "default_collate); ringtape per batch on the CPU with the engine's normalize_pixels, its "
                     "time included (in training ringtape normalises on the GPU)")
    lines += [
        "",
        "| config | threads | ringtape img/s | torchvision img/s | ratio | ringtape img/s/core | "
        "torchvision img/s/core |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    per_core_ratio = rt1["img_per_s"] / tv_in["img_per_s"]
    lines.append(f"| {label} | per core (1 thread; torchvision in-process) | {rt1['img_per_s']:.0f} | "
                 f"{tv_in['img_per_s']:.0f} | {per_core_ratio:.2f} | {rt1['img_per_s']:.0f} | "
                 f"{tv_in['img_per_s']:.0f} |")
    summary_rows = []
    for t, r, v in rows:
        if r is None or v is None:
            continue
        lines.append(f"| {label} | {t} (torchvision: {t} DataLoader worker{'s' if t > 1 else ''}) | "
                     f"{r['img_per_s']:.0f} | "
                     f"{v['img_per_s']:.0f} | {r['img_per_s'] / v['img_per_s']:.2f} | {r['img_per_s'] / t:.0f} | "
                     f"{v['img_per_s'] / t:.0f} |")
        summary_rows.append({"threads": t, "ringtape": r["img_per_s"], "torchvision": v["img_per_s"],
                             "ratio": r["img_per_s"] / v["img_per_s"], "ringtape_rounds": r["rounds"],
                             "torchvision_rounds": v["rounds"]})
    lines.append("")

    def rate(t, side):
        for row in summary_rows:
            if row["threads"] == t:
                return row[side]
        return None

    tmax = max(row["threads"] for row in summary_rows) if summary_rows else 1
    if tmax > 1 and rate(1, "ringtape") and rate(1, "torchvision"):
        lines.append(f"scaling 1 -> {tmax} threads: ringtape {rate(tmax, 'ringtape') / rate(1, 'ringtape'):.2f}x, "
                     f"torchvision {rate(tmax, 'torchvision') / rate(1, 'torchvision'):.2f}x")
    if rt1_full is not None:
        lines.append(f"ringtape decode mode, 1 thread: region {rt1['img_per_s']:.0f} img/s, full "
                     f"{rt1_full['img_per_s']:.0f} img/s (region {rt1['img_per_s'] / rt1_full['img_per_s']:.2f}x)")
    bd = rtf.get("breakdown_us")
    if bd:
        lines.append(f"ringtape us/image, 1 thread: read {bd['read']:.0f}, header {bd['header']:.0f}, decode region "
                     f"{bd['decode_region']:.0f} (full {bd['decode_full']:.0f}), resize+flip {bd['resize_flip']:.0f}; "
                     f"train_transform region {bd['transform_region']:.0f}, full {bd['transform_full']:.0f}; "
                     f"mean crop {100 * bd['crop_area_share']:.0f}% of the image, DCT-scaled "
                     f"{100 * bd['dct_scaled_share']:.0f}% of the crops" +
                     (f"; auto_augment({policy}) {bd['augment']:.0f}" if policy != "none" and "augment" in bd else "") +
                     (f"; normalize_pixels {bd['normalize']:.0f} per image of a batch"
                      if norm and "normalize" in bd else ""))
    tbd = tvf.get("breakdown_us")
    if tbd:
        lines.append("torchvision us/image, 1 process: " + ", ".join(f"{k} {v:.0f}" for k, v in tbd.items()) +
                     f" (sum {sum(tbd.values()):.0f})")
    for sanity in rtf.get("sanity", []):
        lines.append(f"sanity at {sanity['size']}: ringtape region vs full decode mean |diff| "
                     f"{sanity['mean_abs_diff_full_vs_region']:.3f} (image 0: {sanity['mean_abs_diff_image0']:.3f}), "
                     f"{sanity['dct_scaled']}/{sanity['images']} DCT-scaled; vs block-average reference "
                     f"{sanity['mean_abs_diff_vs_reference']:.3f}")
    lines.append("")

    g = args.gpu_rate
    cores = {"ringtape": g / rt1["img_per_s"], "torchvision": g / tv_in["img_per_s"]}
    at_max = {}
    if tmax > 1:
        at_max = {side: g / (rate(tmax, side) / tmax) for side in ("ringtape", "torchvision") if rate(tmax, side)}
    lines.append(f"cores for one H200 at {g:.0f} img/s = {g:.0f} / (img/s per core): ringtape "
                 f"{math.ceil(cores['ringtape'])}, torchvision {math.ceil(cores['torchvision'])} "
                 "(at the 1-thread rate)" +
                 (f"; at the {tmax}-thread per-core rate: ringtape {math.ceil(at_max['ringtape'])}, torchvision "
                  f"{math.ceil(at_max['torchvision'])}" if at_max else ""))
    worst = max([cores["ringtape"]] + ([at_max["ringtape"]] if "ringtape" in at_max else []))
    lines.append(f"16 cores per GPU: {'enough' if worst <= 16 else 'NOT enough'} for ringtape, "
                 f"{'enough' if cores['torchvision'] <= 16 else 'not enough'} for torchvision")
    met = per_core_ratio >= args.target
    lines.append(f"per-core ratio [{label}] {per_core_ratio:.2f} (target >= {args.target:g}: "
                 f"{'MET' if met else 'NOT MET'})")

    all_runs = [rt1, rt1_full, tv_in] + [x for _, r, v in rows for x in (r, v)]
    busiest = max(x["others_cpu"] for x in all_runs if x is not None)
    if busiest > BUSY_SHARE:
        lines.append(f"WARNING: other processes took up to {100 * busiest:.1f}% of the machine during a run: "
                     "the timings are distorted, rerun when the machine is idle")
    lines += problems
    print("\n".join(lines))

    summary = {
        "config": label, "policy": policy, "normalize": norm, "corpus": cs, "ringtape_version": rtf["version"],
        "torchvision_version": tvf["version"],
        "rounds": args.rounds, "per_core": {"ringtape": rt1["img_per_s"], "torchvision": tv_in["img_per_s"],
                                            "ratio": per_core_ratio},
        "ringtape_full_1thread": rt1_full["img_per_s"] if rt1_full else None, "threads": summary_rows,
        "gpu_rate": g, "cores_needed_1thread_rate": cores, "cores_needed_max_thread_rate": at_max,
        "max_others_cpu": busiest, "ringtape_breakdown_us": bd, "torchvision_breakdown_us": tbd,
        "sanity": rtf.get("sanity"),
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    if args.check and (not met or problems):
        sys.exit(1)


if __name__ == "__main__":
    main()
