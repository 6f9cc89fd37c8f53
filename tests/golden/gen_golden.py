#!/usr/bin/python3
"""PyTorch golden values for ringtape's ops: tests/golden/golden_test.cc checks the
engine against them.

Run with Debian's Python (torch 1.13, CPU), from anywhere:
    /usr/bin/python3 tests/golden/gen_golden.py
It rewrites tests/golden/<op>.safetensors, one file per op family. The output is
deterministic (fixed seeds, one thread), so regenerating must not change the files.

File layout (the safetensors format, written here by hand with json + struct so no
extra package is needed):
  * tensor keys are "<case>.<tensor>", all float32 except cross_entropy targets (int64);
  * __metadata__["cases"] is a JSON object {case: {parameters}} in generation order;
    __metadata__["op"] names the op, ["torch"] the torch version that produced it.

Every case stores its inputs, `gout` (a fixed random cotangent with the output's
shape), the forward output `out`, and the gradients of sum(out * gout) with respect to
each differentiable input as `grad_<input>`: exactly what out.backward(gout) computes.

Tensors per op:
  conv2d              x, weight, [bias], gout, out, grad_x, grad_weight, [grad_bias]
      params: stride [h, w], padding [h, w], dilation [h, w], groups, bias (bool)
  batch_norm          x, [weight, bias], [running_mean, running_var], gout, out, grad_x,
                      [grad_weight, grad_bias], [running_mean_after, running_var_after]
      params: training, momentum, eps, affine (bool), running_stats (bool)
      running_*_after are the running statistics after the call (updated in place in
      training mode with the unbiased batch variance; unchanged in eval mode).
  max_pool2d          x, gout, out, grad_x
      params: kernel [h, w], stride [h, w], padding [h, w], dilation [h, w], ceil_mode
  adaptive_avg_pool2d x, gout, out, grad_x
      params: output_size [h, w]
  linear              x, weight, [bias], gout, out, grad_x, grad_weight, [grad_bias]
      params: bias (bool)
  cross_entropy       logits, target (int64), gout (0-D), out (0-D), grad_logits
      params: label_smoothing (mean reduction over the batch)
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_py import read_safetensors, write_safetensors  # noqa: E402  (tests/safetensors_py.py)
import struct

import torch
import torch.nn.functional as F

OUT_DIR = os.path.dirname(os.path.abspath(__file__))


class OpFile:
    """Collects the cases of one op and writes <op>.safetensors."""

    def __init__(self, op):
        self.op = op
        self.tensors = {}
        self.cases = {}
        self.seed = 1000 * (sum(map(ord, op)) % 97)  # fixed per op: files regenerate independently

    def rng(self):
        self.seed += 1
        return torch.Generator().manual_seed(self.seed)

    def add(self, case, params, tensors):
        assert case not in self.cases, case
        self.cases[case] = params
        for k, v in tensors.items():
            if v is not None:
                self.tensors[f"{case}.{k}"] = v.detach().clone()

    def write(self):
        path = os.path.join(OUT_DIR, f"{self.op}.safetensors")
        meta = {"op": self.op, "torch": torch.__version__,
                "cases": json.dumps(self.cases, separators=(",", ":"))}
        write_safetensors(path, self.tensors, meta)
        back, back_meta = read_safetensors(path)
        assert back_meta == meta
        assert back.keys() == self.tensors.keys()
        for k, v in self.tensors.items():
            assert torch.equal(back[k], v), k
        print(f"{path}: {len(self.cases)} cases, {os.path.getsize(path)} bytes")
        return os.path.getsize(path)


def leaf(t):
    return t.clone().requires_grad_(True)


def backward_with_random_cotangent(out, g):
    gout = torch.randn(out.shape, generator=g)
    (out * gout).sum().backward()
    return gout


# ---- conv2d ------------------------------------------------------------------------

def gen_conv2d():
    f = OpFile("conv2d")

    def case(name, x_shape, out_ch, kernel, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
             bias=True):
        g = f.rng()
        cin = x_shape[1]
        x = leaf(torch.randn(x_shape, generator=g))
        w = leaf(torch.randn((out_ch, cin // groups) + tuple(kernel), generator=g) * 0.5)
        b = leaf(torch.randn(out_ch, generator=g)) if bias else None
        out = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"stride": list(stride), "padding": list(padding), "dilation": list(dilation),
                     "groups": groups, "bias": bias},
              {"x": x, "weight": w, "bias": b, "gout": gout, "out": out, "grad_x": x.grad,
               "grad_weight": w.grad, "grad_bias": b.grad if bias else None})

    case("k3_s1_p1", (2, 4, 7, 9), 6, (3, 3), padding=(1, 1))
    case("k3_s2_p1_batch3", (3, 3, 7, 9), 4, (3, 3), stride=(2, 2), padding=(1, 1))
    case("k1_s2_nobias", (2, 4, 7, 9), 5, (1, 1), stride=(2, 2), bias=False)
    case("k3_d2_p2_batch1", (1, 3, 9, 11), 4, (3, 3), padding=(2, 2), dilation=(2, 2))
    case("k3_p1_groups2", (2, 4, 7, 9), 6, (3, 3), padding=(1, 1), groups=2)
    case("k3_s2_groups2_nobias", (2, 4, 8, 7), 4, (3, 3), stride=(2, 2), groups=2, bias=False)
    case("k3_p1_depthwise", (2, 4, 6, 6), 4, (3, 3), padding=(1, 1), groups=4)
    case("k3_p0_nobias_batch1", (1, 2, 5, 5), 3, (3, 3), bias=False)
    case("k7_s2_p3_stem", (1, 3, 11, 11), 4, (7, 7), stride=(2, 2), padding=(3, 3))
    case("k3x2_asymmetric", (2, 3, 8, 7), 4, (3, 2), stride=(2, 1), padding=(0, 1), dilation=(1, 2))
    return f.write()


# ---- batch_norm --------------------------------------------------------------------

def gen_batch_norm():
    f = OpFile("batch_norm")

    def case(name, x_shape, training, affine=True, running_stats=True, momentum=0.1, eps=1e-5):
        g = f.rng()
        c = x_shape[1]
        # An offset and scale per channel so the statistics are far from 0 and 1.
        shift = torch.randn(c, generator=g) * 2
        scale = torch.rand(c, generator=g) + 0.5
        view = (1, c) + (1,) * (len(x_shape) - 2)
        x = leaf(torch.randn(x_shape, generator=g) * scale.view(view) + shift.view(view))
        w = leaf(torch.rand(c, generator=g) + 0.5) if affine else None
        b = leaf(torch.randn(c, generator=g)) if affine else None
        rm = torch.randn(c, generator=g) if running_stats else None
        rv = torch.rand(c, generator=g) + 0.5 if running_stats else None
        rm_in = rm.clone() if running_stats else None
        rv_in = rv.clone() if running_stats else None
        out = F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"training": training, "momentum": momentum, "eps": eps, "affine": affine,
                     "running_stats": running_stats},
              {"x": x, "weight": w, "bias": b, "running_mean": rm_in, "running_var": rv_in, "gout": gout,
               "out": out, "grad_x": x.grad, "grad_weight": w.grad if affine else None,
               "grad_bias": b.grad if affine else None, "running_mean_after": rm, "running_var_after": rv})

    case("train_4d", (3, 4, 5, 3), True)
    case("train_4d_batch1", (1, 3, 4, 5), True)
    case("train_4d_noaffine", (2, 3, 4, 4), True, affine=False)
    case("train_4d_no_running_stats", (2, 3, 3, 5), True, running_stats=False)
    case("train_4d_momentum_eps", (2, 5, 3, 3), True, momentum=0.3, eps=1e-3)
    case("train_2d", (6, 5), True)
    case("eval_4d", (2, 4, 5, 3), False)
    case("eval_2d", (4, 5), False)
    case("eval_4d_noaffine", (2, 3, 3, 3), False, affine=False)
    return f.write()


# ---- pooling -----------------------------------------------------------------------

def gen_max_pool2d():
    f = OpFile("max_pool2d")

    def case(name, x_shape, kernel, stride, padding=(0, 0), dilation=(1, 1), ceil_mode=False):
        g = f.rng()
        x = leaf(torch.randn(x_shape, generator=g))  # continuous values: no ties in a window
        out = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"kernel": list(kernel), "stride": list(stride), "padding": list(padding),
                     "dilation": list(dilation), "ceil_mode": ceil_mode},
              {"x": x, "gout": gout, "out": out, "grad_x": x.grad})

    case("k3_s2_p1_resnet", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1))
    case("k3_s2_p1_even", (1, 2, 8, 8), (3, 3), (2, 2), (1, 1))
    case("k2_s2", (2, 3, 6, 8), (2, 2), (2, 2))
    case("k2_s2_odd_floor", (1, 3, 7, 9), (2, 2), (2, 2))
    case("k2_s2_ceil", (1, 3, 7, 9), (2, 2), (2, 2), ceil_mode=True)
    case("k3_s2_p1_ceil", (2, 2, 6, 7), (3, 3), (2, 2), (1, 1), ceil_mode=True)
    # The last window would start in the right padding: PyTorch drops it (5 -> 3, not 4).
    case("k2_s2_p1_ceil_clipped", (1, 2, 5, 7), (2, 2), (2, 2), (1, 1), ceil_mode=True)
    case("k3_s1_p1_d2", (1, 3, 7, 8), (3, 3), (1, 1), (1, 1), (2, 2))
    case("k3x2_s2x1_asymmetric", (2, 2, 7, 5), (3, 2), (2, 1), (1, 0))
    return f.write()


def gen_adaptive_avg_pool2d():
    f = OpFile("adaptive_avg_pool2d")

    def case(name, x_shape, out_size):
        g = f.rng()
        x = leaf(torch.randn(x_shape, generator=g))
        out = F.adaptive_avg_pool2d(x, out_size)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"output_size": list(out_size)}, {"x": x, "gout": gout, "out": out, "grad_x": x.grad})

    case("to_1x1", (2, 3, 7, 5), (1, 1))
    case("7x5_to_3x2_uneven", (2, 3, 7, 5), (3, 2))
    case("identity", (1, 2, 4, 3), (4, 3))
    case("3x5_to_4x6_upsample", (1, 2, 3, 5), (4, 6))
    return f.write()


# ---- linear and loss ---------------------------------------------------------------

def gen_linear():
    f = OpFile("linear")

    def case(name, n, fin, fout, bias=True):
        g = f.rng()
        x = leaf(torch.randn(n, fin, generator=g))
        w = leaf(torch.randn(fout, fin, generator=g) * 0.5)
        b = leaf(torch.randn(fout, generator=g)) if bias else None
        out = F.linear(x, w, b)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"bias": bias},
              {"x": x, "weight": w, "bias": b, "gout": gout, "out": out, "grad_x": x.grad,
               "grad_weight": w.grad, "grad_bias": b.grad if bias else None})

    case("bias", 3, 5, 4)
    case("nobias", 3, 5, 4, bias=False)
    case("batch1_bias", 1, 6, 3)
    return f.write()


def gen_cross_entropy():
    f = OpFile("cross_entropy")

    def case(name, n, k, label_smoothing, logit_scale=1.0):
        g = f.rng()
        logits = leaf(torch.randn(n, k, generator=g) * logit_scale)
        target = torch.randint(0, k, (n,), generator=g, dtype=torch.int64)
        out = F.cross_entropy(logits, target, reduction="mean", label_smoothing=label_smoothing)
        gout = backward_with_random_cotangent(out, g)
        f.add(name, {"label_smoothing": label_smoothing},
              {"logits": logits, "target": target, "gout": gout, "out": out, "grad_logits": logits.grad})

    case("ls0", 3, 5, 0.0)
    case("ls0_1", 3, 5, 0.1)
    case("ls0_batch1", 1, 6, 0.0)
    case("ls0_1_large_logits", 3, 4, 0.1, logit_scale=30.0)  # softmax must subtract the max
    return f.write()


def main():
    torch.set_num_threads(1)  # one summation order, whatever the machine
    total = sum(gen() for gen in (gen_conv2d, gen_batch_norm, gen_max_pool2d, gen_adaptive_avg_pool2d,
                                  gen_linear, gen_cross_entropy))
    print(f"total {total} bytes")
    assert total < 300_000, "golden files must stay small: shrink the shapes"


if __name__ == "__main__":
    main()
