"""PyTorch's twin of bench/train_step_bench.cc: the same step, model and batch.

On the CPU: Debian's python3 (torch 1.13). On a GPU: --device cuda, with --amp bf16|fp16
(torch.autocast around forward and loss; fp16 adds a GradScaler), --channels-last,
--cudnn-benchmark, --tf32 and --compile (torch.compile; a failure is reported in the JSON
line, never a crash). Every step ends with loss.item(), which waits for the device, as the
C++ benchmark's steps do; the result is the median step after --warmup steps. Peak memory
is torch.cuda.max_memory_allocated (tensors; ringtape's "peak_bytes") and memory_reserved
(the caching allocator's hold; ringtape's "reserved_bytes").

Prints one JSON line like the C++ benchmark (with "error" instead of timings when the
configuration could not run).

--profile-steps A:B records steps A..B-1 (1-based, warm-up included, as the C++ benchmark's
flag) with torch.profiler and writes --profile-out (JSON: each op's self CPU time, calls and
the steps' wall time; bench/compare_profiles.py reads it next to ringtape's profile.json),
printing torch's own table to stderr. The timed median then leaves those steps out.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
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


def grad_scaler(enabled):
    """torch.amp.GradScaler("cuda") (torch >= 2.3), else torch.cuda.amp.GradScaler."""
    try:
        return torch.amp.GradScaler("cuda", enabled=enabled)
    except (AttributeError, TypeError):
        return torch.cuda.amp.GradScaler(enabled=enabled)


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
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"],
                    help="torch.autocast dtype for forward and loss (fp16 adds a GradScaler)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS and cuDNN (default: off)")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--inference", action="store_true",
                    help="time eval-mode forward passes under torch.no_grad() instead of training steps")
    ap.add_argument("--profile-steps", default="", help="A:B: profile steps A..B-1 with torch.profiler")
    ap.add_argument("--profile-out", default="torch_profile.json", help="where --profile-steps writes its JSON")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    C, H, W = (int(v) for v in a.size.split("x"))
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    out = {"impl": "torch" + (" compile" if a.compile else ""), "model": a.model, "batch": a.batch, "size": a.size,
           "width": a.width, "device": a.device, "amp": a.amp, "channels_last": a.channels_last,
           "compile": a.compile, "cudnn_benchmark": a.cudnn_benchmark, "tf32": a.tf32,
           "threads": torch.get_num_threads(), "steps": a.steps, "inference": a.inference,
           "torch": torch.__version__}

    def fail(msg):
        out["error"] = msg[:500]
        print(json.dumps(out))
        sys.stdout.flush()
        sys.exit(0)

    if cuda:
        if not torch.cuda.is_available():
            fail("torch sees no CUDA device")
        out["gpu"] = torch.cuda.get_device_name(dev)
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
    amp_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.amp]
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = make_model(a.model, a.classes, C, a.width, a.small_stem, a.stem_stride)
    model = model.to(device=dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    scaler = grad_scaler(a.amp == "fp16") if cuda else None
    x = torch.randn(a.batch, C, H, W).to(device=dev, memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,)).to(dev)
    fwd = model
    if a.compile:
        if not hasattr(torch, "compile"):
            fail("torch.compile failed: torch %s has no torch.compile" % torch.__version__)
        try:
            fwd = torch.compile(model)
        except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
            fail("torch.compile failed: %s: %s" % (type(e).__name__, e))

    if a.inference:
        model.eval()

    def step():
        if a.inference:
            with torch.no_grad(), torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                return float(fwd(x).float().sum())  # waits for the device
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(fwd(x), y)
        if scaler is not None and scaler.is_enabled():
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            with torch.autograd.profiler.record_function("phase:backward"):
                loss.backward()
            with torch.autograd.profiler.record_function("phase:optimizer"):
                opt.step()
        return loss.item()  # waits for the device: the step's time is complete

    prof_first, prof_end = 0, 0
    if a.profile_steps:
        first, end = (int(v) for v in a.profile_steps.split(":"))
        prof_first, prof_end = first - 1, end - 1
    profiler = None
    profiled_ms = []

    times = []
    loss = float("nan")
    for s in range(a.warmup + a.steps):
        if s == prof_first and prof_end > prof_first:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False)
            profiler.__enter__()
        t0 = time.perf_counter()
        try:
            with torch.autograd.profiler.record_function("phase:step"):
                loss = step()
        except Exception as e:  # noqa: BLE001 - compile errors surface at the first call
            what = "torch.compile failed" if a.compile and s == 0 else "step %d failed" % (s + 1)
            fail("%s: %s: %s" % (what, type(e).__name__, e))
        if cuda:
            torch.cuda.synchronize(dev)
        dt = (time.perf_counter() - t0) * 1000
        if profiler is not None:
            profiled_ms.append(dt)
            if s + 1 == prof_end:
                profiler.__exit__(None, None, None)
                write_profile(profiler, a.profile_out, prof_first, prof_end, profiled_ms)
                profiler = None
        elif s >= a.warmup:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    out.update({"step_ms": round(med, 3), "img_per_s": round(1000.0 * a.batch / med, 1), "loss": round(loss, 4)})
    if cuda:
        out["peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        out["reserved_bytes"] = torch.cuda.memory_reserved(dev)
    if profiled_ms:
        out["profiled_step_ms"] = round(sorted(profiled_ms)[len(profiled_ms) // 2], 3)
    print(json.dumps(out))


def write_profile(profiler, path, first, end, step_ms):
    """Self CPU time per (op, phase) and the steps' wall time; the phase of an op is the
    innermost "phase:" range above it (backward, optimizer; forward otherwise)."""
    sys.stderr.write(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=40) + "\n")
    rows = {}
    for e in profiler.events():
        if e.name.startswith("phase:"):
            continue
        phase, p = "forward", e.cpu_parent
        while p is not None:
            if p.name in ("phase:backward", "phase:optimizer"):
                phase = p.name[len("phase:"):]
                break
            p = p.cpu_parent
        r = rows.setdefault((e.name, phase), {"name": e.name, "pass": phase, "calls": 0, "self_cpu_us": 0.0})
        r["calls"] += 1
        r["self_cpu_us"] += e.self_cpu_time_total
    with open(path, "w") as f:
        json.dump({"impl": "torch", "torch": torch.__version__, "first_step": first + 1, "last_step": end,
                   "steps": end - first, "step_ms": step_ms,
                   "ops": sorted(rows.values(), key=lambda r: -r["self_cpu_us"])}, f)


if __name__ == "__main__":
    main()
