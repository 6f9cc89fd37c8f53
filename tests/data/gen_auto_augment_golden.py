#!/usr/bin/python3
"""torchvision golden values for data/transforms/auto_augment.h: tests/data/auto_augment_test.cc checks
the C++ operations, policy tables and AugMix's mixing against them.

Run with Debian's Python (python3-torch 1.13, python3-torchvision 0.14.1), from anywhere:
    /usr/bin/python3 tests/data/gen_auto_augment_golden.py
It rewrites tests/data/auto_augment_golden.safetensors. The output is deterministic (fixed
seeds, one thread), so regenerating must not change the file.

Everything goes through torchvision's own code on uint8 CHW tensors (the tensor backend):
the operations through torchvision.transforms.autoaugment._apply_op, exactly as the
policies call them; the images are stored HWC (the C++ pipeline's layout).

Tensors (images u8 [H, W, 3], the others as named):
  img.<i>                          the input images (i = 0, 1, 2)
  op.<i>.<Op>.<interp>             u8 [M, H, W, 3]: _apply_op(img.<i>, Op, magnitude[k]) for
                                   the M magnitudes of metadata "magnitudes"[Op]; <interp> is
                                   "nearest" or "bilinear" for the geometric ops, "none" else
  space.<policy>.<W>x<H>.<Op>      f32 [bins]: the magnitude bins of _augmentation_space of the
                                   policy for a W x H image (empty for ops without magnitude)
  augmix.img, augmix.out           AugMix(severity=3) on img.0 with scripted draws (below)
  augmix.m, augmix.weights         f32 [2], f32 [3]: the two Dirichlet samples it used
Metadata (JSON strings):
  magnitudes      {Op: [magnitude, ...]} for the op.* tensors
  spaces          {policy: {"bins": n, "ops": [[Op, signed], ...]}} in torchvision's order
  sizes           [[W, H], ...] for the space.* tensors
  imagenet        AutoAugment(IMAGENET)'s sub-policies [[[Op, p, bin or -1], [..]], ...]
  augmix_draws    the integers torch.randint returned, in call order
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_py import read_safetensors, write_safetensors  # noqa: E402  (tests/safetensors_py.py)

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.transforms import InterpolationMode, autoaugment  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "auto_augment_golden.safetensors")

GEOMETRIC = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"]
# Positive and negative magnitudes, 0, the largest bins of every policy (TA-wide's 0.99,
# 32 and 135 degrees) and values between bins (translations are truncated by int()).
MAGNITUDES = {
    "ShearX": [0.0, 0.3, -0.3, 0.99, -0.99, 0.137],
    "ShearY": [0.0, 0.3, -0.3, 0.99, -0.99, -0.137],
    "TranslateX": [0.0, 5.0, -5.0, 32.0, -32.0, 14.7, -3.3],
    "TranslateY": [0.0, 5.0, -5.0, 32.0, -32.0, -14.7, 3.3],
    "Rotate": [0.0, 30.0, -30.0, 135.0, -135.0, 90.0, 7.3],
    "Brightness": [0.0, 0.9, -0.9, 0.99, -0.99, 0.33, -0.47],
    "Color": [0.0, 0.9, -0.9, 0.99, -0.99, 0.33, -0.47],
    "Contrast": [0.0, 0.9, -0.9, 0.99, -0.99, 0.33, -0.47],
    "Sharpness": [0.0, 0.9, -0.9, 0.99, -0.99, 0.33, -0.47],
    "Posterize": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    "Solarize": [255.0, 0.0, 128.0, 246.5, 170.0, 100.3],
    "AutoContrast": [0.0],
    "Equalize": [0.0],
    "Invert": [0.0],
    "Identity": [0.0],
}
SIZES = [[224, 224], [17, 13], [7, 1], [500, 375]]


def images():
    """Three small RGB images: noise (17 x 13), a narrow-range gradient with noise and a
    flat channel (24 x 16: autocontrast's and equalize's special cases), and a 7 x 1 row."""
    g = torch.Generator().manual_seed(1234)
    a = torch.randint(0, 256, (3, 13, 17), generator=g, dtype=torch.uint8)
    yy, xx = torch.meshgrid(torch.arange(16), torch.arange(24), indexing="ij")
    r = 60 + 2 * xx + torch.randint(0, 5, (16, 24), generator=g)
    gch = 90 + yy * 3 + torch.randint(0, 3, (16, 24), generator=g)
    b = torch.full((16, 24), 77)
    b[5:9, 3:20] = 200  # two values only
    bimg = torch.stack([r, gch, b]).to(torch.uint8)
    c = torch.randint(0, 256, (3, 1, 7), generator=g, dtype=torch.uint8)
    return [a, bimg, c]


def hwc(t):
    return t.permute(1, 2, 0).contiguous()


def space(policy, bins, w, h):
    if policy == "imagenet":
        return autoaugment.AutoAugment()._augmentation_space(bins, (h, w))
    if policy == "ra":
        return autoaugment.RandAugment()._augmentation_space(bins, (h, w))
    if policy == "ta_wide":
        return autoaugment.TrivialAugmentWide()._augmentation_space(bins)
    return autoaugment.AugMix()._augmentation_space(bins, (h, w))


POLICY_BINS = {"imagenet": 10, "ra": 31, "ta_wide": 31, "augmix": 10}


class ScriptedRandint:
    """Stands in for torch.randint: returns the next of `values` (checked against the
    range asked for), so AugMix's own forward runs with known draws."""

    def __init__(self, values):
        self.values = list(values)
        self.real = torch.randint

    def __call__(self, *args, **kwargs):
        if "low" in kwargs:
            lo, hi = kwargs["low"], kwargs["high"]
        elif len(args) >= 2 and isinstance(args[1], int):
            lo, hi = args[0], args[1]
        else:
            lo, hi = 0, args[0]
        v = self.values.pop(0)
        assert lo <= v < hi, (v, lo, hi)
        return torch.tensor([v], dtype=torch.long)


