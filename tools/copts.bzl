"""Compiler flags for the project's own code (third-party headers come in as -isystem)."""

COPTS = ["-Wall", "-Wextra", "-Werror"]

# nvcc: host-compiler warnings too, and device-code warnings as errors.
NVCC_COPTS = ["-Xcompiler", "-Wall,-Wextra", "--Werror", "all-warnings", "-lineinfo"]

# .cu files compiled as C++ under --config=cuda-emu (docs/cuda-on-cpu.md). cuda_emu/simt.h
# comes first in every one: the device built-ins, barriers, warp operations and launches.
# -fsanitize=thread makes GCC call __tsan_readN / __tsan_writeN (and the _range forms for
# aggregates) before every load and store, and cuda_emu/memcheck.cc defines them: bounds,
# initialised reads, shared-memory races, device placement and cross-stream hazards (no
# sanitizer runtime is linked: the calls are ours; Note [Instrumented kernels]). GCC's
# AddressSanitizer instrumentation would not do: it drops the check of a store to an
# address it has just checked for a load, and the race and initialisation checks need
# every store. Line tables let a report name the faulting line.
# The kernel lab (Note [Kernel lab] in cuda_emu/perf.cc) counts a GPU thread's accesses as
# nvcc issues them, one per source access: g++ must not vectorise loops or straight-line code
# into wider accesses, merge adjacent stores, turn a loop into a memset/memcpy call (which
# no check would see either), or split an aggregate's load or store into its fields
# (scalar replacement of aggregates: a 16-byte Pack<bf16> load became eight 2-byte loads,
# where nvcc issues one 16-byte LDG).
CUDA_EMU_COPTS = [
    "-include",
    "cuda_emu/simt.h",
    "-g1",
    "-fsanitize=thread",
    "--param=tsan-instrument-func-entry-exit=0",
    # Indices into arrays of known bound checked (Note [Local arrays] in cuda_emu/memcheck.cc).
    "-fsanitize=bounds",
    "-fno-tree-loop-vectorize",
    "-fno-tree-slp-vectorize",
    "-fno-store-merging",
    "-fno-tree-loop-distribute-patterns",
    "-fno-tree-sra",
]

# Under cuda-emu-asan and cuda-emu-tsan the kernels get the config's own sanitizer instead.
CUDA_EMU_SANITIZER_COPTS = [
    "-include",
    "cuda_emu/simt.h",
    "-g1",
]
