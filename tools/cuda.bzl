"""cuda_library: compiles .cu files with nvcc (Bazel 4.x, WORKSPACE mode, no rules_cuda)."""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@cuda//:defs.bzl", "CUDA_PATH")
load("//tools:copts.bzl", "COPTS", "CUDA_EMU_COPTS", "CUDA_EMU_SANITIZER_COPTS", "NVCC_COPTS")

# SASS for sm_90 (H100/H200) plus PTX, which newer GPUs JIT-compile.
DEFAULT_GPU_ARCHS = [
    "arch=compute_90,code=sm_90",
    "arch=compute_90,code=compute_90",
]

def _nvcc_setup(ctx):
    """What every nvcc action of a target shares: the compiler, the header inputs, the flags."""
    cc_toolchain = find_cpp_toolchain(ctx)
    ccs = [d[CcInfo].compilation_context for d in ctx.attr.deps if CcInfo in d]

    # Every header reachable through deps is an action input: header edits then
    # trigger recompilation, and the headers are visible inside the sandbox.
    own_hdrs = [f for f in ctx.files.srcs + ctx.files.hdrs if not f.path.endswith(".cu")]
    mode = ctx.var["COMPILATION_MODE"]
    return struct(
        compiler = cc_toolchain.compiler_executable,
        headers = depset(own_hdrs, transitive = [c.headers for c in ccs]),
        iquote = depset([".", ctx.bin_dir.path], transitive = [c.quote_includes for c in ccs]),
        incs = depset(transitive = [c.includes for c in ccs]),
        sysincs = depset(transitive = [c.system_includes for c in ccs]),
        defines = depset(ctx.attr.defines, transitive = [c.defines for c in ccs]),
        mode_flags = {"opt": ["-O3", "-DNDEBUG"], "dbg": ["-g", "-G", "-O0"], "fastbuild": ["-O1"]}[mode],
    )

def _nvcc_args(ctx, nvcc, target_flags):
    """nvcc's command line up to the source: `target_flags` say what it produces."""
    args = ctx.actions.args()
    args.add("-ccbin", nvcc.compiler)
    args.add("-std=c++20")
    args.add_all(target_flags)
    args.add_all(nvcc.mode_flags)
    args.add_all(NVCC_COPTS)
    args.add_all(nvcc.iquote, before_each = "-I")  # nvcc has no -iquote
    args.add_all(nvcc.incs, before_each = "-I")
    args.add_all(nvcc.sysincs, before_each = "-isystem")
    args.add_all(nvcc.defines, format_each = "-D%s")
    args.add_all(ctx.attr.copts)
    return args

def _cuda_objects_impl(ctx):
    nvcc = _nvcc_setup(ctx)
    objs = []
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        out = ctx.actions.declare_file(
            "_cuda_objs/%s/%s.pic.o" % (ctx.label.name, src.basename[:-len(".cu")]),
        )
        args = _nvcc_args(ctx, nvcc, ["-Xcompiler", "-fPIC"] + ["-gencode=%s" % a for a in ctx.attr.gpu_archs])
        args.add("-c", src)
        args.add("-o", out)
        ctx.actions.run(
            executable = CUDA_PATH + "/bin/nvcc",
            arguments = [args],
            inputs = depset([src], transitive = [nvcc.headers]),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,  # PATH for nvcc's helpers
        )
        objs.append(out)
    return [DefaultInfo(files = depset(objs))]

_NVCC_ATTRS = {
    "srcs": attr.label_list(allow_files = [".cu", ".cuh", ".h"]),
    "hdrs": attr.label_list(allow_files = [".cuh", ".h"]),
    "deps": attr.label_list(providers = [CcInfo]),
    "copts": attr.string_list(),
    "defines": attr.string_list(),
    "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
}

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = dict(_NVCC_ATTRS, gpu_archs = attr.string_list(default = DEFAULT_GPU_ARCHS)),
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

# The ptxas reports of a cuda_library's .cu files, keyed by the .cu's path.
PtxasReportsInfo = provider(fields = {"reports": "dict: the .cu's path -> its report (.txt)"})

# The arch whose registers the kernel lab reads (cuda_emu/h200.h models an H200).
PTXAS_REPORT_ARCH = "sm_90"

