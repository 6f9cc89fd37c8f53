#!/usr/bin/python3
"""torchvision reference values for ringtape's ResNets: tests/models/resnet_parity_test.cc
and resnet_names_test.cc check the models against them.

Run with Debian's Python (torch 1.13, torchvision 0.14, CPU), from anywhere:
    /usr/bin/python3 tests/models/gen_golden.py [CASE ...]
It rewrites, next to this script (with CASE names: the names, the batch and those cases only):

  torchvision_names.txt   the state_dict of full-size torchvision resnet18/34/50/101/152,
                          resnext50_32x4d and wide_resnet50_2 (num_classes=1000), and of
                          se_resnet50 in timm's seresnet50 layout (SEBottleneck below):
                          "## <model>" then one "<key> <d0>,<d1>,..." line per entry, in
                          state_dict order ("-" for a 0-D shape).
  batch.safetensors       the training batch shared by every case: `input` f16
                          [16, 3, 32, 32] and `target` i64 [16].
  <case>.safetensors      one per case (see CASES), the keys below.

The models are torchvision's own ResNet class, BasicBlock and Bottleneck at a reduced
base width (NarrowResNet: torchvision's __init__ with 64 replaced by `width`, and its
groups / width_per_group), so names, order, topology and initialisation are torchvision's.
A case may pass ModelOptions.groups / width_per_group (its `options`, also written to its
metadata): torchvision's resnet50(groups=32, width_per_group=32) at width 2 has 3x3 convs in
32 groups of 1, 2, 4 and 8 channels, those of resnext50_32x4d at width 16, with a sixth of
its parameters. The parity cases then train them for three SGD steps twice, in float64 and
in float32, from the same starting values:

  init.<key>      every state_dict entry before training. Floating tensors are stored as
                  F16 and were rounded to f16 before training, so the stored values are
                  exactly the ones both runs started from (f16 -> f32 -> f64 is exact).
                  Batch-norm affine parameters and running statistics are randomised
                  (torchvision starts them at 1/0/0/1) so eval mode and the BN affine
                  transform are tested with non-trivial values, and the last batch norm
                  of every residual branch is scaled by 0.2 to keep the case well
                  conditioned (see initial_state).
  logits_eval     F64 [16, 10]: eval-mode logits of the initial model on `input`.
  loss            F64 [3]: the training-mode loss of steps 0, 1, 2 (each measured before
                  that step's update; step 0 is the initial model).
  delta.<param>   F32: final - init of every parameter after the three steps, computed in
                  float64. Stored as f32 to keep the files small: a delta is ~1e-3 of its
                  parameter's magnitude (at most ~3e-2, for small biases), so init +
                  f32(delta) reproduces the f64 final weight to ~1e-10 relative (worst
                  ~2e-9), and the delta itself keeps 2^-24 relative precision.
  final.<buffer>  F64 running_mean / running_var after the three steps; I64
                  num_batches_tracked (3).
  err32.<name>    F64 0-D: max |PyTorch float32 - PyTorch float64| of the same quantity
                  (<name> is logits_eval, loss, or a state_dict key: the error of the final
                  value), the yardstick for ringtape's float32 run (see docs/numerics.md).
  __metadata__    model, width, small_stem ("true"/"false"), num_classes, lr, momentum,
                  weight_decay, steps, torch and torchvision versions, and the case's
                  options (groups, width_per_group) if it has any (all strings).

Training: torch.optim.SGD(lr=1e-3, momentum=0.9, weight_decay=1e-2), F.cross_entropy
(mean), the same batch of 16 every step, batch norm momentum 0.1, eps 1e-5.

  <grad case>.safetensors  one per GRAD_CASES entry: the gradients of one training-mode
                  forward and backward at image sizes 20, 32 and 40 px (stride and padding
                  remainders at every stage, 1x1 stages), with their own batch:
  init.<key>      as above (f16-rounded starting state).
  input, target   the batch: F16 [N, 3, px, px] and I64 [N].
  loss            F64 0-D.
  grad.<param>    F64: the gradient of every parameter, computed in float64.
  err32.<param>   F64 0-D: max |PyTorch float32 - float64| of that gradient, the larger of
                  the contiguous and the channels_last float32 runs. The generator refuses a
                  case where PyTorch's own float32 gradient is off by more than 5e-5 of the
                  tensor's largest value. Such a case is ill-conditioned: typically a ReLU
                  whose input lies within float32 rounding of 0, where the kink (not the
                  arithmetic) decides which side each precision takes (measured: torchvision
                  resnet18 at 32 px, batch 32, default init: PyTorch float32 off by 0.4-7% in
                  3 of 6 seeds; resnet50 at 32 px, batch 16: 5-50% in 4 of 4). One step, not
                  three, so that no trajectory can wander to such a point. And every ReLU
                  input of the float64 run is at least KINK_MARGIN (2e-5, ~20x the float32
                  rounding of these activations) from 0, so that neither PyTorch's float32
                  nor ringtape's can take the other side of a kink by chance: the gradients
                  then differ by arithmetic alone.
The output is deterministic (fixed seeds, one thread): regenerating must not change it.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_py import read_safetensors, write_safetensors  # noqa: E402  (tests/safetensors_py.py)
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

OUT_DIR = os.path.dirname(os.path.abspath(__file__))

BATCH, IMAGE, NUM_CLASSES = 16, 32, 10
LR, MOMENTUM, WEIGHT_DECAY, STEPS = 1e-3, 0.9, 1e-2, 3

# case, model, torchvision block and stages, base width (ringtape's ResNetConfig.width),
# small stem, seed[, options: ModelOptions.groups / width_per_group]. Narrow enough to keep
# the files small (the data scale with the number of parameters): ~45k, ~23k, ~11k, ~70k
# and ~255k parameters.
CASES = [
    ("resnet18_w4", "resnet18", BasicBlock, [2, 2, 2, 2], 4, False, 18),
    ("resnet50_w2", "resnet50", Bottleneck, [3, 4, 6, 3], 2, False, 50),
    ("resnet18_w2_small_stem", "resnet18", BasicBlock, [2, 2, 2, 2], 2, True, 19),
    ("wide_resnet50_2_w2", "wide_resnet50_2", Bottleneck, [3, 4, 6, 3], 2, False, 52),
    # Seed 54: at seeds 53, 55 and 56 PyTorch's channels_last float32 run strayed from
    # float64 by 4.5-37% of an update, ill-conditioned starts (docs/numerics.md); at 53 its
    # contiguous run (the yardstick) stayed ~100x closer than that, so ringtape's contiguous
    # float32 run failed against it while matching the channels_last one's error. At 54 both
    # of PyTorch's layouts stay within 0.35% of every update, like the cases above.
    ("resnext50_32x32d_w2", "resnet50", Bottleneck, [3, 4, 6, 3], 2, False, 54,
     {"groups": 32, "width_per_group": 32}),
    ("se_resnet50_w2", "se_resnet50", "se", [3, 4, 6, 3], 2, False, 57),
]
# torchvision's groups and width_per_group of each model; options override them.
MODEL_ARCH = {"resnext50_32x4d": {"groups": 32, "width_per_group": 4}, "wide_resnet50_2": {"width_per_group": 128}}
KINK_MARGIN = 2e-5
# grad case, model, block, stages, width, small stem, seed, image size, batch[, options].
GRAD_CASES = [
    ("grads_resnet18_w4_px20", "resnet18", BasicBlock, [2, 2, 2, 2], 4, False, 21, 20, 6),
    ("grads_resnet18_w4_px32", "resnet18", BasicBlock, [2, 2, 2, 2], 4, False, 22, 32, 8),
    ("grads_resnet18_w2_small_stem_px40", "resnet18", BasicBlock, [2, 2, 2, 2], 2, True, 23, 40, 2),
    ("grads_resnet50_w4_px20", "resnet50", Bottleneck, [3, 4, 6, 3], 4, False, 36, 20, 10),
    ("grads_resnet50_w2_px40", "resnet50", Bottleneck, [3, 4, 6, 3], 2, False, 32, 40, 3),
]
FULL_SIZE = [
    ("resnet18", BasicBlock, [2, 2, 2, 2]),
    ("resnet34", BasicBlock, [3, 4, 6, 3]),
    ("resnet50", Bottleneck, [3, 4, 6, 3]),
    ("resnet101", Bottleneck, [3, 4, 23, 3]),
    ("resnet152", Bottleneck, [3, 8, 36, 3]),
    ("resnext50_32x4d", Bottleneck, [3, 4, 6, 3]),
    ("wide_resnet50_2", Bottleneck, [3, 4, 6, 3]),
    ("se_resnet50", "se", [3, 4, 6, 3]),
]


class SEModule(nn.Module):
    """timm's SEModule as seresnet50 builds it (rd_ratio 1/16, rd_divisor 8, bias, ReLU, no
    norm, sigmoid gate): x * sigmoid(fc2(relu(fc1(mean of x over H, W)))). Its parameters
    are fc1.weight/bias and fc2.weight/bias, timm's names."""

    def __init__(self, channels):
        super().__init__()
        v = channels / 16
        rd = max(8, int(v + 4) // 8 * 8)  # timm make_divisible(v, 8, round_limit=0.)
        self.fc1 = nn.Conv2d(channels, rd, kernel_size=1, bias=True)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(rd, channels, kernel_size=1, bias=True)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.fc2(self.act(self.fc1(s))))


