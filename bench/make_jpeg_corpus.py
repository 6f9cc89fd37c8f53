#!/usr/bin/python3
"""Writes a corpus of photo-like JPEGs for bench/run_jpeg_pipeline_bench.sh.

  /usr/bin/python3 bench/make_jpeg_corpus.py OUT_DIR [--count 512] [--seed 0] [--quality 90]
                                             [--photos FILE ...]

ImageNet's training JPEGs average ~110 KB at ~400x350 (about 5-6 bits per pixel), and a
JPEG decoder's time follows the bits it has to Huffman-decode, so the content must carry
comparable entropy: flat or smooth synthetic images decode several times faster than
photos. Each image here is a sum of

  - multi-octave smooth noise (1/f amplitudes), luminance plus a weaker colour tint;
  - random shapes (ellipses, polygons, rectangles, lines) with hard edges;
  - fine texture (noise at 1/1-1/3 resolution) under a smooth mask, like grass or fur;
  - mild per-pixel noise (sensor noise),

at ImageNet-like sizes (500x375, 375x500, 500x333, 400x300, ...), saved by PIL at quality 90
with PIL's default 4:2:0 chroma subsampling, baseline, no restart markers: pure RGB photos.

With --photos, images are instead random crops/resizes (and mirror images) of the given
real photos, re-encoded the same way. The few photos found on the development machine (two
of a circuit board, one seaside banner) are smoother than ImageNet: such a corpus came out at
~2.5 bits per pixel (53 KB), so it serves as a cross-check, not as the default.

The corpus is deterministic for a given --seed (and numpy/PIL version). Prints the count,
mean file size and mean bits per pixel, and writes them to OUT_DIR/corpus.json.
"""

import argparse
import json
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, JpegImagePlugin

# (width, height, weight): the common ImageNet shapes, landscape more often than portrait.
SIZES = [
    (500, 375, 8), (375, 500, 3), (500, 333, 6), (333, 500, 2), (400, 300, 2),
    (500, 400, 2), (450, 338, 1), (500, 281, 1), (400, 400, 1), (480, 360, 1),
]

# Tuned so that the corpus averages ~5 bits/pixel (~107 KB at 171 kpixel) at quality 90,
# like ImageNet's ~110 KB files.
# Fine texture: (downsampling factor of the noise grid, amplitude in grey levels).
TEXTURE = ((1, 36.0), (2, 30.0), (3, 22.0))
CHROMA_TEXTURE = 16.0  # amplitude of its per-channel part (colour detail)
TEXTURE_COVER = 1.0  # mean of the texture mask before clipping to [0, 1]
SENSOR_NOISE = 3.0  # standard deviation, grey levels


def smooth_noise(rng, w, h, cells, amp):
    """Noise on a (cells x cells*aspect) grid, bicubically upsampled to w x h."""
    gw = max(2, int(round(cells * w / max(w, h))))
    gh = max(2, int(round(cells * h / max(w, h))))
    grid = rng.standard_normal((gh, gw)).astype(np.float32)
    up = Image.fromarray(grid, mode="F").resize((w, h), Image.BICUBIC)
    return np.asarray(up, dtype=np.float32) * amp


def octave_noise(rng, w, h, base_amp, octaves=7, first=3, beta=0.75):
    """Sum of smooth noise octaves, cells doubling per octave, amplitude ~ cells^-beta."""
    out = np.zeros((h, w), np.float32)
    cells = first
    for _ in range(octaves):
        out += smooth_noise(rng, w, h, cells, base_amp * (first / cells) ** beta)
        cells *= 2
    return out