def _ptxas_reports_impl(ctx):
    nvcc = _nvcc_setup(ctx)
    reports = {}
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        out = ctx.actions.declare_file("_ptxas/%s/%s.txt" % (ctx.label.name, src.basename))
        arch_flags = ["-Xcompiler", "-fPIC", "-arch=" + PTXAS_REPORT_ARCH, "-cubin", "--resource-usage"]
        args = _nvcc_args(ctx, nvcc, arch_flags)
        args.add(src)
        args.add("-o", "/dev/null")  # the cubin itself is not wanted

        # ptxas writes its report to nvcc's stdout/stderr: kept in the .txt, less the compile
        # times (which would make each run's output differ); nvcc's failure fails the action
        # with all it said.
        ctx.actions.run_shell(
            inputs = depset([src], transitive = [nvcc.headers]),
            outputs = [out],
            command = 'out="$1"; shift; log="$("$@" 2>&1)" || { printf \'%s\\n\' "$log" >&2; exit 1; }; ' +
                      'printf \'%s\\n\' "$log" | grep -v "Compile time = " > "$out" || true',
            arguments = [out.path, CUDA_PATH + "/bin/nvcc", args],
            mnemonic = "NvccPtxasReport",
            progress_message = "ptxas report %s" % src.short_path,
            use_default_shell_env = True,  # PATH for nvcc's helpers
        )
        reports[src.path] = out
    return [
        DefaultInfo(files = depset(reports.values()), runfiles = ctx.runfiles(files = reports.values())),
        PtxasReportsInfo(reports = reports),
    ]

# nvcc -arch=sm_90 -cubin --resource-usage on each .cu file, with the flags cuda_objects
# uses: ptxas's registers, shared memory and spills of every kernel (cuda_emu/ptxas.h).
ptxas_reports = rule(
    implementation = _ptxas_reports_impl,
    attrs = _NVCC_ATTRS,
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def _cu_as_cc_impl(ctx):
    reports = ctx.attr.ptxas[PtxasReportsInfo].reports if ctx.attr.ptxas else {}
    outs = []
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        out = ctx.actions.declare_file("_cuda_emu_srcs/%s/%s.cc" % (ctx.label.name, src.basename))

        # A copy under a .cc name whose #line keeps __FILE__ and the line tables pointing at
        # the .cu file itself (reports name kernels/cuda/x.cu:LINE, not the copy), ending in
        # the registration of ptxas's report: in the kernels' own translation unit, it is
        # linked wherever they are (Note [Kernel names across compilers] in cuda_emu/ptxas.cc
        # says how a launch finds its kernel in it). The report's source is the #line's path,
        # which is the launches' __FILE__.
        report = reports.get(src.path)
        command = "{ printf '#line 1 \"%s\"\\n' \"$1\"; cat \"$1\"; } > \"$2\""
        inputs = [src]
        arguments = [src.path, out.path]
        if report:
            command += (
                "; if grep -qF ')rtptxas\"' \"$3\"; then echo \"$3: holds the literal's delimiter\" >&2; exit 1; fi" +
                "; { printf '\\nstatic const ::rt::emu::PtxasReport rt_emu_ptxas_report_{\"%s\", R\"rtptxas(' \"$1\"" +
                "; cat \"$3\"; printf ')rtptxas\"};\\n'; } >> \"$2\""
            )
            inputs.append(report)
            arguments.append(report.path)
        ctx.actions.run_shell(
            inputs = inputs,
            outputs = [out],
            command = command,
            arguments = arguments,
            mnemonic = "CuAsCc",
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

# The .cu files of srcs as .cc files, for the host compiler (--config=cuda-emu), each
# registering the report of `ptxas` (a ptxas_reports target) for it.
cu_as_cc = rule(
    implementation = _cu_as_cc_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu", ".cuh", ".h"]),
        "ptxas": attr.label(providers = [PtxasReportsInfo]),
    },
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
    # Under the cuda-emu configs only (through _emu_srcs): the default build runs no extra nvcc.
    ptxas_reports(
        name = name + "_ptxas",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cuda_headers"],
        copts = copts,
        defines = defines,
        tags = ["manual"],
        testonly = kwargs.get("testonly", False),
    )
    cu_as_cc(
        name = name + "_emu_srcs",
        srcs = srcs,
        ptxas = ":" + name + "_ptxas",
        tags = ["manual"],
        testonly = kwargs.get("testonly", False),
    )
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