class SEBottleneck(Bottleneck):
    """torchvision's Bottleneck with timm's seresnet50 squeeze-and-excitation: `se` after
    bn3, before the residual add, and registered between bn3 and downsample (timm's
    state_dict order)."""

    def __init__(self, inplanes, planes, stride=1, downsample=None, *args, **kwargs):
        super().__init__(inplanes, planes, stride, downsample, *args, **kwargs)
        ds = self._modules.pop("downsample", None)
        self.se = SEModule(planes * self.expansion)
        self.downsample = ds

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.se(self.bn3(self.conv3(out)))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


def block_of(block):
    """A case's block: a torchvision class, or "se" for SEBottleneck."""
    return SEBottleneck if block == "se" else block


def arch_of(model, options=None):
    """(groups, width_per_group) of `model` with `options` applied: NarrowResNet's arch."""
    a = {"groups": 1, "width_per_group": 64, **MODEL_ARCH.get(model, {}), **(options or {})}
    return a["groups"], a["width_per_group"]


class NarrowResNet(ResNet):
    """torchvision.models.resnet.ResNet with first-stage width `width` instead of 64.

    The body is ResNet.__init__ (torchvision 0.14) with 64/128/256/512 replaced by
    width * 1/2/4/8: the same modules registered in the same order, built by torchvision's
    own _make_layer, BasicBlock and Bottleneck, initialised the same way; forward() is
    torchvision's. With width=64 it is exactly torchvision's model (checked in main).

    small_stem: conv1 is 3x3 stride 1 padding 1 and the max-pool an identity (the usual
    CIFAR variant; ringtape's ResNetConfig.small_stem). Names and order do not change.

    arch: torchvision's (groups, width_per_group): a Bottleneck's inner width is
    int(planes * width_per_group / 64) * groups with planes = width * 1/2/4/8."""

    def __init__(self, block, layers, width, num_classes, small_stem=False, arch=(1, 64)):
        nn.Module.__init__(self)
        block = block_of(block)
        norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer
        self.inplanes = width
        self.dilation = 1
        self.groups, self.base_width = arch  # torchvision's groups and width_per_group
        assert block is Bottleneck or arch == (1, 64), "torchvision's BasicBlock has no groups"
        # Every group has the same number of channels, a whole one (torchvision would truncate).
        assert width * arch[1] % 64 == 0, f"width {width} x width_per_group {arch[1]} is not a multiple of 64"
        if small_stem:
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if small_stem else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)


