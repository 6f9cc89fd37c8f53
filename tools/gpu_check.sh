#!/usr/bin/env bash
# GPU check in two halves (docs/gpu-check.md):
#   tools/gpu_check.sh prepare   here, no GPU needed: builds every GPU test binary, //cli:ringtape,
#                                //bench:train_step_bench and //bench:cuda_kernel_bench statically (the
#                                CUDA runtime included) and packs them, with copies of the non-system
#                                shared libraries they need (libjpeg, libpng, ...) for machines that
#                                lack them, into gpu_check_out/payload.tar.xz (git-ignored), next to
#                                a manifest and their ldd; and the kernel lab's report (GPU_CHECK_LAB_REPORT,
#                                default out/kernel_lab/resnet50-bf16-channels_last/report.json) when there is one.
#   tools/gpu_check.sh run [--tier smoke|full|lab|all]
#                                on the GPU machine, in the copied tree's root with gpu_check_out/ carried:
#                                finds the CUDA libraries, queries the device, then runs three tiers, each
#                                within its own budget (GPU_CHECK_SMOKE_S, default 180; GPU_CHECK_FULL_S,
#                                default 240; GPU_CHECK_LAB_S, default 200): smoke = data parallel at world 1
#                                against one process (fp32, bf16 with bf16 reduction, fp16, --sync-bn,
#                                accumulation), every GPU test binary (CUDA_LAUNCH_BLOCKING=1), a short
#                                CUDA training run and the kernel bandwidth benchmark; full = fp32
#                                training, compute-sanitizer memcheck (no leak check), racecheck and
#                                synccheck, ResNet50 bf16 batch-256 throughput and peak memory, and the
#                                throughput benchmark against PyTorch; lab = every hand-written kernel of
#                                a ResNet50 bf16 batch-256 step timed (CUPTI, median of 5 warm steps) and,
#                                where ncu is present, counted (Nsight Compute), against the kernel lab's
#                                bounds and counters (Note [Lab tier]). Summary tables last, then one
#                                "RESULT <tier>: P passed, F failed, N not run" line per tier run.
#                                Default --tier all (smoke, full, lab); a session can run smoke, fix, rerun,
#                                then full, then lab.
# Exit codes: 0 nothing failed (steps "not yet available" (N/A) count as passed; steps the budget left
# out or cut short are NOT RUN, not failures: see the RESULT lines); 1 a step failed (failure, crash,
# sanitizer error, a step's own timeout); 2 usage; 3 prepare's output missing or over the size limit,
# or the build failed; 4 run found no usable NVIDIA GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DEST=gpu_check_out
LIMIT_BYTES=$((64 * 1024 * 1024))  # the device tool's limit for the whole travelling tree
WARN_BYTES=$((56 * 1024 * 1024))
LAB_REPORT=$DEST/kernel_lab_report.json  # the kernel lab's report, as prepare copies it (Note [Lab tier])

usage() {
  cat >&2 <<'EOF'
usage: tools/gpu_check.sh prepare | run [--tier smoke|full|lab|all]
  prepare  (no GPU) build the GPU test binaries, //cli:ringtape, //bench:train_step_bench and
           //bench:cuda_kernel_bench statically and pack them (bin/) with copies of the non-system
           shared libraries they need (lib/) into gpu_check_out/payload.tar.xz, with MANIFEST.txt
           and ldd.txt; copy the kernel lab's report there (GPU_CHECK_LAB_REPORT, default
           out/kernel_lab/resnet50-bf16-channels_last/report.json; none: a warning)
  run [--tier smoke|full|lab|all]   (GPU machine, repository root, gpu_check_out/ present; default all)
           find the CUDA libraries and query the device, then
           smoke (GPU_CHECK_SMOKE_S=180): data parallel at world 1 (NCCL) against one process in
                 six variants, every GPU test binary with CUDA_LAUNCH_BLOCKING=1,
                 `ringtape train --device cuda` (5 steps), cuda_kernel_bench --quick
           full  (GPU_CHECK_FULL_S=240, cheapest first): fp32 training, compute-sanitizer memcheck
                 (--leak-check no) of a test, racecheck and synccheck of small tests, memcheck of a
                 short training run, ResNet50 bf16 b256 throughput + peak memory, the same against
                 PyTorch eager
           lab   (GPU_CHECK_LAB_S=200): ResNet50 bf16 b256 channels-last, each hand-written kernel's
                 device time per step (CUPTI, median of 5 warm steps); where ncu is found, its
                 counters for one step at batch GPU_CHECK_LAB_NCU_BATCH (default: the lab's largest
                 measured batch), as many launches as the budget allows (GPU_CHECK_LAB_NCU_LAUNCH_S=0.1
                 s per launch assumed); both against the kernel lab's report (tools/kernel_lab_compare.py)
           a step the tier's budget cuts is NOT RUN (not FAIL); one "RESULT <tier>: ..." line per
           tier; log, results snippet and JSON go to $OUT (else gpu_check_out/last_run/)
exit codes: 0 nothing failed, 1 a step failed, 2 usage, 3 prepare output missing/too large or build failed,
            4 no usable NVIDIA GPU
EOF
}

# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------

