#!/usr/bin/python3
"""Writes Fashion-MNIST as an ImageNet-style folder of JPEGs: the proxy on which ImageNet
recipes (--recipe; bench/run_recipe_proxy.sh) train through the real ImageNet path (file
lists, JPEG decode, RandomResizedCrop, auto-augment, resize + centre crop) in minutes.

  /usr/bin/python3 bench/make_fashion_jpeg.py OUT_DIR [--source /usr/share/datasets/fashion-mnist]
                                             [--size 32] [--quality 95] [--train N] [--val N]

OUT_DIR/train/<class>/<index>.JPEG and OUT_DIR/val/<class>/<index>.JPEG, the ten classes
named by their Fashion-MNIST names; each 28x28 grey image is resized (bicubic) to
--size x --size and saved as an RGB JPEG (three equal channels), so the pipeline's colour
operations run as on photos. --train / --val take the first N images of each split
(default: all 60000 / 10000). Deterministic; an existing OUT_DIR with files is refused.
"""

import argparse
import gzip
import os
import struct
import sys

from PIL import Image

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return dims, data[4 + 4 * ndim:]


def write_split(src, prefix, out, split, count, size, quality):
    (n, h, w), pixels = read_idx(os.path.join(src, prefix + "-images-idx3-ubyte.gz"))
    (nl,), labels = read_idx(os.path.join(src, prefix + "-labels-idx1-ubyte.gz"))
    if nl != n:
        sys.exit(f"{prefix}: {n} images but {nl} labels")
    count = n if count is None else min(count, n)
    for c in CLASSES:
        os.makedirs(os.path.join(out, split, c), exist_ok=True)
    for i in range(count):
        img = Image.frombytes("L", (w, h), pixels[i * h * w:(i + 1) * h * w])
        if size != w:
            img = img.resize((size, size), Image.BICUBIC)
        img.convert("RGB").save(os.path.join(out, split, CLASSES[labels[i]], f"{i:05d}.JPEG"), quality=quality)
    return count


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--quality", type=int, default=95)
    p.add_argument("--train", type=int, default=None)
    p.add_argument("--val", type=int, default=None)
    a = p.parse_args()
    if os.path.isdir(a.out) and os.listdir(a.out):
        sys.exit(f"{a.out} is not empty; remove it or choose another folder")
    nt = write_split(a.source, "train", a.out, "train", a.train, a.size, a.quality)
    nv = write_split(a.source, "t10k", a.out, "val", a.val, a.size, a.quality)
    print(f"wrote {nt} training and {nv} validation JPEGs of {a.size}x{a.size} to {a.out}")


if __name__ == "__main__":
    main()
