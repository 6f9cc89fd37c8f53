"""ringtape's profile of a training step next to torch.profiler's, op family by op family.

    python3 bench/compare_profiles.py RINGTAPE_PROFILE.json TORCH_PROFILE.json

The inputs: profile.json from `train_step_bench --profile-steps A:B` (or `ringtape train
--profile-steps`), and the JSON of `train_step_bench_torch.py --profile-steps A:B`. Both are
self times (an op's time minus the ops it called), per step.

The families put side by side what does the same work, although the two split it into ops
differently:
  - ringtape fuses relu and the residual add into batch norm (batch_norm_relu,
    batch_norm_add_relu); PyTorch runs native_batch_norm, relu_ and add_: they go to one
    family, "batch norm + relu + residual add", per pass;
  - PyTorch's ops also count the framework around them (aten::convolution dispatching to
    mkldnn_convolution ...): every aten op goes to the family of what it computes; what
    neither side attributes to an op (ringtape: autograd, the loop; PyTorch: the Python
    side, autograd's engine outside ops) is "outside ops".
Prints a table (ms per step, ratio) sorted by ringtape's time, and the step totals.
"""
import json
import re
import sys

RT_FAMILY = [
    (r"^conv2d$", "convolution"),
    (r"^(dual_)?batch_norm", "batch norm + relu + residual add"),
    (r"^(relu|add_relu)$", "batch norm + relu + residual add"),
    (r"^(max_pool2d|adaptive_avg_pool2d)$", "pooling"),
    (r"^linear$", "linear (fc)"),
    (r"^cross_entropy$", "loss"),
    (r"^(sgd_step|adamw_step)$", "optimizer update"),
    (r"^(copy|relayout|convert|cast|to_format|copy_h2d|copy_d2h)$", "copies, relayouts, casts"),
    (r"^(add|add_|mul|mul_scalar|add_scalar|sub|mul_)$", "elementwise (gradient sums, scaling)"),
    (r"^(sum|mean|reshape|normalize_pixels)$", "other ops"),
]

TORCH_FAMILY = [
    (r"convolution_backward|conv.*backward", "convolution"),
    (r"convolution|conv2d|mkldnn_conv", "convolution"),
    (r"batch_norm", "batch norm + relu + residual add"),
    (r"threshold_backward|relu|clamp_min", "batch norm + relu + residual add"),
    (r"pool|^aten::mean$", "pooling"),
    (r"addmm|^aten::mm$|^aten::linear$|^aten::t$|matmul", "linear (fc)"),
    (r"cross_entropy|log_softmax|nll_loss|_softmax", "loss"),
    (r"copy_|contiguous|to_copy|^aten::to$|clone|empty_strided|as_strided|transpose|permute", "copies, relayouts, casts"),
    (r"^aten::(add|add_|mul|mul_|sub|div|fill_|zero_|zeros_like|ones_like|sum)$", "elementwise (gradient sums, scaling)"),
]


def family(name, table):
    for pat, fam in table:
        if re.search(pat, name):
            return fam
    return "other ops"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rt = json.load(open(sys.argv[1]))
    pt = json.load(open(sys.argv[2]))
    rt_steps = rt["totals"]["steps"]
    pt_steps = pt["steps"]
    fams = {}

    def add(fam, pas, side, ms):
        key = (fam, pas)
        fams.setdefault(key, {"rt": 0.0, "pt": 0.0})
        fams[key][side] += ms

    for r in rt["by_op"]:
        pas = r["pass"] if r["pass"] in ("forward", "backward", "optimizer") else "forward"
        fam = family(r["name"], RT_FAMILY)
        if fam == "optimizer update" or (pas == "optimizer"):
            fam, pas = "optimizer update", "optimizer"
        add(fam, pas, "rt", 1e3 * r["seconds"] / rt_steps)
    for r in pt["ops"]:
        pas = r["pass"]
        fam = family(r["name"], TORCH_FAMILY)
        if pas == "optimizer":
            fam = "optimizer update"
        elif pas == "forward" and r["name"] == "aten::add_":
            fam = "batch norm + relu + residual add"  # the block's `out += identity`
        add(fam, pas, "pt", r["self_cpu_us"] / 1e3 / pt_steps)
    rt_wall = 1e3 * rt["totals"]["wall_seconds"] / rt_steps
    pt_wall = sorted(pt["step_ms"])[len(pt["step_ms"]) // 2]
    rt_ops = sum(v["rt"] for v in fams.values())
    pt_ops = sum(v["pt"] for v in fams.values())
    print(f"{'family':<40} {'pass':<9} {'ringtape ms':>12} {'torch ms':>10} {'ratio':>7}")
    for (fam, pas), v in sorted(fams.items(), key=lambda kv: -max(kv[1]["rt"], kv[1]["pt"])):
        ratio = f"{v['rt'] / v['pt']:.2f}" if v["pt"] > 0.005 else "-"
        print(f"{fam:<40} {pas:<9} {v['rt']:>12.1f} {v['pt']:>10.1f} {ratio:>7}")
    print(f"{'outside ops':<40} {'':<9} {rt_wall - rt_ops:>12.1f} {max(pt_wall - pt_ops, 0):>10.1f}")
    print(f"{'step (wall, profiled)':<40} {'':<9} {rt_wall:>12.1f} {pt_wall:>10.1f} {rt_wall / pt_wall:>7.2f}")


if __name__ == "__main__":
    main()