def shape_list(shape):
    return [int(d) for d in shape]


def check_written(path, tensors, meta):
    back, back_meta = read_safetensors(path)
    assert back_meta == meta
    assert back.keys() == tensors.keys()
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v.detach()), k
    return os.path.getsize(path)


def write_names():
    """Full-size torchvision models: the names, order and shapes ringtape must match."""
    lines = []
    for name, block, layers in FULL_SIZE:
        mine = NarrowResNet(block, layers, 64, 1000, arch=arch_of(name))
        mine_sd = mine.state_dict()
        if block == "se":  # not in torchvision: timm's layout, as SEBottleneck builds it
            ref_sd = mine_sd
        else:
            ref_sd = getattr(torchvision.models, name)(weights=None, num_classes=1000).state_dict()
            # NarrowResNet at width 64 is torchvision's model.
            assert [(k, v.shape) for k, v in ref_sd.items()] == [(k, v.shape) for k, v in mine_sd.items()], name
        lines.append(f"## {name}")
        for k, v in ref_sd.items():
            lines.append(f"{k} {','.join(str(d) for d in v.shape) or '-'}")
    path = os.path.join(OUT_DIR, "torchvision_names.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(lines) - len(FULL_SIZE)} entries, {os.path.getsize(path)} bytes")
    return os.path.getsize(path)


