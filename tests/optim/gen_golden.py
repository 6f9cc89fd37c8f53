#!/usr/bin/python3
"""PyTorch golden values for ringtape's optimizers: tests/optim/optim_test.cc checks
optim/sgd.cc and optim/adamw.cc against them.

Run with Debian's Python (torch 1.13, CPU), from anywhere:
    /usr/bin/python3 tests/optim/gen_golden.py
It rewrites tests/optim/golden.safetensors. The output is deterministic (fixed seed), so
regenerating on the same kind of machine must not change the file.

Why the machine matters for float32: ATen's CPU kernels pick an instruction set at run
time, and in its AVX2 kernels `a.add_(b, alpha=s)` and `a.addcmul_(b, c, value=s)` are
fused multiply-adds (vec::fmadd, and GCC's contraction of a + s*b*c), while a build
without FMA rounds twice. The test expects the fused forms bit for bit (ringtape calls
std::fma there), so regenerate on an x86 machine where torch reports "CPU capability
usage: AVX2" (or AVX512); __metadata__["cpu_capability"] records what produced the file.

Layout (the safetensors format, written by hand with json + struct):
  * "<dtype>.<param>.init"           initial parameter values (dtype "f32" or "f64");
  * "<dtype>.<param>.grad<k>"        the gradient given before step k (k = 0..4);
  * "<case>.<dtype>.<param>.step<k>" the parameter after k steps (k = 1..5);
  * "<case>.<dtype>.state.<kind>.<param>" the optimizer state after the last step, under
    ringtape's names: momentum_buffer, exp_avg, exp_avg_sq, step (int64; torch keeps it
    as a float32 tensor);
  * __metadata__["cases"]: JSON {case: options}, options being the ringtape option names
    ("optimizer": "sgd" | "adamw", lr, momentum, ..., no_decay_1d) and "lrs", the learning
    rate of each step (the case sets it before every step, as an LR schedule does).

Parameters: "weight" (5, 7) and "bias" (6,). 35 elements exercise both halves of ATen's
elementwise loops (vectorised blocks of 16 float / 8 double, then a scalar tail); the
1-D bias is what no_decay_1d exempts (torch: a parameter group with weight_decay=0).
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_py import read_safetensors, write_safetensors  # noqa: E402  (tests/safetensors_py.py)
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.safetensors")
STEPS = 5
SHAPES = {"weight": (5, 7), "bias": (6,)}
DTYPES = {"f32": torch.float32, "f64": torch.float64}

SGD_DEFAULTS = dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, no_decay_1d=False)
ADAMW_DEFAULTS = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, no_decay_1d=False)

CASES = {
    "sgd_plain": dict(optimizer="sgd"),
    "sgd_momentum_wd": dict(optimizer="sgd", momentum=0.9, weight_decay=1e-4),
    "sgd_nesterov": dict(optimizer="sgd", momentum=0.9, weight_decay=1e-4, nesterov=True),
    "sgd_dampening": dict(optimizer="sgd", momentum=0.9, dampening=0.1),
    "sgd_no_decay_1d": dict(optimizer="sgd", momentum=0.9, weight_decay=1e-2, no_decay_1d=True),
    "sgd_lr_changes": dict(optimizer="sgd", momentum=0.9, weight_decay=1e-4,
                           lrs=[0.1, 0.05, 0.2, 0.01, 0.1]),
    "adamw_default": dict(optimizer="adamw"),
    "adamw_wd": dict(optimizer="adamw", weight_decay=0.05),
    "adamw_no_decay_1d": dict(optimizer="adamw", weight_decay=0.05, no_decay_1d=True),
    "adamw_lr_changes": dict(optimizer="adamw", lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1,
                             lrs=[1e-2, 2e-2, 5e-3, 1e-2, 3e-2]),
}


def full_options(case):
    o = dict(SGD_DEFAULTS if case["optimizer"] == "sgd" else ADAMW_DEFAULTS)
    o.update(case)
    o.setdefault("lrs", [o["lr"]] * STEPS)
    assert len(o["lrs"]) == STEPS
    return o


def make_torch_optimizer(o, params):
    """params: {name: tensor}. no_decay_1d becomes torchvision's split into two groups."""
    decay = [p for n, p in params.items() if not (o["no_decay_1d"] and p.ndim <= 1)]
    no_decay = [p for n, p in params.items() if o["no_decay_1d"] and p.ndim <= 1]
    groups = [{"params": decay}] + ([{"params": no_decay, "weight_decay": 0.0}] if no_decay else [])
    if o["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o["momentum"], dampening=o["dampening"],
                               weight_decay=o["weight_decay"], nesterov=o["nesterov"], foreach=False)
    return torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                             weight_decay=o["weight_decay"], amsgrad=False, foreach=False)


def cpu_capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    torch.manual_seed(20240601)
    tensors = {}
    # Values drawn once in float64; the float32 inputs are their roundings.
    init = {n: torch.randn(s, dtype=torch.float64) for n, s in SHAPES.items()}
    # Gradients of varied scale (and a few exact zeros) so Adam's moments are not uniform.
    grads = []
    for k in range(STEPS):
        g = {}
        for n, s in SHAPES.items():
            v = torch.randn(s, dtype=torch.float64) * (0.5 + k)
            v.view(-1)[k] = 0.0
            g[n] = v
        grads.append(g)

    for dname, dtype in DTYPES.items():
        for n in SHAPES:
            tensors[f"{dname}.{n}.init"] = init[n].to(dtype)
            for k in range(STEPS):
                tensors[f"{dname}.{n}.grad{k}"] = grads[k][n].to(dtype)

        for case, spec in CASES.items():
            o = full_options(spec)
            params = {n: init[n].to(dtype).clone().requires_grad_(True) for n in SHAPES}
            opt = make_torch_optimizer(o, params)
            for k in range(STEPS):
                for group in opt.param_groups:
                    group["lr"] = o["lrs"][k]
                for n, p in params.items():
                    p.grad = grads[k][n].to(dtype).clone()
                opt.step()
                for n, p in params.items():
                    tensors[f"{case}.{dname}.{n}.step{k + 1}"] = p.detach().clone()
            for n, p in params.items():
                for kind, v in opt.state[p].items():
                    if v is None:  # SGD without momentum keeps momentum_buffer None
                        continue
                    if kind == "step":
                        v = torch.tensor(int(v.item()), dtype=torch.int64)
                    tensors[f"{case}.{dname}.state.{kind}.{n}"] = v.detach().clone()

    cases = {c: full_options(s) for c, s in CASES.items()}
    meta = {"torch": torch.__version__, "cpu_capability": cpu_capability(),
            "steps": str(STEPS), "cases": json.dumps(cases, separators=(",", ":"))}
    write_safetensors(OUT, tensors, meta)
    print(f"{OUT}: {len(cases)} cases, {len(tensors)} tensors, {os.path.getsize(OUT)} bytes, "
          f"CPU capability {meta['cpu_capability']}")


if __name__ == "__main__":
    main()
