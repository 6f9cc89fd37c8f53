"""cuda_library: compiles .cu files with nvcc (Bazel 4.x, WORKSPACE mode, no rules_cuda)."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@cuda//:defs.bzl", "CUDA_PATH")
load("//tools:copts.bzl", "COPTS", "CUDA_EMU_COPTS", "CUDA_EMU_SANITIZER_COPTS", "NVCC_COPTS")

# SASS for sm_90 (H100/H200) plus PTX, which newer GPUs JIT-compile.
DEFAULT_GPU_ARCHS = [
    "arch=compute_90,code=sm_90",
    "arch=compute_90,code=compute_90",
]

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    ccs = [d[CcInfo].compilation_context for d in ctx.attr.deps if CcInfo in d]

    # Every header reachable through deps is an action input: header edits then
    # trigger recompilation, and the headers are visible inside the sandbox.
    own_hdrs = [f for f in ctx.files.srcs + ctx.files.hdrs if not f.path.endswith(".cu")]
    headers = depset(own_hdrs, transitive = [c.headers for c in ccs])
    iquote = depset([".", ctx.bin_dir.path], transitive = [c.quote_includes for c in ccs])
    incs = depset(transitive = [c.includes for c in ccs])
    sysincs = depset(transitive = [c.system_includes for c in ccs])
    defines = depset(ctx.attr.defines, transitive = [c.defines for c in ccs])

    mode = ctx.var["COMPILATION_MODE"]
    mode_flags = {"opt": ["-O3", "-DNDEBUG"], "dbg": ["-g", "-G", "-O0"], "fastbuild": ["-O1"]}[mode]

    objs = []
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        out = ctx.actions.declare_file(
            "_cuda_objs/%s/%s.pic.o" % (ctx.label.name, src.basename[:-len(".cu")]),
        )
        args = ctx.actions.args()
        args.add("-ccbin", cc_toolchain.compiler_executable)
        args.add("-std=c++20")
        args.add_all(["-Xcompiler", "-fPIC"])
        args.add_all(ctx.attr.gpu_archs, format_each = "-gencode=%s")
        args.add_all(mode_flags)
        args.add_all(NVCC_COPTS)
        args.add_all(iquote, before_each = "-I")  # nvcc has no -iquote
        args.add_all(incs, before_each = "-I")
        args.add_all(sysincs, before_each = "-isystem")
        args.add_all(defines, format_each = "-D%s")
        args.add_all(ctx.attr.copts)
        args.add("-c", src)
        args.add("-o", out)
        ctx.actions.run(
            executable = CUDA_PATH + "/bin/nvcc",
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,  # PATH for nvcc's helpers
        )
        objs.append(out)
    return [DefaultInfo(files = depset(objs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu", ".cuh", ".h"]),
        "hdrs": attr.label_list(allow_files = [".cuh", ".h"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "defines": attr.string_list(),
        "gpu_archs": attr.string_list(default = DEFAULT_GPU_ARCHS),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def _cu_as_cc_impl(ctx):
    outs = []
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        out = ctx.actions.declare_file("_cuda_emu_srcs/%s/%s.cc" % (ctx.label.name, src.basename))

        # A copy under a .cc name whose #line keeps __FILE__ and the line tables pointing at
        # the .cu file itself (reports name kernels/cuda/x.cu:LINE, not the copy).
        ctx.actions.run_shell(
            inputs = [src],
            outputs = [out],
            command = "{ printf '#line 1 \"%s\"\\n' \"$1\"; cat \"$1\"; } > \"$2\"",
            arguments = [src.path, out.path],
            mnemonic = "CuAsCc",
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

# The .cu files of srcs as .cc files, for the host compiler (--config=cuda-emu).
cu_as_cc = rule(
    implementation = _cu_as_cc_impl,
    attrs = {"srcs": attr.label_list(allow_files = [".cu", ".cuh", ".h"])},
)

def cuda_emu_select(emu, emu_sanitizer, default):
    """`emu` under --config=cuda-emu, `emu_sanitizer` under cuda-emu-asan/-tsan, else `default`."""
    return select({
        "//tools:cuda_emu": emu,
        "//tools:cuda_emu_asan": emu_sanitizer,
        "//tools:cuda_emu_tsan": emu_sanitizer,
        "//conditions:default": default,
    })

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], defines = [],
                 gpu_archs = DEFAULT_GPU_ARCHS, **kwargs):
    """nvcc-compiles the .cu files of srcs and wraps the objects in a cc_library.

    Under --config=cuda-emu (and -asan, -tsan) the .cu files are compiled as C++ instead, with
    cuda_emu/simt.h first, and the emulated runtime replaces NVIDIA's (docs/cuda-on-cpu.md).
    """

    # manual: //... must not build the other mode's objects (nvcc under cuda-emu).
    cuda_objects(
        name = name + "_cu",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cuda_headers"],
        copts = copts,
        defines = defines,
        gpu_archs = gpu_archs,
        tags = ["manual"],
    )
    cu_as_cc(name = name + "_emu_srcs", srcs = srcs, tags = ["manual"])
    emu_srcs = [":" + name + "_emu_srcs"]
    native.cc_library(
        name = name,
        srcs = [s for s in srcs if not s.endswith(".cu")] +
               cuda_emu_select(emu_srcs, emu_srcs, [":" + name + "_cu"]),
        hdrs = hdrs,
        copts = cuda_emu_select(COPTS + CUDA_EMU_COPTS + copts, COPTS + CUDA_EMU_SANITIZER_COPTS + copts, []),
        deps = deps + ["@cuda//:cudart"] + cuda_emu_select(["//cuda_emu:simt"], ["//cuda_emu:simt"], []),
        defines = defines,
        # No shared-object variant: the static CUDA runtime must be resolved in the final
        # link, which a .so of this library would leave unresolved in dynamic test builds.
        linkstatic = True,
        **kwargs
    )
