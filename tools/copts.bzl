"""Compiler flags for the project's own code (third-party headers come in as -isystem)."""

COPTS = ["-Wall", "-Wextra", "-Werror"]

# nvcc: host-compiler warnings too, and device-code warnings as errors.
NVCC_COPTS = ["-Xcompiler", "-Wall,-Wextra", "--Werror", "all-warnings", "-lineinfo"]
