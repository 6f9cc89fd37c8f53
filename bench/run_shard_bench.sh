#!/usr/bin/env bash
# Folders vs shards: the ImageNet training loader end to end on the CPU (read, decode,
# RandomResizedCrop(224), flip, batch of 256, normalised f32), images/s per core, in one run
# on the same photo-like corpus:
#   (a)      torchvision: ImageFolder + DataLoader(T workers, shuffle), ToTensor + Normalize;
#   (b)      ringtape, the folder: open_dataset("imagenet") + Loader(T workers);
#   (c-256)  ringtape, shards `ringtape pack --max-side 256` wrote: open_dataset("webdataset");
#   (c-full) the same on shards packed with --max-side none (every JPEG's own bytes).
# ringtape's rows normalise each batch on the CPU (normalize_pixels), as torchvision does in
# its workers, and also give the uint8-only rate (in training the GPU normalises). Also times
# `ringtape pack` at both sizes. See bench/README.md, "Folders vs shards".
#
#   bench/run_shard_bench.sh [--count N] [--rounds R] [--epochs N] [--threads 1,2] [--batch B]
#                            [--classes K] [--pack-workers N] [--shard-size SIZE]
#                            [--gpu-rate IMG/S] [--out DIR] [--no-build] [--check]
#
# --count N: corpus size (default 1024), made by make_jpeg_corpus.py into OUT/corpus unless
#   a corpus of N files is there already; laid out as OUT/folder/train/class_K/ (symlinks).
# --rounds R: all programs in turn, R times (every other round in reverse order); the table
#   shows medians over the rounds (default 3).
# --epochs N: timed epochs per program run, after one warm-up epoch; each run reports its
#   median (default 3).
# --threads LIST: loader workers T to measure (default 1,2; must include 1: the per-core
#   rate). Every program is pinned to T CPUs (its consumer / main process included).
# --classes K: class folders in the tree (default 8).
# --pack-workers N: `ringtape pack --workers` (default 1: pack's rate per core).
# --shard-size SIZE: `ringtape pack --shard-size` (default 1GB).
# --gpu-rate R: the rate one GPU consumes, for the "cores to feed" column (default 8000).
# --no-build: use the binaries already in bazel-bin/ (bench/dataset_bench, cli/ringtape).
# --check: exit 1 when (c-256)'s per-core rate is under 3x torchvision's.
# Results: OUT (default out/shard_bench): runs/*.json and *.txt (each program run), pack_*.txt,
# table.md, summary.json.
set -euo pipefail

start="$PWD"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"  # Debian's python3 has torch; pyenv's does not

