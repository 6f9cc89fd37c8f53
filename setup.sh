#!/usr/bin/env bash
# Installs what ringtape's build and tests need, and Fashion-MNIST (the default dataset),
# from Debian's packages. Idempotent: quiet when everything is there.
# `./setup.sh --with-torch` also installs PyTorch (CPU) and torchvision: the peers of the
# benchmarks and the generators of the golden test files.
set -euo pipefail

want=(bazel-bootstrap g++ libeigen3-dev doctest-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev libgloo-dev libdnnl-dev libboost-context-dev libdw-dev dataset-fashion-mnist)
for arg in "$@"; do
  case "$arg" in
    --with-torch) want+=(python3-torch python3-torchvision python3-numpy) ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# //'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (accepted: --with-torch)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "setup.sh: missing packages ${missing[*]} and no apt-get: install them with your package manager" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# .ci/run's --config=asan links GCC's sanitizer runtimes; g++ brings them along on Debian
# (libgcc-12-dev depends on libasan8 and libubsan1).
for lib in libasan.so libubsan.so; do
  if [ ! -e "$(g++ -print-file-name="$lib")" ]; then
    echo "setup.sh: g++ finds no $lib: install your GCC's AddressSanitizer/UBSan runtimes (libasan, libubsan)" >&2
    exit 1
  fi
done

# The CUDA toolkit is not a Debian package here: it must already be installed.
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda/bin/nvcc" ]; then
  cat >&2 <<MSG
setup.sh: the CUDA toolkit was not found at $cuda (no bin/nvcc).
ringtape compiles its CUDA code in every build, so it needs the toolkit (CUDA 12.8+ with
cuDNN 9 and NCCL 2; a GPU is not needed to build). Install it under /usr/local/cuda, or set
CUDA_HOME to where it is, then run ./setup.sh again.
MSG
  exit 1
fi
for lib in libcudnn.so libnccl.so libcublas.so libcudart_static.a; do
  if [ ! -e "$cuda/lib64/$lib" ]; then
    echo "setup.sh: $cuda/lib64/$lib is missing: install cuDNN 9, NCCL 2 and cuBLAS into the CUDA toolkit" >&2
    exit 1
  fi
done
