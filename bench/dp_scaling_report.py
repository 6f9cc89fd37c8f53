"""The tables of bench/run_dp_scaling.sh, from what its runs left in --out:

  <out>/<workload>/config.json                 global batch, description, skip
  <out>/<workload>/rt-n<N>.r<R>/metrics.jsonl  ringtape train (N=2: and timeline.jsonl)
  <out>/<workload>/torch-n<N>.r<R>.json        bench/dp_scaling_torch.py
  <out>/allreduce.json                         allreduce_bench --nproc 2 --json (the loopback fit)

T(N) is the median seconds per optimizer step after the first `skip` steps: ringtape's from
metrics.jsonl (--print-freq 1: global batch / img_per_s, img_per_s counting every rank's
images), PyTorch's from its per-step times; over several rounds, the median of the rounds'
medians. C = T(2) - T(1)/2 from T(N) ~ T(1)/N + C. The model check replays each N=2 run's
timeline with bench/dp_scaling_model.py and the loopback link fitted to allreduce.json.
"""
import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_scaling_model as model  # noqa: E402


def rt_steps(run_dir, global_batch, skip):
    times, overlap = [], None
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        if r.get("type") == "train" and r["step"] > skip:
            times.append(global_batch / r["img_per_s"])
        elif r.get("type") == "overlap":
            overlap = r
    return times, overlap