# //tests/cuda:foo_test -> tests_cuda__foo_test (one flat folder; unique per label).
label_to_name() { local l=${1#//}; l=${l//\//_}; echo "${l/:/__}"; }
label_to_path() { local l=${1#//}; echo "bazel-bin/${l/://}"; }

# The tests tagged "gpu" (Note [Test tags], tests/BUILD): tests/cuda, the CUDA runtime's test,
# the NCCL backend and our CUDA reduce kernel, the trainer's CUDA cases.
gpu_test_labels() {
  local expr="attr(tags, '\\bgpu\\b', tests(//...))"
  bazel query --output=label "$expr" 2>/dev/null || {
    echo "gpu_check prepare: bazel query failed: $expr" >&2
    bazel query --output=label "$expr" >&2 || true
    return 1
  }
}

# The kernel lab's report (bench/run_kernel_lab.sh, about 12 minutes here) into $DEST for the lab
# tier, noted in the manifest. None at the default place is a warning (the tier then times the
# kernels with nothing to compare them with); a GPU_CHECK_LAB_REPORT that is not a report fails.
copy_lab_report() {  # manifest
  local src=${GPU_CHECK_LAB_REPORT:-out/kernel_lab/resnet50-bf16-channels_last/report.json} ok=0
  [[ -f "$src" ]] && python3 -c 'import json, sys
sys.exit(json.load(open(sys.argv[1])).get("format") != "ringtape kernel lab report 1")' "$src" 2>/dev/null && ok=1
  if ((ok)); then
    cp "$src" "$LAB_REPORT"
    local made
    made=$(date -u -r "$src" +%Y-%m-%dT%H:%M:%SZ)
    echo "# kernel lab report: $(basename "$LAB_REPORT") from $src, made $made" >>"$1"
    echo "== kernel lab report: $src ($(stat -c %s "$src") bytes, made $made)"
  elif [[ -n "${GPU_CHECK_LAB_REPORT:-}" ]]; then
    echo "gpu_check prepare: GPU_CHECK_LAB_REPORT=$src is not a kernel lab report (no such file, or no" \
      "\"format\": \"ringtape kernel lab report 1\"): give the report.json of bench/run_kernel_lab.sh" >&2
    exit 3
  else
    echo "# kernel lab report: none (the lab tier times the kernels alone)" >>"$1"
    echo "gpu_check prepare: WARNING: no kernel lab report at $src: the lab tier will time the kernels with" \
      "no bounds to compare them with; run 'bash bench/run_kernel_lab.sh' first (about 12 minutes), then" \
      "prepare again" >&2
  fi
}

cmd_prepare() {
  command -v bazel >/dev/null || { echo "gpu_check prepare: bazel not found (prepare runs on the build machine, not the GPU one)" >&2; exit 3; }
  local tests
  tests=$(gpu_test_labels) || exit 3
  if [[ -z "$tests" ]]; then
    echo "gpu_check prepare: no GPU test targets found" >&2
    exit 3
  fi
  local others="//cli:ringtape //bench:train_step_bench //bench:cuda_kernel_bench"
  echo "== GPU test targets:"
  printf '   %s\n' $tests
  # --dynamic_mode=off: cc_tests (not linkstatic) link the project's libraries statically instead of
  # through bazel-bin/_solib_k8/*.so, which would not travel. cudart is static already
  # (third_party/cuda.BUILD.tpl); cuDNN/cuBLAS/NCCL stay dynamic and `run` finds them there.
  # System libraries stay dynamic: a fully static binary (-static) cannot work, since
  # libcudart_static dlopens the driver's libcuda.so, and -static-libstdc++ has no effect because
  # Bazel's toolchain passes -lstdc++ explicitly. ldd.txt records the glibc/libstdc++ versions
  # needed (today GLIBC_2.35 and GLIBCXX_3.4.30, from Debian 12; the GPU image is expected to be newer).
  # --define=ringtape_onednn=off: no libdnnl (40 MB) to carry; the CPU reference convolutions
  # the GPU tests compare against run on the im2col + GEMM kernels (third_party/BUILD).
  local flags=(--dynamic_mode=off --define=ringtape_onednn=off)
  echo "== bazel build ${flags[*]} <tests> $others"
  # shellcheck disable=SC2086
  if ! bazel build "${flags[@]}" $tests $others; then
    echo "gpu_check prepare: build failed" >&2
    exit 3
  fi

  rm -rf "$DEST"
  mkdir -p "$DEST/bin"
  local manifest="$DEST/MANIFEST.txt" lddf="$DEST/ldd.txt"
  {
    echo "# gpu_check_out: made by tools/gpu_check.sh prepare"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "# host: $(uname -m), $(grep -m1 '^PRETTY_NAME=' /etc/os-release 2>/dev/null | cut -d'"' -f2), $(ldd --version | head -1)"
    echo "# nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
    echo "# bazel flags: ${flags[*]}"
    echo "# kind label file bytes sha256"
  } >"$manifest"
  : >"$lddf"
  local l kind src name bad=0
  for l in $tests $others; do
    kind="bin"
    [[ " $others " == *" $l "* ]] || kind="test"
    src=$(label_to_path "$l")
    name=$(label_to_name "$l")
    [[ -f "$src" ]] || { echo "gpu_check prepare: $l built but $src is missing" >&2; exit 3; }
    cp "$src" "$DEST/bin/$name"
    chmod u+w "$DEST/bin/$name"
    # Debug sections only: symbols stay, so sanitizer backtraces keep function names.
    strip --strip-debug "$DEST/bin/$name"
    {
      echo "== $name ($l)"
      ldd "$DEST/bin/$name" 2>&1 | sed 's/ (0x[0-9a-f]*)$//'
      echo "   needs: glibc $(objdump -T "$DEST/bin/$name" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)" \
        "libstdc++ $(objdump -T "$DEST/bin/$name" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
    } >>"$lddf"
    if ldd "$DEST/bin/$name" | grep -q '_solib_\|bazel-out'; then
      echo "gpu_check prepare: $name links a Bazel-built shared library (not static):" >&2
      ldd "$DEST/bin/$name" | grep '_solib_\|bazel-out' >&2
      bad=1
    fi
    echo "$kind $l bin/$name $(stat -c %s "$DEST/bin/$name") $(sha256sum "$DEST/bin/$name" | cut -c1-16)" >>"$manifest"
  done
  [[ $bad -eq 0 ]] || exit 3

  # Shared libraries that are neither glibc's, libstdc++'s nor the CUDA stack's (today libjpeg,
  # libpng, libz, libgomp): copied into $DEST/lib. `run` puts a library from there on the path
  # only when the GPU machine has none of that name (its image is not Debian: Debian's
  # libjpeg.so.62, for one, is not there), so the machine's own copies win where it has them.
  mkdir -p "$DEST/lib"
  local lname lpath
  while read -r lname lpath; do
    [[ -n "$lname" ]] || continue
    cp -L "$lpath" "$DEST/lib/$lname"
    echo "lib $lname lib/$lname $(stat -c %s "$DEST/lib/$lname") $(sha256sum "$DEST/lib/$lname" | cut -c1-16)" >>"$manifest"
  done < <(for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -vE '^(libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|ld-linux[^ ]*|libcuda|libcudart|libcublas|libcublasLt|libcudnn[^ ]*|libnccl|libnvrtc|libnvJitLink)[.-]' || true)

  copy_lab_report "$manifest"

  # bin/ and lib/ travel as one xz'd tar, payload.tar.xz (the limit counts what travels); `run`
  # unpacks it into a temporary folder. xz, not gzip: the binaries repeat one another (each
  # links the engine and the CUDA kernels), which gzip's 32 KiB window cannot see and xz's
  # 64 MiB one can: 300 MB of binaries became 59.7 MB with gzip -9 and 13.5 MB with xz -9.
  # If even that is too big, the symbol tables go as well (sanitizer backtraces then lose
  # function names).
  local bin_bytes tree_bytes total unpacked
  unpacked=$(du -cb "$DEST/bin" "$DEST/lib" | tail -1 | cut -f1)
  pack_payload() {
    tar -C "$DEST" -cf - bin lib | xz -9 -T0 >"$DEST/payload.tar.xz"
    bin_bytes=$(($(du -cb "$DEST" | tail -1 | cut -f1) - $(du -cb "$DEST/bin" "$DEST/lib" | tail -1 | cut -f1)))
  }
  pack_payload
  tree_bytes=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  if ((bin_bytes + tree_bytes > WARN_BYTES)); then
    echo "== over $((WARN_BYTES >> 20)) MiB: stripping symbol tables too"
    strip --strip-unneeded "$DEST"/bin/*
    echo "# symbol tables stripped (the hashes above are of the binaries before)" >>"$manifest"
    pack_payload
  fi
  rm -rf "${DEST:?}/bin" "${DEST:?}/lib"
  echo "# payload: payload.tar.xz $(stat -c %s "$DEST/payload.tar.xz") bytes ($unpacked unpacked)" \
    "$(sha256sum "$DEST/payload.tar.xz" | cut -c1-16)" >>"$manifest"
  total=$((bin_bytes + tree_bytes))

  echo "== $DEST/MANIFEST.txt"
  cat "$manifest"
  echo "== shared libraries ($DEST/ldd.txt)"
  grep -hoE '^\s*lib[^ ]+' "$lddf" | sed 's/^\s*//' | sort | uniq -c | sort -rn | sed 's/^/   /'
  grep -h 'needs:' "$lddf" | sort -u | sed 's/^ */   /'
  awk -v d="$DEST" -v b="$bin_bytes" -v t="$tree_bytes" 'BEGIN {
    printf "== sizes: %s %.1f MiB + rest of the tree %.1f MiB = %.1f MiB (limit 64 MiB)\n", d, b / 1048576, t / 1048576, (b + t) / 1048576 }'
  if ((total > LIMIT_BYTES)); then
    echo "gpu_check prepare: FAILED: $DEST plus the working tree is $total bytes, over the device tool's 64 MiB;" \
      "drop binaries or build with less (e.g. fewer gpu_archs)" >&2
    exit 3
  fi
  echo "== ready: carry [\"$DEST\"], command: bash tools/gpu_check.sh run"
}

# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------
# Three tiers, each with its own time budget, run in this order:
#   smoke  the device query, data parallel at world 1 against one process in six variants (no
#          CUDA_LAUNCH_BLOCKING), every GPU test binary (CUDA_LAUNCH_BLOCKING=1: an asynchronous
#          error surfaces at the launch that caused it), the short CUDA training run and the
#          kernel bandwidth benchmark; stands alone (GPU_CHECK_SMOKE_S, default 180 s).
#   full   fp32 training, compute-sanitizer memcheck (--leak-check no: Note [No leak check]),
#          racecheck and synccheck on small tests, memcheck of a short training run, ResNet50
#          bf16 batch-256 throughput and peak memory, then the same against PyTorch; cheapest
#          first, so a cut loses the least (GPU_CHECK_FULL_S, default 240 s).
#   lab    the kernel lab's report against the GPU (Note [Lab tier]; GPU_CHECK_LAB_S, default 200 s).
# A step the tier's budget leaves no time for, or cuts short, is NOT RUN: not a failure.
#
# Note [No leak check]
# The engine keeps its cached device memory, cuDNN handles and plans until the process exits, on
# purpose; memcheck's leak check would report them every time.
SMOKE_S=${GPU_CHECK_SMOKE_S:-180}
FULL_S=${GPU_CHECK_FULL_S:-240}
LAB_S=${GPU_CHECK_LAB_S:-200}
TIER="" TIER_T0=$SECONDS TIER_BUDGET=0 NO_GPU=""
STEPS=()  # "tier|name|status|seconds|note"
FAILED=0
KERNEL_TABLE="" TSB_TABLE="" RN50_LINE="" LAB_TABLE=""  # the benchmarks' results, for the summary and the snippet

begin_tier() {  # name budget
  TIER=$1 TIER_BUDGET=$2 TIER_T0=$SECONDS
  echo
  echo "##### tier $TIER: budget ${TIER_BUDGET}s"
}
remaining() { echo $((TIER_BUDGET - (SECONDS - TIER_T0))); }
record() {  # name status seconds note ('|' in a note would split the table: made '/')
  local note=${4//|//}
  [[ $2 != TIMEOUT || -n "$note" ]] || note="the step's own timeout"
  STEPS+=("$TIER|$1|$2|$3|$note")
  case "$2" in PASS | N/A | "NOT RUN") ;; *) FAILED=1 ;; esac
  printf -- '-- [%s] %s: %s (%ss)%s\n' "$TIER" "$1" "$2" "$3" "${note:+ - $note}"
}

# run_cmd NAME TIMEOUT CMD...: runs CMD with a timeout (capped by what is left of the tier's
# budget); sets RC, SECS and puts its output in STEP_OUT (a file); echoes the output into the
# log. Returns 1, with the step recorded as NOT RUN, when the budget leaves it under 5 seconds
# or cuts it short (it timed out at the capped limit); callers then skip their status logic.
STEP_OUT=""
run_cmd() {
  local name=$1 limit=$2 capped=0
  shift 2
  local left
  left=$(($(remaining) - 2))
  ((limit > left)) && limit=$left capped=1
  STEP_OUT=$(mktemp "$WORK/step.XXXXXX")
  if ((limit < 5)); then
    RC=124 SECS=0
    echo "(no time left in tier $TIER's ${TIER_BUDGET}s budget)" >"$STEP_OUT"
    record "$name" "NOT RUN" 0 "tier $TIER's ${TIER_BUDGET}s budget spent"
    return 1
  fi
  echo
  echo "=== [$TIER] $name (timeout ${limit}s): $*"
  local t=$SECONDS
  set +e
  timeout --kill-after=5 "$limit" "$@" </dev/null >"$STEP_OUT" 2>&1
  RC=$?
  set -e
  SECS=$((SECONDS - t))
  tail -c 20000 "$STEP_OUT"
  echo "[exit $RC after ${SECS}s]"
  if ((capped && (RC == 124 || RC == 137))); then
    record "$name" "NOT RUN" "$SECS" "cut after ${SECS}s by tier $TIER's ${TIER_BUDGET}s budget"
    return 1
  fi
  return 0
}

status_of_rc() {  # plain pass/fail/timeout/crash from RC
  if ((RC == 0)); then echo PASS
  elif ((RC == 124 || RC == 137)); then echo TIMEOUT
  elif ((RC > 128)); then echo "CRASH"
  else echo FAIL
  fi
}

find_cuda_libs() {
  local dirs=() d
  [[ -d /usr/local/cuda/lib64 ]] && dirs+=(/usr/local/cuda/lib64)
  # CUPTI (the profiler's GPU records; the lab tier) where a toolkit keeps it apart from lib64.
  [[ -d /usr/local/cuda/extras/CUPTI/lib64 ]] && dirs+=(/usr/local/cuda/extras/CUPTI/lib64)
  local py
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null || continue
    while IFS= read -r d; do
      [[ -n "$d" ]] && dirs+=("$d")
    done < <("$py" - 2>/dev/null <<'EOF' || true
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
seen = set()
for root in list(nvidia.__path__):
    for pkg in sorted(os.listdir(root)):  # cudnn, cublas, nccl, cuda_runtime, cu13, ...
        for sub in ("lib", "lib64"):
            d = os.path.join(root, pkg, sub)
            if os.path.isdir(d) and d not in seen:
                seen.add(d)
                print(d)
EOF
    )
    break
  done
  local joined="" seen=" "
  for d in "${dirs[@]}"; do
    [[ "$seen" == *" $d "* ]] && continue
    seen+="$d "
    joined+="${joined:+:}$d"
  done
  export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "=== CUDA library folders (in LD_LIBRARY_PATH order):"
  for d in "${dirs[@]}"; do echo "   $d"; done
  [[ ${#dirs[@]} -gt 0 ]] || echo "   (none found: only the system's ldconfig paths)"
  echo "=== where each library resolves:"
  local lib hit
  for lib in libcuda.so.1 libcudart.so libcublas.so libcublasLt.so libcudnn.so libnccl.so libcupti.so; do
    hit=""
    for d in ${LD_LIBRARY_PATH//:/ }; do
      hit=$(find "$d" -maxdepth 1 -name "$lib*" 2>/dev/null | sort | head -1) && [[ -n "$hit" ]] && break
    done
    [[ -n "$hit" ]] || hit=$(ldconfig -p 2>/dev/null | grep -m1 " $lib" | sed 's/.*=> //' || true)
    printf '   %-16s %s\n' "$lib" "${hit:-not found}"
  done
}

# prepare's copies of non-system libraries (gpu_check_out/lib): each one this machine has no
# library of that name for (not in LD_LIBRARY_PATH's folders, not in ldconfig's cache) is linked
# into a folder put last on LD_LIBRARY_PATH; the machine's own libraries win everywhere else.
use_fallback_libs() {
  local fb=$WORK/fallback_lib f name d found used=""
  mkdir -p "$fb"
  for f in "$PAYLOAD"/lib/*; do
    [[ -f "$f" ]] || continue
    name=$(basename "$f")
    found=""
    for d in ${LD_LIBRARY_PATH//:/ }; do  # set (maybe empty) by find_cuda_libs
      [[ -e "$d/$name" ]] && found=$d/$name && break
    done
    [[ -n "$found" ]] || found=$( (ldconfig -p 2>/dev/null || true) | awk -v n="$name" '$1 == n {print $NF; exit}')
    if [[ -z "$found" ]]; then
      ln -s "$f" "$fb/$name"
      used+=" $name"
    fi
  done
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$fb"
  echo "=== libraries this machine lacks, taken from prepare's copies:${used:- none}"
}

tier_counts() {  # tier -> "P F N" (passed incl. N/A, failed, not run)
  local s p=0 f=0 n=0 tr st
  for s in "${STEPS[@]}"; do
    IFS='|' read -r tr _ st _ <<<"$s"
    [[ $tr == "$1" ]] || continue
    case "$st" in PASS | N/A) p=$((p + 1)) ;; "NOT RUN") n=$((n + 1)) ;; *) f=$((f + 1)) ;; esac
  done
  echo "$p $f $n"
}

result_lines() {
  local t p f n
  for t in smoke full lab; do
    [[ " $TIERS " == *" $t "* ]] || continue
    read -r p f n <<<"$(tier_counts "$t")"
    if [[ -n "$NO_GPU" && $t != smoke ]]; then echo "RESULT $t: not run: no usable GPU"
    elif ((n > 0)); then
      # Not a pass of the whole tier: say so where a reader looks (the exit code stays 0).
      echo "RESULT $t: $p passed, $f failed, $n not run: CUT SHORT by its ${t} budget (raise GPU_CHECK_${t^^}_S)"
    else echo "RESULT $t: $p passed, $f failed, $n not run"
    fi
  done
}

write_results() {
  local f=$RESULTS_DIR/RESULTS_snippet.md
  {
    echo "### GPU check, $(date -u +%Y-%m-%d), ${dev_name:-no GPU}"
    echo
    echo "\`tools/gpu_check.sh run --tier $TIER_ARG\` ($(grep -m1 '^# git:' "$DEST/MANIFEST.txt" | sed 's/^# git: //'), built $(grep -m1 '^# date:' "$DEST/MANIFEST.txt" | sed 's/^# date: //'))"
    echo
    echo "| tier | step | status | seconds | note |"
    echo "| --- | --- | --- | --- | --- |"
    local s
    for s in "${STEPS[@]}"; do
      IFS='|' read -r tr n st sec note <<<"$s"
      echo "| $tr | $n | $st | $sec | ${note:-} |"
    done
    echo
    result_lines | sed 's/$/  /'
    if [[ -n "$KERNEL_TABLE" ]]; then
      echo
      echo "Kernel bandwidth (\`bench/cuda_kernel_bench.cc\`, --quick):"
      echo
      echo '```'
      echo "$KERNEL_TABLE"
      echo '```'
    fi
    if [[ -n "$RN50_LINE" ]]; then
      echo
      echo "ResNet50 bf16 batch 256 (\`bench/train_step_bench.cc\`): \`$RN50_LINE\`"
    fi
    if [[ -n "$TSB_TABLE" ]]; then
      echo
      echo "Training throughput (\`bench/run_train_step_bench.sh --gpu --no-compile\`):"
      echo
      echo '```'
      echo "$TSB_TABLE"
      echo '```'
    fi
    if [[ -n "$LAB_TABLE" ]]; then
      echo
      echo "$LAB_TABLE"
    fi
  } >"$f"
  echo
  echo "=== results snippet for bench/RESULTS.md ($f):"
  cat "$f"
}

print_summary() {
  echo
  echo "=== GPU check summary (${dev_name:-no GPU}), tiers: $TIERS"
  printf '%-6s %-44s %-8s %7s  %s\n' tier step status seconds note
  local s
  for s in "${STEPS[@]}"; do
    IFS='|' read -r tr n st sec note <<<"$s"
    printf '%-6s %-44s %-8s %7s  %s\n' "$tr" "$n" "$st" "$sec" "${note:-}"
  done
  if [[ -n "$KERNEL_TABLE" ]]; then
    echo
    echo "=== kernel bandwidth (cuda_kernel_bench --quick)"
    echo "$KERNEL_TABLE"
  fi
  if [[ -n "$RN50_LINE" ]]; then
    echo
    echo "=== ResNet50 bf16 batch 256 (train_step_bench): $RN50_LINE"
  fi
  if [[ -n "$TSB_TABLE" ]]; then
    echo
    echo "=== training throughput (run_train_step_bench.sh --gpu --no-compile)"
    echo "$TSB_TABLE"
  fi
  if [[ -n "$LAB_TABLE" ]]; then
    echo
    echo "=== kernel lab against the GPU (tools/kernel_lab_compare.py)"
    echo "$LAB_TABLE"
  fi
  echo
  result_lines
}

# ---- steps shared by the tiers ----------------------------------------------------------------

# The CUDA training path on synthetic uint8 data: the loader builds batches in page-locked
# memory with 2 worker threads, data/loading/device_feeder.h copies them on its copy stream and
# normalises them on the GPU. 160 images in batches of 32: the 5 steps are the whole epoch, so
# the evaluation (the feeder again, no gradients) runs too. "Not implemented yet" is N/A;
# anything else non-zero fails.
TRAIN_ARGS=(train --device cuda --steps 5 --epochs 1 --dataset synthetic --synthetic-size 160x3x64x64
  --num-classes 10 --batch-size 32 --workers 2 --print-freq 1)
NOTYET='not implemented yet|has no CUDA kernel yet|not yet (available|supported)'
train_status() {  # reads RC, STEP_OUT; "status|note"
  local s n=""
  s=$(status_of_rc)
  if [[ $RC == 1 ]] && grep -qE "$NOTYET" "$STEP_OUT"; then
    s=N/A n="not yet available: $(grep -m1 -oE "[^:]*($NOTYET)[^;]*" "$STEP_OUT" | sed 's/^ *//' | cut -c1-70)"
  elif [[ $s == PASS ]] && ! grep -q ' eval: ' "$STEP_OUT"; then
    s=FAIL n="no evaluation line after the epoch"
  elif [[ $s == PASS ]]; then
    n="$(grep -m1 -oE 'step 5/5 +loss [0-9.]+' "$STEP_OUT" | tr -s ' ' || true)"
    n+="$(grep 'step 5/5' "$STEP_OUT" | grep -m1 -oE '[0-9.]+ img/s' | sed 's/^/, /' || true)"
  fi
  [[ $s == FAIL && -z "$n" ]] && n=$(grep -v '^\s*$' "$STEP_OUT" | tail -1 | cut -c1-90 || true)
  [[ $s == CRASH ]] && n="signal $((RC - 128))"
  echo "$s|$n"
}

# A test binary's status: a test that says SKIPPED saw no GPU, which is a failure here.
test_status() {  # reads RC, STEP_OUT; "status|note"
  local s n=""
  s=$(status_of_rc)
  if [[ $s == PASS ]] && grep -q '^SKIPPED:' "$STEP_OUT"; then s=FAIL n="SKIPPED: the test saw no GPU"; fi
  [[ $s != PASS ]] || n=$(grep -m1 -oE '[0-9]+ passed \| [0-9]+ failed' "$STEP_OUT" || true)
  [[ $s == FAIL && -z "$n" ]] && n=$(grep -m1 -E 'ERROR|FAILED|what\(\)' "$STEP_OUT" | cut -c1-90 || true)
  [[ $s == CRASH ]] && n="signal $((RC - 128))"
  echo "$s|$n"
}

# compute-sanitizer's verdict. API errors are not counted: the tests provoke out-of-memory on purpose.
sanitizer_status() {  # reads RC, STEP_OUT; "status|note"
  if grep -q 'Device not supported' "$STEP_OUT"; then
    echo "N/A|this compute-sanitizer does not support the GPU (a newer CUDA toolkit's does)"
  elif ((RC == 86)) || grep -qE 'ERROR SUMMARY: [1-9]' "$STEP_OUT"; then
    echo "FAIL|$(grep -m1 -oE '(ERROR|RACECHECK) SUMMARY: [0-9]+ (errors?|hazards?)' "$STEP_OUT" || echo 'sanitizer errors')"
  elif grep -qE '^SKIPPED:' "$STEP_OUT"; then echo "FAIL|SKIPPED: the test saw no GPU"
  else
    echo "$(status_of_rc)|$(grep -m1 -oE 'ERROR SUMMARY: [0-9]+ errors?' "$STEP_OUT" || true)"
  fi
}

# One world-1 data-parallel variant: "name|flags|bound". The same 3 steps in one process and as
# rank 0 of 1 (torchrun's variables: DataParallel, NCCL), then the weights compared: bound
# "exact" (bit for bit: at world 1 the all-reduce hands the gradients back unchanged), or a
# relative bound where the data-parallel path computes differently by design (bf16 reduction
# rounds the gradients to bf16; SyncBN computes the batch statistics with its own kernels).
DP_ARGS=(train --device cuda --steps 3 --epochs 1 --dataset synthetic --synthetic-size 96x3x32x32 --num-classes 10
  --batch-size 16 --workers 0 --print-freq 1 --no-shuffle --seed 1 --width 16)
DP_VARIANTS=(
  "dp fp32|--precision fp32|exact"
  "dp bf16, bf16 reduction|--precision bf16 --grad-reduce-dtype bf16|2e-2"
  "dp fp16, loss scaling|--precision fp16|exact"
  "dp fp32 --sync-bn|--precision fp32 --sync-bn|1e-4"
  "dp fp32 --accum-steps 2|--precision fp32 --accum-steps 2|exact"
  "dp fp32 --cuda-graphs (NCCL captured)|--precision fp32 --cuda-graphs --steps 6|exact"
)
# Prints "max relative difference R" for two safetensors files (per tensor, max |a - b| over
# max |b|, the largest), "identical" when every byte of every tensor is equal; exit 1 when the
# files do not hold the same tensors.
compare_weights() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys, array
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: (v['dtype'], b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
if a.keys() != b.keys(): print('different tensors'); sys.exit(1)
if all(a[k] == b[k] for k in a): print('identical'); sys.exit(0)
worst = 0.0
for k in a:
    if a[k][0] != 'F32' or a[k][1] == b[k][1]: continue
    x, y = array.array('f', a[k][1]), array.array('f', b[k][1])
    scale = max((abs(v) for v in y), default=0.0) or 1.0
    worst = max(worst, max(abs(p - q) for p, q in zip(x, y)) / scale)
print('max relative difference %.3g' % worst)
PY
}
data_parallel_step() {
  local name flags bound
  IFS='|' read -r name flags bound <<<"$1"
  local -a extra
  read -r -a extra <<<"$flags"
  local dir=$WORK/dp/${name//[^a-z0-9]/_}
  if ! run_cmd "$name (one process)" 60 "$RT" "${DP_ARGS[@]}" "${extra[@]}" --output-dir "$dir/one"; then return; fi
  if ((RC != 0)); then
    IFS='|' read -r st note <<<"$(train_status)"
    record "$name" "$st" "$SECS" "the one-process run: $note"
    return
  fi
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    run_cmd "$name" 90 "$RT" "${DP_ARGS[@]}" "${extra[@]}" --output-dir "$dir/dp"; then return; fi
  local st note
  IFS='|' read -r st note <<<"$(train_status)"
  if [[ $st == PASS ]] && ! grep -q 'data parallel: rank 0 of 1 (nccl' "$STEP_OUT"; then
    st=FAIL note="no 'data parallel: rank 0 of 1 (nccl' line: the run was not data parallel"
  elif [[ $st == PASS && $flags == *--cuda-graphs* ]] &&
    { grep -q 'runs eagerly' "$STEP_OUT" || ! grep -q 'cuda-graphs: [1-9][0-9]* steps replayed' "$STEP_OUT"; }; then
    st=FAIL note="--cuda-graphs replayed no step: $(grep -m1 -e 'runs eagerly' -e 'steps replayed' "$STEP_OUT")"
  elif [[ $st == PASS ]]; then
    local d
    d=$(compare_weights "$dir/dp/model.safetensors" "$dir/one/model.safetensors" 2>&1) || st=FAIL
    note="vs one process: $d (bound: $bound)"
    if [[ $st == PASS && $d != identical ]]; then
      if [[ $bound == exact ]]; then st=FAIL
      else
        python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "${d##* }" "$bound" ||
          st=FAIL
      fi
    fi
  fi
  record "$name" "$st" "$SECS" "$note"
}

# The MANIFEST's test binaries (bin/NAME), small ones first: the full-size checks and the
# whole-model test last, so a cut in the smoke tier loses the fewest tests.
HEAVY_TESTS=" tests_cuda__large_cuda_test tests_cuda__resnet50_cuda_test "
manifest_tests() {
  local files f
  files=$(grep -v '^#' "$DEST/MANIFEST.txt" | awk '$1 == "test" {print $3}')
  for f in $files; do [[ "$HEAVY_TESTS" == *" $(basename "$f") "* ]] || echo "$f"; done
  for f in $files; do [[ "$HEAVY_TESTS" != *" $(basename "$f") "* ]] || echo "$f"; done
}

tier_smoke() {
  begin_tier smoke "$SMOKE_S"
  record nvidia-smi PASS "$SMOKE_QUERY_S" "$dev_name"
  local st note
  if run_cmd "ringtape info" 30 "$RT" info; then
    st=$(status_of_rc) note=""
    if [[ $st == PASS ]] && ! grep -q '^cuda:0:' "$STEP_OUT"; then st=FAIL note="ringtape sees no CUDA device"; fi
    # The NCCL this machine loads next to the one ringtape was compiled against.
    [[ $st == PASS ]] && note="$(grep -m1 '^cuda:0:' "$STEP_OUT" | cut -c1-50); $(grep -m1 '^nccl:' "$STEP_OUT" | cut -c1-60)"
    record "ringtape info" "$st" "$SECS" "$note"
  fi

  # Data parallel first: the path no test binary covers (DataParallel, the reducer's buckets on
  # NCCL's stream, SyncBN over NCCL, AMP and bf16 reduction), without CUDA_LAUNCH_BLOCKING, so
  # the streams overlap as in training. World 1 under torchrun's variables against one process.
  local v
  for v in "${DP_VARIANTS[@]}"; do data_parallel_step "$v"; done

  local file
  while read -r file; do
    if CUDA_LAUNCH_BLOCKING=1 run_cmd "$(basename "$file")" 90 "$PAYLOAD/$file"; then
      IFS='|' read -r st note <<<"$(test_status)"
      record "$(basename "$file")" "$st" "$SECS" "$note"
    fi
  done < <(manifest_tests)

  # --precision default (auto: bf16 on this GPU); fp32 is in the full tier.
  if CUDA_LAUNCH_BLOCKING=1 run_cmd "ringtape train --device cuda" 60 "$RT" "${TRAIN_ARGS[@]}" --output-dir "$WORK/train"; then
    IFS='|' read -r st note <<<"$(train_status)"
    record "ringtape train --device cuda" "$st" "$SECS" "$note"
    TRAIN_OK=$st
  fi

  # Kernel bandwidth at ResNet50 batch-256 shapes against a device copy (a few seconds).
  local kbench=$PAYLOAD/bin/bench__cuda_kernel_bench
  if [[ ! -x "$kbench" ]]; then
    record "cuda_kernel_bench" FAIL 0 "$kbench missing: rerun prepare"
  elif run_cmd "cuda_kernel_bench" 60 "$kbench" --quick --json "$RESULTS_DIR/cuda_kernel_bench.json"; then
    st=$(status_of_rc)
    note=$(grep -m1 -oE '^[0-9]+ of [0-9]+ kernels at >= [0-9]+% of the copy bandwidth \([0-9]+ GB/s\)' "$STEP_OUT" || true)
    if [[ $st == PASS ]] && grep -q '^SKIPPED:' "$STEP_OUT"; then st=FAIL note="SKIPPED: the benchmark saw no GPU"; fi
    [[ $st == FAIL ]] && grep -q 'FAILED:' "$STEP_OUT" && note="a case failed: $(grep -m1 'FAILED:' "$STEP_OUT" | cut -c1-60)"
    [[ $st == CRASH ]] && note="signal $((RC - 128))"
    KERNEL_TABLE=$(sed -n '/^device-to-device copy/,$p' "$STEP_OUT" | grep -v '^results in ' || true)
    record "cuda_kernel_bench" "$st" "$SECS" "$note"
  fi
}

# racecheck/synccheck targets: "binary doctest-filter", launcher-level cases of the kernels with
# shared memory and __syncthreads (reductions), to keep the sanitizers' slowdown affordable.
SYNC_TESTS=(
  "tests_cuda__batch_norm_cuda_test *launchers match the CPU kernels*"
  "tests_cuda__cross_entropy_cuda_test *launchers match the CPU kernels"
  "tests_cuda__elementwise_cuda_test sum launcher*"
)

tier_full() {
  begin_tier full "$FULL_S"
  local st note
  if [[ -z "${TRAIN_OK:-}" ]]; then  # smoke not run (--tier full): one bf16 run decides what follows
    if run_cmd "ringtape train --device cuda" 60 "$RT" "${TRAIN_ARGS[@]}" --output-dir "$WORK/train"; then
      IFS='|' read -r st note <<<"$(train_status)"
      record "ringtape train --device cuda" "$st" "$SECS" "$note"
      TRAIN_OK=$st
    fi
  fi
  if { timeout 20 "$RT" train --help 2>&1 || true; } | grep -q -- '--precision'; then
    if run_cmd "ringtape train --precision fp32" 60 "$RT" "${TRAIN_ARGS[@]}" --precision fp32 --output-dir "$WORK/train32"; then
      IFS='|' read -r st note <<<"$(train_status)"
      record "ringtape train --precision fp32" "$st" "$SECS" "$note"
    fi
  fi

  local cs=""
  if command -v compute-sanitizer >/dev/null; then cs=compute-sanitizer
  elif [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then cs=/usr/local/cuda/bin/compute-sanitizer
  fi
  local common=(--report-api-errors no --error-exitcode 86)
  if [[ -z "$cs" ]]; then
    record "compute-sanitizer" FAIL 0 "compute-sanitizer not found"
  else
    # memcheck of the runtime/allocator/stream test (//tests:cuda_test; else the first GPU test).
    local first
    first=$(grep -v '^#' "$DEST/MANIFEST.txt" | awk '$1 == "test" && $2 == "//tests:cuda_test" {print $3; exit}')
    [[ -n "$first" ]] || first=$(manifest_tests | awk 'NR == 1')  # not head: SIGPIPE under pipefail
    if [[ -n "$first" ]] &&
      run_cmd "memcheck $(basename "$first")" 90 "$cs" --tool memcheck --leak-check no "${common[@]}" "$PAYLOAD/$first"; then
      IFS='|' read -r st note <<<"$(sanitizer_status)"
      record "memcheck $(basename "$first")" "$st" "$SECS" "$note"
    fi
    local tool entry bin filter
    for tool in racecheck synccheck; do
      for entry in "${SYNC_TESTS[@]}"; do
        bin=${entry%% *} filter=${entry#* }
        if [[ ! -x "$PAYLOAD/bin/$bin" ]]; then
          record "$tool $bin" FAIL 0 "bin/$bin not in the payload: rerun prepare"
          continue
        fi
        local extra=()
        [[ $tool == racecheck ]] && extra=(--racecheck-report hazard)
        if run_cmd "$tool $bin" 60 "$cs" --tool "$tool" "${extra[@]}" "${common[@]}" "$PAYLOAD/bin/$bin" -tc="$filter"; then
          IFS='|' read -r st note <<<"$(sanitizer_status)"
          record "$tool $bin" "$st" "$SECS" "$note"
        fi
      done
    done
    # A short CUDA training run (2 steps = a 32-image epoch, then its evaluation: the device
    # feeder's copies and normalisation, every training kernel, the optimizer).
    if [[ ${TRAIN_OK:-} != PASS ]]; then
      record "memcheck ringtape train" N/A 0 "CUDA training path not available or not run"
    elif run_cmd "memcheck ringtape train" 90 "$cs" --tool memcheck --leak-check no "${common[@]}" "$RT" train \
      --device cuda --steps 2 --epochs 1 --dataset synthetic --synthetic-size 32x3x32x32 --num-classes 10 \
      --batch-size 16 --workers 2 --print-freq 1 --output-dir "$WORK/train_memcheck"; then
      IFS='|' read -r st note <<<"$(sanitizer_status)"
      [[ $st == PASS ]] && ! grep -q ' eval: ' "$STEP_OUT" && st=FAIL note="no evaluation line; $note"
      record "memcheck ringtape train" "$st" "$SECS" "$note"
    fi
  fi

  # Throughput and peak tensor memory: ResNet50, batch 256, channels-last, bf16, ringtape alone
  # (one JSON line), then against PyTorch eager with autocast bf16 (skipped, with the reason,
  # where python has no torch with CUDA; torch.compile is left out for the time budget:
  # bench/run_train_step_bench.sh --gpu runs it too).
  if [[ ! -x "$BENCH" ]] || ! { timeout 20 "$BENCH" --help 2>&1 || true; } | grep -q -- '--precision'; then
    record "resnet50 bf16 b256" FAIL 0 "$BENCH missing or without --precision: rerun prepare"
    return 0
  fi
  if run_cmd "resnet50 bf16 b256" 90 "$BENCH" --model resnet50 --batch 256 --size 3x224x224 --classes 1000 \
    --width 64 --channels-last --device cuda --cudnn-benchmark --precision bf16 --steps 10 --warmup 5; then
    st=$(status_of_rc) note=""
    RN50_LINE=$(grep -m1 '"img_per_s"' "$STEP_OUT" || true)
    if [[ $st == PASS && -z "$RN50_LINE" ]]; then st=FAIL note="no JSON line with img_per_s"
    elif [[ $st == PASS ]]; then
      echo "$RN50_LINE" >"$RESULTS_DIR/resnet50_bf16_b256.json"
      note="$(grep -oE '"img_per_s": [0-9.]+' <<<"$RN50_LINE" | grep -oE '[0-9.]+$') img/s, peak"
      note+=" $(grep -oE '"peak_bytes": [0-9]+' <<<"$RN50_LINE" | grep -oE '[0-9]+$' | awk '{printf "%.1f GiB", $1 / 2^30}')"
    fi
    [[ $st == FAIL && -z "$note" ]] && note=$(grep -v '^\s*$' "$STEP_OUT" | tail -1 | cut -c1-90 || true)
    [[ $st == CRASH ]] && note="signal $((RC - 128))"
    record "resnet50 bf16 b256" "$st" "$SECS" "$note"
  fi
  if run_cmd "train_step_bench gpu vs torch" 150 bash bench/run_train_step_bench.sh --gpu --no-compile --steps 10 \
    --rt-bin "$BENCH" --out "$WORK/tsb"; then
    st=$(status_of_rc) note=""
    TSB_TABLE=$(cat "$WORK/tsb/table.txt" 2>/dev/null || true)
    cp "$WORK/tsb/results.jsonl" "$RESULTS_DIR/train_step_bench.jsonl" 2>/dev/null || true
    local rt_line
    rt_line=$(head -1 "$WORK/tsb/results.jsonl" 2>/dev/null || true)
    if [[ $st == PASS ]] && ! grep -q '"img_per_s"' <<<"$rt_line"; then
      st=FAIL note="ringtape: $(grep -oE '"error": "[^"]{0,80}' <<<"$rt_line" | cut -c11- || echo 'no result')"
    elif [[ $st == PASS ]]; then
      note="ringtape $(grep -oE '"img_per_s": [0-9.]+' <<<"$rt_line" | grep -oE '[0-9.]+$' || true) img/s"
      note+="$(grep -m1 -oE '^torch eager +amp bf16 +[0-9]+' <<<"$TSB_TABLE" | grep -oE '[0-9]+$' |
        sed 's/^/, torch eager /; s/$/ img\/s/' || true)"
    fi
    [[ $st == CRASH ]] && note="signal $((RC - 128))"
    record "train_step_bench gpu vs torch" "$st" "$SECS" "$note"
  fi
}

# Note [Lab tier]
# The kernel lab (docs/kernel-lab.md) bounds every hand-written kernel of one ResNet50 bf16
# channels-last training step at batch 256 on a modelled H200; this tier measures that step.
#  1. Times: train_step_bench in the report's configuration, 2 warm-up steps, then 5 recorded
#     by the profiler (--profile-steps 3:8). CUPTI's activity records stamp each kernel's start
#     and end on the GPU, so a kernel's time is the device's own, as CUDA events recorded around
#     it would give, without a host in the loop or an event of ours between kernels; per kernel
#     name the step's times are summed, and the median over the 5 steps is its time per step.
#  2. Counters, where Nsight Compute (ncu) is found: the hand-written kernels of one step (the
#     NVTX range "step 3", which every step pushes) with kernel_lab_compare.py's metrics, clocks
#     left alone (--clock-control none), caches flushed before each kernel (the lab's DRAM bytes
#     are what a kernel must move), at the lab's largest measured batch (4): the lab's counters
#     there are measured, not extrapolated, so they compare one for one; and small tensors keep
#     ncu's replays (it saves and restores the memory a kernel may write) cheap. As many launches
#     as the budget leaves (GPU_CHECK_LAB_NCU_LAUNCH_S per launch assumed); no counters (ncu
#     missing, or a sandbox that keeps them from it) is N/A, not a failure.
#  3. tools/kernel_lab_compare.py joins both with the report: a Markdown table for the snippet,
#     JSON; the inputs go back packed (the device tool returns at most 8 files).
LAB_ARGS=(--model resnet50 --size 3x224x224 --classes 1000 --width 64 --channels-last --device cuda --precision bf16)
LAB_NCU_LAUNCH_S=${GPU_CHECK_LAB_NCU_LAUNCH_S:-0.1}
LAB_NCU_MIN_LAUNCHES=20

# kernel_lab_compare.py as a step: on success LAB_TABLE holds its Markdown.
lab_compare() {  # step-name args...
  local name=$1
  shift
  if run_cmd "$name" 40 python3 tools/kernel_lab_compare.py --md "$WORK/lab/compare.md" \
    --json "$RESULTS_DIR/kernel_lab_compare.json" "$@"; then
    local st note=""
    st=$(status_of_rc)
    if [[ $st == PASS ]]; then
      LAB_TABLE=$(cat "$WORK/lab/compare.md")
      note=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1])); t = r["totals"]
both = sum(1 for x in r["rows"] if x["lab_key"] and x["device_key"])
b = t["lab_kernel_bound_us"]
print("%d kernels on both sides, %d lab only, %d GPU only; hand-written %.2f ms/step%s" % (both, len(r["lab_only"]),
      len(r["device_only"]), t["hand_written_us"] / 1e3, " against a bound of %.2f ms" % (b / 1e3) if b else ""))' \
        "$RESULTS_DIR/kernel_lab_compare.json" 2>&1 | cut -c1-120 || true)
    else
      note=$(grep -m1 'kernel_lab_compare:' "$STEP_OUT" | cut -c1-120 || true)
    fi
    record "$name" "$st" "$SECS" "$note"
  fi
}

tier_lab() {
  begin_tier lab "$LAB_S"
  mkdir -p "$WORK/lab"
  if [[ ! -x "$BENCH" ]]; then
    record "lab: kernel times (CUPTI)" FAIL 0 "$BENCH missing: rerun prepare"
    return 0
  fi
  local report=() batch=256 ncu_batch=4 st note
  if [[ -f "$LAB_REPORT" ]]; then
    report=(--report "$LAB_REPORT")
    read -r batch ncu_batch note < <(python3 -c 'import json, sys
r = json.load(open(sys.argv[1])); s = r["summary"]
print(r["target_batch"], max(r["measured_batches"]), "hand-written %.2f ms of a %.2f ms step bound at batch %d" %
      (s["kernel_bound_us"] / 1e3, s["bound_us"] / 1e3, r["target_batch"]))' "$LAB_REPORT") || true
    record "lab: kernel lab report" PASS 0 "$note; $(grep -m1 '^# kernel lab report' "$DEST/MANIFEST.txt" |
      grep -oE 'made [0-9TZ:-]+' || true)"
  else
    record "lab: kernel lab report" N/A 0 "none in $DEST: run 'bash bench/run_kernel_lab.sh', then prepare"
  fi
  batch=${batch:-256}
  ncu_batch=${GPU_CHECK_LAB_NCU_BATCH:-${ncu_batch:-4}}

  # 1. Each kernel's device time per step.
  local prof=$WORK/lab/profile t_setup
  if ! run_cmd "lab: kernel times (CUPTI)" 120 "$BENCH" "${LAB_ARGS[@]}" --batch "$batch" --warmup 2 --steps 5 \
    --profile-steps 3:8 --profile-group kernel --profile-dir "$prof"; then return 0; fi
  t_setup=$SECS
  st=$(status_of_rc) note=""
  if [[ $st == PASS && ! -s "$prof/trace.json" ]]; then st=FAIL note="no $prof/trace.json: the profile was not written"
  elif [[ $st == PASS ]]; then
    note="batch $batch, step $(grep -m1 -oE '"profiled_step_ms": [0-9.]+' "$STEP_OUT" | grep -oE '[0-9.]+$' ||
      echo '?') ms (median of 5 profiled), $(grep -m1 -oE '"img_per_s": [0-9.]+' "$STEP_OUT" | grep -oE '[0-9.]+$' ||
      echo '?') img/s"
  fi
  [[ $st == FAIL && -z "$note" ]] && note=$(grep -v '^\s*$' "$STEP_OUT" | tail -1 | cut -c1-90 || true)
  [[ $st == CRASH ]] && note="signal $((RC - 128))"
  record "lab: kernel times (CUPTI)" "$st" "$SECS" "$note"
  cp "$prof/profile.json" "$prof/trace.json" "$WORK/lab/" 2>/dev/null || true
  [[ $st == PASS ]] || return 0
  local cmp=(--trace "$prof/trace.json" --profile "$prof/profile.json" --batch "$batch" "${report[@]}")
  lab_compare "lab: compare times" "${cmp[@]}"

  # 2. Nsight Compute's counters for one step's hand-written kernels, at ncu_batch.
  local ncu="" csv=$WORK/lab/ncu.csv
  if command -v ncu >/dev/null; then ncu=ncu
  elif [[ -x /usr/local/cuda/bin/ncu ]]; then ncu=/usr/local/cuda/bin/ncu
  fi
  if [[ -z "$ncu" ]]; then
    record "lab: ncu counters" N/A 0 "Nsight Compute (ncu) is not on PATH nor in /usr/local/cuda/bin"
    lab_compare "lab: compare" "${cmp[@]}" --ncu-note "not run: ncu not found"
    lab_pack
    return 0
  fi
  local per_step count
  per_step=$(python3 -c 'import json, sys
print(round(json.load(open(sys.argv[1]))["totals"]["hand_written_launches"]))' "$RESULTS_DIR/kernel_lab_compare.json" \
    2>/dev/null || echo 2000)
  # What the budget leaves, less the bench's own start (about the timed run's) and the last compare.
  count=$(awk -v left="$(remaining)" -v setup="$t_setup" -v per="$LAB_NCU_LAUNCH_S" -v n="$per_step" \
    'BEGIN { c = int((left - setup - 30) / per); print (c > n ? n : c) }')
  if ((count < per_step && count < LAB_NCU_MIN_LAUNCHES)); then
    record "lab: ncu counters" "NOT RUN" 0 \
      "tier lab's ${LAB_S}s budget leaves time for $count launches (raise GPU_CHECK_LAB_S)"
    lab_compare "lab: compare" "${cmp[@]}" --ncu-note "not run: the budget left too little time"
    lab_pack
    return 0
  fi
  local metrics
  metrics=$(python3 tools/kernel_lab_compare.py --ncu-metrics)
  if run_cmd "lab: ncu counters" 600 "$ncu" --nvtx --nvtx-include "step 3/" --kernel-name-base demangled \
    --kernel-name "regex:rt::cuda::" --print-kernel-base demangled --launch-count "$count" --clock-control none \
    --cache-control all --csv --print-units base --metrics "$metrics" --log-file "$csv" \
    "$BENCH" "${LAB_ARGS[@]}" --batch "$ncu_batch" --warmup 2 --steps 1; then
    echo "--- ncu's own lines ($csv):"
    grep '^==' "$csv" 2>/dev/null | tail -20 || true
    local rows
    rows=$(grep -c '^"[0-9]' "$csv" 2>/dev/null || true)
    if ((${rows:-0} > 0)); then
      st=PASS
      note="batch $ncu_batch: $(python3 -c 'import csv, sys
print(len({r["ID"] for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith("\""))}))' "$csv" 2>/dev/null ||
        echo '?') of $per_step launches in ${SECS}s (limit $count)"
      ((RC == 0)) || note+="; ncu exit $RC"
    else
      # No counters: ncu's own error (a sandbox without access to the counters, a driver that
      # refuses them) makes the step N/A, not a failure (Note [Lab tier]).
      st=N/A
      note="no counters: $(cat "$csv" "$STEP_OUT" 2>/dev/null | grep -m1 -E '==ERROR==|ERR_|rror' | cut -c1-90 ||
        true)"
      [[ $note != "no counters: " ]] || note="no counters: ncu profiled no kernel (exit $RC)"
    fi
    record "lab: ncu counters" "$st" "$SECS" "$note"
    if [[ $st == PASS ]]; then
      lab_compare "lab: compare with ncu" "${cmp[@]}" --ncu "$csv" --ncu-batch "$ncu_batch"
    else
      lab_compare "lab: compare" "${cmp[@]}" --ncu-note "$note"
    fi
  fi
  lab_pack
}

# The tier's inputs and table, packed as one file (the device tool returns at most 8).
lab_pack() {
  local f files=()
  for f in compare.md profile.json trace.json ncu.csv; do [[ -f "$WORK/lab/$f" ]] && files+=("$f"); done
  ((${#files[@]} == 0)) || tar -C "$WORK/lab" -czf "$RESULTS_DIR/kernel_lab.tar.gz" "${files[@]}" || true
}

cmd_run() {
  if [[ ! -f "$DEST/MANIFEST.txt" ]]; then
    echo "gpu_check run: $DEST/MANIFEST.txt not found: run 'tools/gpu_check.sh prepare' on the build machine" \
      "and carry $DEST to this one (device tool: carry [\"$DEST\"])" >&2
    exit 3
  fi
  RESULTS_DIR=${OUT:-$DEST/last_run}
  mkdir -p "$RESULTS_DIR"
  WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
  local log=$RESULTS_DIR/gpu_check${TIER_ARG:+_$TIER_ARG}.log
  exec > >(tee "$log") 2>&1
  TEE_PID=$!
  # On any exit: let tee finish writing the log before the script ends.
  trap 'exit_rc=$?; exec >&- 2>&-; wait "$TEE_PID" 2>/dev/null; rm -rf "$WORK"; exit "$exit_rc"' EXIT
  echo "=== tools/gpu_check.sh run --tier $TIER_ARG (smoke ${SMOKE_S}s, full ${FULL_S}s, lab ${LAB_S}s)," \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)," \
    "host $(uname -n), log $log"
  grep '^#' "$DEST/MANIFEST.txt"
  # prepare's binaries and libraries, unpacked where they do not travel back (WORK is removed
  # at exit): PAYLOAD/bin/..., PAYLOAD/lib/..., the paths MANIFEST.txt names.
  PAYLOAD=$WORK/payload
  mkdir -p "$PAYLOAD"
  # xz where the image has it, else Python's tarfile (its lzma module reads .xz).
  local unpacked_ok=0
  if command -v xz >/dev/null; then
    tar -C "$PAYLOAD" -xJf "$DEST/payload.tar.xz" && unpacked_ok=1
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$DEST/payload.tar.xz" "$PAYLOAD" && unpacked_ok=1
  fi
  if [[ $unpacked_ok -ne 1 ]]; then
    echo "gpu_check run: cannot unpack $DEST/payload.tar.xz: run 'tools/gpu_check.sh prepare' again" >&2
    exit 3
  fi

  # The device query: no GPU here means nothing else can say anything (exit 4).
  dev_name=""
  local t=$SECONDS why=""
  if ! command -v nvidia-smi >/dev/null; then why="nvidia-smi is not installed here (no NVIDIA driver)"
  else
    echo "=== nvidia-smi"
    if ! timeout 30 nvidia-smi; then why="nvidia-smi failed (no device or no driver)"
    else
      dev_name=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1 || true)
      [[ -n "$dev_name" ]] || why="nvidia-smi lists no device"
    fi
  fi
  SMOKE_QUERY_S=$((SECONDS - t))
  if [[ -n "$why" ]]; then
    echo "gpu_check run: NO GPU: $why; nothing to check"
    NO_GPU=$why
    TIER=smoke
    record nvidia-smi "NO-GPU" "$SMOKE_QUERY_S" "$why"
    write_results; print_summary; exit 4
  fi

  # PyTorch finds its own CUDA libraries (wheel RUNPATHs): the throughput benchmark runs it with
  # the library path this machine started with, not the one built here for ringtape's binaries.
  export RINGTAPE_TORCH_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  find_cuda_libs
  use_fallback_libs
  echo "=== unresolved libraries per binary (with this LD_LIBRARY_PATH):"
  local b missing any=0
  for b in "$PAYLOAD"/bin/*; do
    missing=$(ldd "$b" 2>&1 | grep 'not found' | awk '{print $1}' | tr '\n' ' ' || true)
    if [[ -n "$missing" ]]; then echo "   $(basename "$b"): $missing"; any=1; fi
  done
  ((any)) || echo "   none"

  # Bazel-like environment: tests that read source data find it relative to the repository root.
  mkdir -p "$WORK/runfiles" "$WORK/tmp"
  ln -s "$ROOT" "$WORK/runfiles/ringtape"
  export TEST_SRCDIR=$WORK/runfiles TEST_WORKSPACE=ringtape TEST_TMPDIR=$WORK/tmp
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  RT=$PAYLOAD/bin/cli__ringtape BENCH=$PAYLOAD/bin/bench__train_step_bench
  TRAIN_OK=""

  [[ " $TIERS " == *" smoke "* ]] && tier_smoke
  [[ " $TIERS " == *" full "* ]] && tier_full
  [[ " $TIERS " == *" lab "* ]] && tier_lab

  write_results
  print_summary
  ((FAILED == 0)) || exit 1
}

TIER_ARG=all TIERS="smoke full lab"
case "${1:-}" in
  prepare) [[ $# -eq 1 ]] || { usage; exit 2; }; cmd_prepare ;;
  run)
    shift
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --tier) [[ $# -ge 2 ]] || { usage; exit 2; }; TIER_ARG=$2; shift 2 ;;
        --tier=*) TIER_ARG=${1#--tier=}; shift ;;
        *) usage; exit 2 ;;
      esac
    done
    case "$TIER_ARG" in
      smoke | full | lab) TIERS=$TIER_ARG ;;
      all) TIERS="smoke full lab" ;;
      *) usage; exit 2 ;;
    esac
    cmd_run
    ;;
  *) usage; exit 2 ;;
esac