def make_batch():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g).half()
    # Every class at least once, then random ones.
    y = torch.cat([torch.arange(NUM_CLASSES), torch.randint(0, NUM_CLASSES, (BATCH - NUM_CLASSES,), generator=g)])
    return x, y


def initial_state(block, layers, width, small_stem, seed, arch=(1, 64)):
    """torchvision's initialisation, randomised batch norms, every float rounded to f16.

    The last batch norm of each residual branch (bn2 / bn3) gets weights ~0.2 (a milder
    form of torchvision's zero_init_residual): with weights ~1 the gradient of this
    narrow, deep resnet50 explodes at init (norm ~400), three steps at lr 1e-3 become
    chaotic and PyTorch's own float32 run ends further from its float64 run than the
    update is long. At ~0.2 the gradient norm is ~5-10, the loss falls every step and
    float32 stays within ~1e-3 of each update."""
    torch.manual_seed(seed)
    model = NarrowResNet(block, layers, width, NUM_CLASSES, small_stem, arch)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(0.75 + 0.5 * torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.rand(c, generator=g) - 0.1)
                m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                m.running_var.copy_(0.75 + 0.5 * torch.rand(c, generator=g))
        for m in model.modules():
            last = m.bn3 if isinstance(m, Bottleneck) else m.bn2 if isinstance(m, BasicBlock) else None
            if last is not None:
                last.weight.mul_(0.2)
    state = {}
    for k, v in model.state_dict().items():
        state[k] = v.half() if v.is_floating_point() else v.clone()
    return state


def train(block, layers, width, small_stem, state, x, y, dtype, arch=(1, 64)):
    """Eval logits of the initial model, then STEPS SGD steps on the same batch."""
    model = NarrowResNet(block, layers, width, NUM_CLASSES, small_stem, arch).to(dtype)
    model.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    x = x.to(dtype)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
        losses.append(loss.detach())
    return logits, torch.stack(losses), {k: v.detach().clone() for k, v in model.state_dict().items()}