def synthetic_image(rng, w, h):
    # Background: luminance octaves plus a weaker, smoother chroma field.
    lum = 110 + octave_noise(rng, w, h, 45.0)
    base_color = rng.uniform(-40, 40, size=3).astype(np.float32)
    chroma = np.stack([octave_noise(rng, w, h, 14.0, octaves=4) for _ in range(3)], axis=-1)
    img = lum[..., None] + base_color + chroma

    # Shapes with hard edges, each filled with its own colour plus shading.
    layer = Image.new("RGB", (w, h))
    mask = Image.new("L", (w, h), 0)
    draw, mdraw = ImageDraw.Draw(layer), ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(6, 16))):
        color = tuple(int(c) for c in rng.integers(0, 256, size=3))
        kind = rng.integers(0, 4)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.04, 0.35) * min(w, h)
        if kind == 0:
            box = [cx - r, cy - r * rng.uniform(0.3, 1.5), cx + r, cy + r * rng.uniform(0.3, 1.5)]
            draw.ellipse(box, fill=color)
            mdraw.ellipse(box, fill=255)
        elif kind == 1:
            n = int(rng.integers(3, 8))
            ang = np.sort(rng.uniform(0, 2 * np.pi, n))
            pts = [(cx + r * rng.uniform(0.4, 1.2) * np.cos(a), cy + r * rng.uniform(0.4, 1.2) * np.sin(a)) for a in ang]
            draw.polygon(pts, fill=color)
            mdraw.polygon(pts, fill=255)
        elif kind == 2:
            box = [cx - r, cy - r * 0.6, cx + r, cy + r * 0.6]
            draw.rectangle(box, fill=color)
            mdraw.rectangle(box, fill=255)
        else:
            pts = [(cx, cy), (cx + rng.uniform(-2, 2) * r, cy + rng.uniform(-2, 2) * r)]
            width = int(rng.integers(1, 8))
            draw.line(pts, fill=color, width=width)
            mdraw.line(pts, fill=255, width=width)
    shape_rgb = np.asarray(layer, np.float32) + 0.6 * (lum[..., None] - 110)
    alpha = np.asarray(mask, np.float32)[..., None] / 255.0 * rng.uniform(0.6, 0.95)
    img = img * (1 - alpha) + shape_rgb * alpha

    # Fine texture where a smooth mask says so (foliage, fur, fabric).
    tex_mask = np.clip(TEXTURE_COVER + octave_noise(rng, w, h, 0.6, octaves=3, first=2), 0, 1)
    tex = np.zeros((h, w), np.float32)
    for div, amp in TEXTURE:
        small = rng.standard_normal((max(2, h // div), max(2, w // div))).astype(np.float32)
        tex += np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BILINEAR)) * amp
    img += (tex * tex_mask)[..., None] * rng.uniform(0.8, 1.2, size=3).astype(np.float32)
    # and some colour in it: independent per channel, at half resolution (4:2:0 keeps it).
    for c in range(3):
        small = rng.standard_normal((max(2, h // 2), max(2, w // 2))).astype(np.float32)
        img[..., c] += np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BILINEAR)) * (
            CHROMA_TEXTURE * tex_mask)

    # Sensor noise, per pixel and channel.
    img += rng.normal(0, SENSOR_NOISE, size=img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img + 0.5, 0, 255).astype(np.uint8), "RGB")


def photo_image(rng, photos, index, w, h):
    src = photos[index % len(photos)]
    sw, sh = src.size
    # Scale so that the photo covers w x h with a random margin, then crop at random.
    s = max(w / sw, h / sh) * rng.uniform(1.0, 1.3)
    rw, rh = max(w, int(round(sw * s))), max(h, int(round(sh * s)))
    im = src.resize((rw, rh), Image.BICUBIC)
    x, y = int(rng.integers(0, rw - w + 1)), int(rng.integers(0, rh - h + 1))
    im = im.crop((x, y, x + w, y + h))
    if rng.integers(0, 2):
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    return im


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--photos", nargs="+", default=None, help="real photos to crop instead of synthesising")
    args = ap.parse_args()
    if args.count < 1:
        sys.exit("--count must be >= 1")

    photos = None
    if args.photos:
        photos = [Image.open(p).convert("RGB") for p in args.photos]
    os.makedirs(args.out_dir, exist_ok=True)
    weights = np.array([s[2] for s in SIZES], np.float64)
    weights /= weights.sum()
    total_bytes = 0
    total_pixels = 0
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        w, h, _ = SIZES[int(rng.choice(len(SIZES), p=weights))]
        im = photo_image(rng, photos, i, w, h) if photos else synthetic_image(rng, w, h)
        path = os.path.join(args.out_dir, f"img_{i:05d}.jpg")
        im.save(path, "JPEG", quality=args.quality)  # PIL's default subsampling: 4:2:0
        total_bytes += os.path.getsize(path)
        total_pixels += w * h
    with Image.open(os.path.join(args.out_dir, "img_00000.jpg")) as check:
        sampling = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}.get(JpegImagePlugin.get_sampling(check), "other")
        mode = check.mode
    stats = {
        "count": args.count,
        "source": "photos" if photos else "synthetic",
        "photos": args.photos or [],
        "seed": args.seed,
        "quality": args.quality,
        "subsampling": sampling,
        "mode": mode,
        "mean_bytes": total_bytes / args.count,
        "mean_pixels": total_pixels / args.count,
        "bits_per_pixel": 8.0 * total_bytes / total_pixels,
    }
    with open(os.path.join(args.out_dir, "corpus.json"), "w") as f:
        json.dump(stats, f, indent=2)
        f.write("\n")
    print(f"corpus: {args.count} {stats['source']} JPEGs in {args.out_dir}, quality {args.quality}, "
          f"{sampling}, {mode}; mean {stats['mean_bytes'] / 1000:.1f} KB at {stats['mean_pixels'] / 1000:.0f} kpixel, "
          f"{stats['bits_per_pixel']:.2f} bits/pixel")


if __name__ == "__main__":
    main()