def others(path):
    """The share of the CPUs other processes took during a run (run_dp_scaling.sh's .others file)."""
    try:
        return float(open(path).read())
    except (OSError, ValueError):
        return None


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_range(xs, scale=1.0, f="{:.3f}"):
    if not xs:
        return "-"
    if len(xs) == 1:
        return f.format(xs[0] * scale)
    return (f + " ({}-{})").format(med(xs) * scale, f.format(min(xs) * scale), f.format(max(xs) * scale))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/dp_scaling")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args()

    fit = None
    ar = os.path.join(a.out, "allreduce.json")
    summary = {"workloads": {}}
    if os.path.exists(ar):
        bw, alpha, resid = model.fit_alpha_beta(ar, 2, "library")
        fit = model.Links(bw, alpha, bw, alpha, 1, 2)
        summary["loopback_fit"] = {"GBps": bw, "alpha_us": alpha, "worst_rel_residual": resid}
        print(f"loopback link (2 ranks, Gloo library all-reduce, fitted to {ar}): {bw:.3f} GB/s, alpha {alpha:.0f} us "
              f"(worst relative residual {resid:.0%})\n")

    checks = []
    for wdir in sorted(glob.glob(os.path.join(a.out, "*", "config.json"))):
        wdir = os.path.dirname(wdir)
        cfg = json.load(open(os.path.join(wdir, "config.json")))
        G, skip = cfg["global_batch"], cfg["skip"]
        name = os.path.basename(wdir)
        print(f"## {name}: {cfg['description']}, global batch {G}, {cfg['threads']} threads in all")
        print("| impl | N | threads x procs | batch per proc | T(N) s/step (range over rounds) | img/s | T(1)/T(N) "
              "| C = T(2) - T(1)/2 | T(2) - T(1) | all-reduce s/step | hidden behind backward | others' CPU |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        ws = {}
        for impl in ("ringtape", "torch"):
            t = {}
            ov = {}
            busy = {}
            for n in (1, 2):
                per_run = []
                ovs = []
                tag = "rt" if impl == "ringtape" else "torch"
                busy[n] = [x for x in (others(f) for f in glob.glob(os.path.join(wdir, f"{tag}-n{n}.r*.others")))
                           if x is not None]
                if impl == "ringtape":
                    for d in sorted(x for x in glob.glob(os.path.join(wdir, f"rt-n{n}.r*")) if os.path.isdir(x)):
                        steps, o = rt_steps(d, G, skip)
                        if steps:
                            per_run.append(med(steps))
                        if o:
                            ovs.append(o)
                        if n == 2 and fit and os.path.exists(os.path.join(d, "timeline.jsonl")) and steps:
                            path = os.path.join(d, "timeline.jsonl")
                            tl = model.load_timeline(path, skip)
                            pred = model.simulate(tl, fit, "library", 2)
                            own_bw, own_alpha, _ = model.fit_timeline(path, skip)
                            own = model.simulate(tl, model.Links(own_bw, own_alpha, own_bw, own_alpha, 1, 2), "library", 2)
                            checks.append({"workload": name, "run": os.path.basename(d), "measured": med(steps),
                                           "predicted": pred["step"], "no_comm": tl["F"] + tl["B"],
                                           "own_link": own["step"], "own_GBps": own_bw, "own_alpha_us": own_alpha,
                                           "measured_comm": tl["measured_comm"], "predicted_comm": pred["comm"],
                                           "measured_overlap": o["hidden_fraction"] if o else None,
                                           "predicted_overlap": pred["overlap"]})
                else:
                    for f in sorted(glob.glob(os.path.join(wdir, f"torch-n{n}.r*.json"))):
                        per_run.append(json.load(open(f))["step_s"])
                t[n] = per_run
                ov[n] = ovs
            T1, T2 = med(t[1]), med(t[2])
            for n in (1, 2):
                if not t[n]:
                    continue
                Tn = med(t[n])
                c = f"{T2 - T1 / 2:.3f} s" if n == 2 and t[1] else ""
                d = f"{T2 - T1:+.3f} s ({(T2 - T1) / T1:+.0%})" if n == 2 and t[1] else ""
                comm = hid = ""
                if ov[n]:
                    comm = fmt_range([o["allreduce_s_per_step"] for o in ov[n]])
                    hid = fmt_range([o["hidden_fraction"] for o in ov[n]], 100, "{:.0f}%")
                elif impl == "torch" and n == 2:
                    comm = hid = "not measured"
                oth = f"{max(busy[n]):.0%} (max)" if busy[n] else "-"
                print(f"| {impl} | {n} | {max(1, cfg['threads'] // n)} x {n} | {G // n} | {fmt_range(t[n])} | "
                      f"{G / Tn:.1f} | {T1 / Tn:.2f} | {c} | {d} | {comm} | {hid} | {oth} |")
            ws[impl] = {"T1": T1, "T2": T2, "C": T2 - T1 / 2, "T1_runs": t[1], "T2_runs": t[2],
                        "overlap": ov[2], "others_cpu": busy}
        summary["workloads"][name] = dict(cfg, results=ws)
        print()

    if checks:
        print("## Model check: each N=2 run's timeline replayed by dp_scaling_model.py (loopback fit, library)")
        print("| workload | run | measured T(2) | predicted | error | F + B alone | its error | all-reduce measured "
              "/ predicted | overlap measured / predicted | link fitted to the run's own all-reduces | its error |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for c in checks:
            mo = f"{c['measured_overlap']:.0%}" if c["measured_overlap"] is not None else "-"
            err = lambda x: f"{(x - c['measured']) / c['measured']:+.0%}"  # noqa: E731
            print(f"| {c['workload']} | {c['run']} | {c['measured']:.3f} s | {c['predicted']:.3f} s | "
                  f"{err(c['predicted'])} | {c['no_comm']:.3f} s | {err(c['no_comm'])} | "
                  f"{c['measured_comm'] * 1e3:.0f} / {c['predicted_comm'] * 1e3:.0f} ms | "
                  f"{mo} / {c['predicted_overlap']:.0%} | {c['own_GBps']:.2f} GB/s, {c['own_alpha_us']:.0f} us: "
                  f"{c['own_link']:.3f} s | {err(c['own_link'])} |")
        errs = [abs(c["predicted"] - c["measured"]) / c["measured"] for c in checks]
        own = [abs(c["own_link"] - c["measured"]) / c["measured"] for c in checks]
        print(f"\nmedian |error| of the predicted step: {med(errs):.0%} over {len(errs)} run(s) (allreduce_bench's "
              f"link); {med(own):.0%} with each run's own all-reduce times (the schedule alone)")
        summary["model_check"] = checks
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
