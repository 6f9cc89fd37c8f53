"""PyTorch's twin of bench/train_step_bench.cc: the same step, model and batch.

Run with Debian's python3 (torch 1.13). Prints one JSON line like the C++ benchmark.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

LAYERS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
          "resnet50": (Bottleneck, [3, 4, 6, 3]), "resnet101": (Bottleneck, [3, 4, 23, 3]),
          "resnet152": (Bottleneck, [3, 8, 36, 3])}


def make_model(name, classes, in_ch, width, small_stem, stem_stride=1):
    """torchvision's ResNet; width != 64 rescales every stage like ringtape's --width."""
    block, layers = LAYERS[name]
    m = ResNet(block, layers, num_classes=classes)
    if width != 64 or in_ch != 3 or small_stem or stem_stride != 1:
        # Rebuild with the same classes at another base width.
        class Narrow(ResNet):
            def __init__(self):
                torch.nn.Module.__init__(self)
                self._norm_layer = torch.nn.BatchNorm2d
                self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
                k, s, p = (3, stem_stride, 1) if small_stem else (7, 2, 3)
                self.conv1 = torch.nn.Conv2d(in_ch, width, k, s, p, bias=False)
                self.bn1 = torch.nn.BatchNorm2d(width)
                self.relu = torch.nn.ReLU(inplace=True)
                self.maxpool = torch.nn.Identity() if small_stem else torch.nn.MaxPool2d(3, 2, 1)
                self.layer1 = self._make_layer(block, width, layers[0])
                self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
                self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
                self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
                self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
                self.fc = torch.nn.Linear(width * 8 * block.expansion, classes)
        m = Narrow()
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", default="3x224x224")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--small-stem", action="store_true")
    ap.add_argument("--stem-stride", type=int, default=1)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    C, H, W = (int(v) for v in a.size.split("x"))
    model = make_model(a.model, a.classes, C, a.width, a.small_stem, a.stem_stride)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(a.batch, C, H, W).to(memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,))
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1000
        if s >= a.warmup:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"impl": "torch", "model": a.model, "batch": a.batch, "size": a.size, "width": a.width,
                      "channels_last": a.channels_last, "threads": torch.get_num_threads(),
                      "step_ms": round(med, 3), "img_per_s": round(1000.0 * a.batch / med, 1),
                      "loss": round(loss.item(), 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