count=1024
rounds=3
epochs=3
threads=1,2
batch=256
classes=8
pack_workers=1
shard_size=1GB
gpu_rate=8000
out=out/shard_bench
build=1
check=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --epochs) epochs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --classes) classes="$2"; shift 2 ;;
    --pack-workers) pack_workers="$2"; shift 2 ;;
    --shard-size) shard_size="$2"; shift 2 ;;
    --gpu-rate) gpu_rate="$2"; shift 2 ;;
    --out) out="$2"; [[ "$out" = /* ]] || out="$start/$out"; shift 2 ;;
    --no-build) build=0; shift ;;
    --check) check=1; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_shard_bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
for v in count rounds epochs batch classes; do
  if [[ ! "${!v}" =~ ^[1-9][0-9]*$ ]]; then
    echo "run_shard_bench.sh: --$v wants a positive integer, got '${!v}'" >&2
    exit 2
  fi
done
if [[ ! "$pack_workers" =~ ^[0-9]+$ ]]; then
  echo "run_shard_bench.sh: --pack-workers wants an integer >= 0, got '$pack_workers'" >&2
  exit 2
fi
IFS=, read -r -a tlist <<<"$threads"
have1=0
for t in "${tlist[@]}"; do
  if [[ ! "$t" =~ ^[1-9][0-9]*$ ]]; then
    echo "run_shard_bench.sh: --threads wants counts like 1,2,4, got '$threads'" >&2
    exit 2
  fi
  ((t == 1)) && have1=1
  if ((t > $(nproc))); then
    echo "WARNING: $t workers on $(nproc) cores: those rows run unpinned and measure oversubscription" >&2
  fi
done
if ((!have1)); then
  echo "run_shard_bench.sh: --threads must include 1 (the per-core rate)" >&2
  exit 2
fi

if ((build)); then
  bazel build //bench:dataset_bench //cli:ringtape >/dev/null 2>&1 || bazel build //bench:dataset_bench //cli:ringtape
fi
BENCH=bazel-bin/bench/dataset_bench
RINGTAPE=bazel-bin/cli/ringtape
for b in "$BENCH" "$RINGTAPE"; do
  [[ -x "$b" ]] || { echo "run_shard_bench.sh: $b is missing (build it, or drop --no-build)" >&2; exit 1; }
done

mkdir -p "$out"
out="$(cd "$out" && pwd)"
# The folder index cache (data/formats/image_folder.h) stays with the results, not in ~/.cache.
export RINGTAPE_CACHE_DIR="$out/index_cache"

# The corpus: ImageNet-like sizes and entropy (make_jpeg_corpus.py); remade when its count
# differs from --count.
corpus="$out/corpus"
have=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["count"])' "$corpus/corpus.json" 2>/dev/null ||
  echo 0)
if [[ "$have" != "$count" ]]; then
  rm -rf "$corpus"
  "$PY" bench/make_jpeg_corpus.py "$corpus" --count "$count"
fi

# The ImageFolder tree: K class folders of symlinks, file i in class i % K.
folder="$out/folder"
rm -rf "$folder"
for ((k = 0; k < classes; k++)); do mkdir -p "$folder/train/class_$k"; done
i=0
for f in "$corpus"/img_*.jpg; do
  ln -s "$f" "$folder/train/class_$((i % classes))/$(basename "$f")"
  i=$((i + 1))
done

# Waits for an idle machine before each program (wait_idle).
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

# Page cache warm for everything below: every read comes from memory.
cat "$corpus"/*.jpg >/dev/null

# Both shard sets, packed afresh and timed (pack's own figure: listing to the last shard).
for side in 256 none; do
  rm -rf "$out/shards_$side"
  echo; wait_idle
  echo "== ringtape pack --max-side $side --workers $pack_workers"
  "$RINGTAPE" pack --data-path "$folder/train" --output "$out/shards_$side/train" --max-side "$side" --quality 90 \
    --shard-size "$shard_size" --workers "$pack_workers" --no-progress | tee "$out/pack_$side.txt"
  cat "$out/shards_$side"/*.tar >/dev/null
done

rm -rf "$out/runs" "$out/table.md" "$out/summary.json"
mkdir -p "$out/runs"

# ringtape: Loader threads; OMP_NUM_THREADS=T for normalize_pixels' team (1 without
# --normalize, so that no team spins up), passive so that its threads sleep between batches.
rt() {  # NAME T DATASET PATH [--normalize]
  local name="$1" t="$2" ds="$3" path="$4"; shift 4
  local omp=1
  (($#)) && omp="$t"
  echo; wait_idle
  echo "== ringtape $name, $t worker(s)"
  OMP_NUM_THREADS="$omp" OMP_WAIT_POLICY=passive "$BENCH" --dataset "$ds" --data-path "$path" --workers "$t" \
    --batch "$batch" --epochs "$epochs" --warmup 1 "$@" --json "$out/runs/$name.T$t.r$r.json" \
    2>&1 | tee "$out/runs/$name.T$t.r$r.txt"
}
# torchvision: glibc malloc never trims or mmaps (PyTorch's best setting here, as in the other
# benchmarks); torch.set_num_threads(1) in the main process and every worker.
tv() {  # T
  local t="$1"
  echo; wait_idle
  echo "== torchvision ImageFolder, $t worker(s)"
  MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 OMP_NUM_THREADS=1 \
    "$PY" bench/dataset_bench_torch.py --data-path "$folder/train" --workers "$t" --batch "$batch" \
    --epochs "$epochs" --warmup 1 --json "$out/runs/tv.T$t.r$r.json" 2>&1 | tee "$out/runs/tv.T$t.r$r.txt"
}
run_one() {  # CONFIG T
  case "$1" in
    tv) tv "$2" ;;
    folder_norm) rt "$1" "$2" imagenet "$folder" --normalize ;;
    folder_u8) rt "$1" "$2" imagenet "$folder" ;;
    s256_norm) rt "$1" "$2" webdataset "$out/shards_256" --normalize ;;
    s256_u8) rt "$1" "$2" webdataset "$out/shards_256" ;;
    full_norm) rt "$1" "$2" webdataset "$out/shards_none" --normalize ;;
    full_u8) rt "$1" "$2" webdataset "$out/shards_none" ;;
  esac
}
configs=(tv folder_norm folder_u8 s256_norm s256_u8 full_norm full_u8)
for ((r = 1; r <= rounds; r++)); do
  echo
  echo "######## round $r/$rounds"
  order=("${configs[@]}")
  if ((r % 2 == 0)); then  # reversed: drifts in the machine's speed hit every program alike
    order=()
    for ((k = ${#configs[@]} - 1; k >= 0; k--)); do order+=("${configs[$k]}"); done
  fi
  for t in "${tlist[@]}"; do
    for c in "${order[@]}"; do run_one "$c" "$t"; done
  done
done

echo
set +e
"$PY" - "$out" "$rounds" "$threads" "$gpu_rate" "$check" "$pack_workers" "$epochs" <<'EOF'
import glob, json, os, re, statistics, sys, tarfile

out, rounds, threads, gpu_rate, check, pack_workers, epochs = sys.argv[1:]
rounds, gpu_rate, check, epochs = int(rounds), float(gpu_rate), check == "1", int(epochs)
tlist = [int(t) for t in threads.split(",")]


def runs(config, t):
    res = []
    for r in range(1, rounds + 1):
        p = os.path.join(out, "runs", f"{config}.T{t}.r{r}.json")
        if os.path.exists(p):
            with open(p) as f:
                res.append(json.load(f))
    return res


def med(config, t, key="img_per_s"):
    v = [x[key] for x in runs(config, t)]
    return statistics.median(v) if v else None


def mean_jpeg_bytes(paths):
    total = n = 0
    for p in paths:
        with tarfile.open(p) as tf:
            for m in tf:
                if m.isfile() and not m.name.endswith(".cls"):
                    total += m.size
                    n += 1
    return total / n if n else None


with open(os.path.join(out, "corpus", "corpus.json")) as f:
    corpus = json.load(f)
sizes = {"folder": corpus["mean_bytes"]}
pack = {}
for side in ("256", "none"):
    shards = sorted(glob.glob(os.path.join(out, f"shards_{side}", "train-*.tar")))
    sizes[side] = mean_jpeg_bytes(shards)
    with open(os.path.join(out, f"pack_{side}.txt")) as f:
        text = f.read()
    m = re.search(r"(\d+) re-encoded; ([\d.]+) s, (\d+) images/s", text)
    pack[side] = {"shards": len(shards), "reencoded": int(m.group(1)) if m else None,
                  "seconds": float(m.group(2)) if m else None, "img_per_s": float(m.group(3)) if m else None,
                  "workers": int(pack_workers), "mean_jpeg_bytes": sizes[side]}

rows = [
    ("(a)", "torchvision ImageFolder + DataLoader", "folder", "tv", None),
    ("(b)", "ringtape imagenet (folder)", "folder", "folder_norm", "folder_u8"),
    ("(c-256)", "ringtape webdataset, pack --max-side 256", "256", "s256_norm", "s256_u8"),
    ("(c-full)", "ringtape webdataset, pack --max-side none", "none", "full_norm", "full_u8"),
]
fmt = lambda v, d=0: "-" if v is None else f"{v:,.{d}f}"
base = med("tv", 1)
others = [x["others_cpu"] for c in ("tv", "folder_norm", "folder_u8", "s256_norm", "s256_u8", "full_norm", "full_u8")
          for t in tlist for x in runs(c, t) if x.get("others_cpu") is not None]
extra_t = [t for t in tlist if t != 1]
head = ["row", "pipeline", "mean file KB", "img/s per core", "ratio to (a)", "u8-only img/s per core"]
head += [f"T={t} img/s (u8-only)" for t in extra_t]
head += [f"cores for {gpu_rate:,.0f} img/s (u8-only)"]
lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
summary_rows = []
for key, name, size_key, norm, u8 in rows:
    pc, pc_u8 = med(norm, 1), med(u8, 1) if u8 else None
    cells = [key, name, fmt(sizes[size_key] / 1000 if sizes[size_key] else None, 1), fmt(pc),
             "-" if pc is None or not base else f"{pc / base:.2f}x", fmt(pc_u8)]
    per_t = {}
    for t in extra_t:
        a, b = med(norm, t), med(u8, t) if u8 else None
        per_t[str(t)] = {"img_per_s": a, "u8_img_per_s": b}
        cells.append(fmt(a) + ("" if b is None else f" ({fmt(b)})"))
    cores = None if not pc else gpu_rate / pc
    cores_u8 = None if not pc_u8 else gpu_rate / pc_u8
    cells.append(fmt(cores, 1) + ("" if cores_u8 is None else f" ({fmt(cores_u8, 1)})"))
    lines.append("| " + " | ".join(cells) + " |")
    summary_rows.append({
        "row": key, "pipeline": name, "mean_file_bytes": sizes[size_key], "img_per_s_per_core": pc,
        "ratio_to_a": None if pc is None or not base else pc / base, "u8_img_per_s_per_core": pc_u8,
        "by_workers": per_t, "cores_for_gpu_rate": cores, "cores_for_gpu_rate_u8": cores_u8,
        "cpu_ms_per_img": None if med(norm, 1, "cpu_s_per_img") is None else 1e3 * med(norm, 1, "cpu_s_per_img"),
        "round_img_per_s_per_core": [x["img_per_s"] for x in runs(norm, 1)],
    })

notes = [
    "",
    f"Corpus: {corpus['count']} {corpus['source']} JPEGs at ImageNet's sizes (make_jpeg_corpus.py), mean "
    f"{corpus['mean_bytes'] / 1000:.1f} KB, {corpus['bits_per_pixel']:.2f} bits/pixel; mean JPEG bytes in the "
    f"shards: --max-side none {fmt(sizes['none'] and sizes['none'] / 1000, 1)} KB, --max-side 256 "
    f"{fmt(sizes['256'] and sizes['256'] / 1000, 1)} KB ({pack['256']['reencoded']} re-encoded).",
    f"Pack (`ringtape pack`, {pack_workers} worker(s), quality 90): --max-side 256 {fmt(pack['256']['img_per_s'])} "
    f"img/s, --max-side none {fmt(pack['none']['img_per_s'])} img/s.",
    f"Rates: images/s of a whole epoch (batch 256, shuffled, after one warm-up epoch; page cache warm: every file "
    f"read from memory), median of {epochs} epochs per run, median over {rounds} round(s). Per core = 1 loader "
    f"worker with the process pinned to 1 CPU (consumer / main process included). Normalised f32 NCHW batches "
    f"on the CPU on every row; u8-only: ringtape's uint8 batch, normalised on the GPU in training.",
]
if others:
    worst = max(others)
    notes.append(f"Other processes' share of the machine's CPU during the runs: median "
                 f"{100 * statistics.median(others):.1f}%, worst {100 * worst:.1f}%" +
                 (" (WARNING: busy machine, rates distorted; rerun when idle)" if worst > 0.05 else "") + ".")
table = "\n".join(lines + notes) + "\n"
print(table)
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(table)
c256 = med("s256_norm", 1)
ok = bool(base and c256 and c256 >= 3 * base)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump({"corpus": corpus, "pack": pack, "rows": summary_rows, "threads": tlist, "rounds": rounds,
               "epochs": epochs, "gpu_rate": gpu_rate, "target": "(c-256) per core >= 3x (a)", "target_met": ok,
               "others_cpu_worst": max(others) if others else None}, f, indent=2)
    f.write("\n")
if check:
    print(f"check: (c-256) per core {fmt(c256)} img/s vs 3x (a) = {fmt(3 * base if base else None)}: "
          f"{'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)
EOF
status=$?
exit $status