def gen_case(case, model, block, layers, width, small_stem, seed, x, y, options=None):
    arch = arch_of(model, options)
    state = initial_state(block, layers, width, small_stem, seed, arch)
    logits64, loss64, final64 = train(block, layers, width, small_stem, state, x, y, torch.float64, arch)
    logits32, loss32, final32 = train(block, layers, width, small_stem, state, x, y, torch.float32, arch)
    param_names = {k for k, _ in NarrowResNet(block, layers, width, NUM_CLASSES, small_stem, arch).named_parameters()}

    def err(a32, b64):
        return (a32.double() - b64).abs().max().reshape(())

    t = {"logits_eval": logits64, "loss": loss64,
         "err32.logits_eval": err(logits32, logits64), "err32.loss": err(loss32, loss64)}
    for k, v in state.items():
        t["init." + k] = v
        if k in param_names:
            t["delta." + k] = (final64[k] - v.double()).float()
            t["err32." + k] = err(final32[k], final64[k])
        elif v.is_floating_point():
            t["final." + k] = final64[k]
            t["err32." + k] = err(final32[k], final64[k])
        else:
            t["final." + k] = final64[k]
            assert int(final64[k]) == STEPS
    meta = {"model": model, "width": str(width), "num_classes": str(NUM_CLASSES), "lr": repr(LR),
            "momentum": repr(MOMENTUM), "weight_decay": repr(WEIGHT_DECAY), "steps": str(STEPS),
            "small_stem": str(small_stem).lower(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, **{k: str(v) for k, v in (options or {}).items()}}
    path = os.path.join(OUT_DIR, case + ".safetensors")
    write_safetensors(path, t, meta)
    size = check_written(path, t, meta)
    # How far PyTorch's own float32 run strays, relative to the size of the update.
    worst = max((float(t["err32." + k]) / float(t["delta." + k].abs().max()), k) for k in param_names)
    print(f"{path}: {len(state)} state entries, {sum(v.numel() for v in state.values())} values, {size} bytes; "
          f"loss {loss64.tolist()}, fp32 loss err {float(t['err32.loss']):.2e}, "
          f"worst fp32 err / |delta| {worst[0]:.2e} ({worst[1]})")
    return size


def gen_grad_case(case, model, block, layers, width, small_stem, seed, image, batch, options=None):
    arch = arch_of(model, options)
    state = initial_state(block, layers, width, small_stem, seed, arch)
    g = torch.Generator().manual_seed(seed + 2)
    x = torch.randn(batch, 3, image, image, generator=g).half()
    y = torch.randint(0, NUM_CLASSES, (batch,), generator=g)

    kink = [float("inf")]  # the smallest |input| of any ReLU in the float64 run

    def grads(dtype, channels_last):
        model = NarrowResNet(block, layers, width, NUM_CLASSES, small_stem, arch).to(dtype)
        model.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
        xx = x.to(dtype)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            xx = xx.to(memory_format=torch.channels_last)
        if dtype == torch.float64:
            for m in model.modules():
                if isinstance(m, nn.ReLU):
                    m.register_forward_pre_hook(lambda _, i: kink.__setitem__(0, min(kink[0], float(i[0].abs().min()))))
        model.train()
        loss = F.cross_entropy(model(xx), y)
        loss.backward()
        return loss.detach(), {k: p.grad.detach().double() for k, p in model.named_parameters()}

    loss64, g64 = grads(torch.float64, False)
    # Every ReLU input at least KINK_MARGIN from 0: float32 rounding (~1e-6 here) cannot
    # move any of them across the kink, in PyTorch or in ringtape.
    assert kink[0] > KINK_MARGIN, f"{case}: a ReLU input is {kink[0]:.1e} from 0 (a kink): pick another seed"
    t = {"input": x, "target": y, "loss": loss64}
    worst = (0.0, "")
    for k, v in state.items():
        t["init." + k] = v
    for k, v in g64.items():
        err = max((gr[k] - v).abs().max() for gr in (grads(torch.float32, False)[1], grads(torch.float32, True)[1]))
        t["grad." + k] = v
        t["err32." + k] = err.reshape(())
        worst = max(worst, (float(err) / float(v.abs().max()), k))
    assert worst[0] < 5e-5, f"{case}: PyTorch float32 is {worst[0]:.2e} off at {worst[1]} (a ReLU kink): pick another seed"
    meta = {"model": model, "width": str(width), "num_classes": str(NUM_CLASSES), "image": str(image),
            "small_stem": str(small_stem).lower(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, **{k: str(v) for k, v in (options or {}).items()}}
    path = os.path.join(OUT_DIR, case + ".safetensors")
    write_safetensors(path, t, meta)
    size = check_written(path, t, meta)
    print(f"{path}: batch {batch} x {image} px, loss {float(loss64):.6f}, {size} bytes; smallest |ReLU input| "
          f"{kink[0]:.1e}; worst PyTorch fp32 gradient error {worst[0]:.2e} of the tensor's largest value ({worst[1]})")
    return size


def main():
    torch.set_num_threads(1)  # one summation order, whatever the machine
    total = write_names()
    x, y = make_batch()
    batch = {"input": x, "target": y}
    meta = {"torch": torch.__version__}
    path = os.path.join(OUT_DIR, "batch.safetensors")
    write_safetensors(path, batch, meta)
    total += check_written(path, batch, meta)
    only = set(sys.argv[1:])
    unknown = only - {c[0] for c in CASES + GRAD_CASES}
    assert not unknown, f"unknown cases {sorted(unknown)}; known: {[c[0] for c in CASES + GRAD_CASES]}"
    for case in CASES:
        if not only or case[0] in only:
            total += gen_case(*case[:7], x, y, *case[7:])
    for case in GRAD_CASES:
        if not only or case[0] in only:
            total += gen_grad_case(*case)
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
