#!/usr/bin/python3
"""PyTorch golden values for ringtape's model EMA: tests/optim/ema_test.cc checks
optim/ema.cc against torchvision's ExponentialMovingAverage driven by torchvision's training
loop.

Run with Debian's Python (torch 1.13, CPU), from anywhere:
    /usr/bin/python3 tests/optim/gen_ema_golden.py
It rewrites tests/optim/ema_golden.safetensors. The output is deterministic (fixed seed).

The EMA below is torchvision's (references/classification/utils.py, 0.14), which the
torchvision package does not ship: an AveragedModel (torch.optim.swa_utils, used as is) with
    avg_fn = lambda avg, p, n: decay * avg + (1 - decay) * p,  use_buffers=True.
Its decay comes from torchvision's train.py:
    adjust = world_size * batch_size * model_ema_steps / epochs
    alpha = min(1.0, (1.0 - model_ema_decay) * adjust);  decay = 1.0 - alpha
and the loop (train_one_epoch) updates after the optimizer step of iteration i of an epoch
when i % model_ema_steps == 0, then resets n_averaged to 0 while epoch < lr_warmup_epochs.

Layout:
  * "<dtype>.model<k>.<name>"  the live model's parameters and buffers at the k-th update
    (dtype "f32" or "f64"; num_batches_tracked is int64 in both);
  * "<dtype>.ema<k>.<name>"    the EMA's after it; "<dtype>.n_averaged<k>" (int64, 0-D) too;
  * "<dtype>.init.<name>"      the model at construction (the EMA's deepcopy);
  * __metadata__: "settings" (JSON: the flags above, epochs x iterations, and "decay", the
    adjusted decay), "updates" (JSON [[epoch, i], ...], one per k), "decays" (JSON
    [[model_ema_decay, world_size, batch_size, model_ema_steps, epochs, decay], ...]: the
    adjustment for several settings).

The model: conv (4, 3, 3, 3), batch norm (4) with its three buffers, linear (5, 7): 35
elements cover ATen's vectorised blocks and its scalar tail. num_batches_tracked starts near
2^24, where int64 -> float32 rounds, so the integer buffer's float arithmetic and truncation
are exercised.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_py import write_safetensors  # noqa: E402  (tests/safetensors_py.py)

import torch  # noqa: E402
from torch import nn  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ema_golden.safetensors")
DTYPES = {"f32": torch.float32, "f64": torch.float64}
SETTINGS = dict(model_ema_decay=0.99, world_size=1, batch_size=8, model_ema_steps=3, epochs=5,
                lr_warmup_epochs=1, train_epochs=3, iterations=8)
DECAY_CASES = [(0.99998, 8, 32, 32, 600), (0.99998, 1, 32, 32, 90), (0.9, 2, 4, 3, 4), (0.99, 1, 8, 3, 5),
               (0.999, 4, 128, 1, 7), (0.0, 1, 1, 1, 1), (1.0, 3, 5, 7, 11)]


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """torchvision references/classification/utils.py (0.14)."""

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


def ema_decay(model_ema_decay, world_size, batch_size, model_ema_steps, epochs):
    """torchvision train.py's adjustment, verbatim."""
    adjust = world_size * batch_size * model_ema_steps / epochs
    alpha = 1.0 - model_ema_decay
    alpha = min(1.0, alpha * adjust)
    return 1.0 - alpha


def make_model():
    return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(7, 5))


def main():
    torch.manual_seed(20261202)
    s = SETTINGS
    decay = ema_decay(s["model_ema_decay"], s["world_size"], s["batch_size"], s["model_ema_steps"], s["epochs"])
    base = make_model().double()
    names = [n for n, _ in base.state_dict().items()]
    init = {n: t.detach().clone() for n, t in base.state_dict().items()}
    init["1.num_batches_tracked"] = torch.tensor(16777211, dtype=torch.int64)
    # The model's state at every iteration: a random walk in float64 (scales differ per
    # tensor), the batch counter one up per iteration.
    states, cur = [], {n: t.clone() for n, t in init.items()}
    for _ in range(s["train_epochs"] * s["iterations"]):
        nxt = {}
        for n, t in cur.items():
            if t.dtype == torch.int64:
                nxt[n] = t + 1
            else:
                nxt[n] = t + torch.randn(t.shape, dtype=torch.float64) * (0.1 + 0.05 * len(n))
        states.append(nxt)
        cur = nxt

    tensors, updates = {}, []
    for dname, dtype in DTYPES.items():
        model = make_model()
        model.to(dtype)

        def load(state):
            with torch.no_grad():
                for n, t in model.state_dict().items():
                    t.copy_(state[n].to(t.dtype))

        load(init)
        for n, t in model.state_dict().items():
            tensors[f"{dname}.init.{n}"] = t.clone()
        ema = ExponentialMovingAverage(model, decay=decay, device="cpu")
        k = 0
        for epoch in range(s["train_epochs"]):
            for i in range(s["iterations"]):
                load(states[epoch * s["iterations"] + i])  # the optimizer step of iteration i
                # train_one_epoch, verbatim
                if ema and i % s["model_ema_steps"] == 0:
                    ema.update_parameters(model)
                    if epoch < s["lr_warmup_epochs"]:
                        # Reset ema buffer to keep copying weights during warmup period
                        ema.n_averaged.fill_(0)
                    for n, t in model.state_dict().items():
                        tensors[f"{dname}.model{k}.{n}"] = t.clone()
                    for n, t in ema.module.state_dict().items():
                        tensors[f"{dname}.ema{k}.{n}"] = t.clone()
                    tensors[f"{dname}.n_averaged{k}"] = ema.n_averaged.clone()
                    if dname == "f64":
                        updates.append([epoch, i])
                    k += 1
        assert list(ema.module.state_dict().keys()) == names

    decays = [[*c, ema_decay(*c)] for c in DECAY_CASES]
    meta = {"torch": torch.__version__, "settings": json.dumps(dict(s, decay=decay)),
            "updates": json.dumps(updates), "decays": json.dumps(decays)}
    write_safetensors(OUT, tensors, meta)
    print(f"{OUT}: {len(updates)} updates, {len(tensors)} tensors, {os.path.getsize(OUT)} bytes, decay {decay!r}")


if __name__ == "__main__":
    main()