def augmix_golden(img):
    """AugMix(severity=3), bilinear, on `img` with fixed Dirichlet samples and scripted
    integer draws: per chain the depth in [1, 3], then per op its index among the 13 ops,
    its bin in [0, severity) when it has magnitudes and a sign coin when signed."""
    m = torch.tensor([[0.3125, 0.6875]])
    weights = torch.tensor([[0.2, 0.45, 0.35]])
    # chain 0: depth 2: Rotate bin 2 negative, Solarize bin 1
    # chain 1: depth 3: ShearX bin 1 positive, Equalize, Contrast bin 2 negative
    # chain 2: depth 1: TranslateY bin 2 positive
    draws = [2, 4, 2, 1, 6, 1,
             3, 0, 1, 0, 8, 11, 2, 1,
             1, 3, 2, 0]
    t = autoaugment.AugMix(severity=3, interpolation=InterpolationMode.BILINEAR)
    samples = [m, weights]
    t._sample_dirichlet = lambda params: samples.pop(0)
    scripted = ScriptedRandint(draws)
    torch.randint = scripted
    try:
        out = t(img)
    finally:
        torch.randint = scripted.real
    assert not scripted.values and not samples
    return out, m[0], weights[0], draws


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tensors, meta = {}, {}
    imgs = images()
    for i, img in enumerate(imgs):
        tensors[f"img.{i}"] = hwc(img)
        for op, mags in MAGNITUDES.items():
            interps = ["nearest", "bilinear"] if op in GEOMETRIC else ["none"]
            for interp in interps:
                mode = InterpolationMode.BILINEAR if interp == "bilinear" else InterpolationMode.NEAREST
                outs = [hwc(autoaugment._apply_op(img, op, m, interpolation=mode, fill=None)) for m in mags]
                tensors[f"op.{i}.{op}.{interp}"] = torch.stack(outs)
    meta["magnitudes"] = json.dumps(MAGNITUDES)

    spaces = {}
    for policy, bins in POLICY_BINS.items():
        for w, h in SIZES:
            s = space(policy, bins, w, h)
            spaces[policy] = {"bins": bins, "ops": [[op, bool(signed)] for op, (_, signed) in s.items()]}
            for op, (mags, _) in s.items():
                v = mags.to(torch.float32) if mags.ndim > 0 else torch.empty(0, dtype=torch.float32)
                tensors[f"space.{policy}.{w}x{h}.{op}"] = v
    meta["spaces"] = json.dumps(spaces)
    meta["sizes"] = json.dumps(SIZES)
    meta["imagenet"] = json.dumps(
        [[[op, p, -1 if b is None else b] for op, p, b in pair]
         for pair in autoaugment.AutoAugment()._get_policies(autoaugment.AutoAugmentPolicy.IMAGENET)])

    out, m, weights, draws = augmix_golden(imgs[0])
    tensors["augmix.img"] = hwc(imgs[0])
    tensors["augmix.out"] = hwc(out)
    tensors["augmix.m"] = m.clone()
    tensors["augmix.weights"] = weights.clone()
    meta["augmix_draws"] = json.dumps(draws)
    meta["torch"] = torch.__version__
    meta["torchvision"] = torchvision.__version__

    write_safetensors(OUT, tensors, meta)
    back, back_meta = read_safetensors(OUT)
    assert back_meta == meta and back.keys() == tensors.keys()
    for k, v in tensors.items():
        assert torch.equal(back[k], v), k
    print(f"wrote {OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
