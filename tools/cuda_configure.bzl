"""Finds the CUDA toolkit ($CUDA_HOME, else /usr/local/cuda) and exposes it as @cuda."""

def _cuda_configure_impl(rctx):
    path = rctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    nvcc = rctx.path(path + "/bin/nvcc")
    if not nvcc.exists:
        fail(("ringtape needs the CUDA toolkit to build (nvcc not found at %s). " +
              "Install it under /usr/local/cuda or set CUDA_HOME to its root, then run ./setup.sh.") % nvcc)

    # Resolve symlinks once so that rpaths and nvcc point at real files.
    real = str(rctx.path(path).realpath)
    for d in ["include", "lib64", "bin"]:
        rctx.symlink(real + "/" + d, d)
    rctx.template("BUILD", rctx.attr._build_tpl, {"%{cuda_path}": real})

    # nvcc must be run by its real path: it finds cicc/ptxas relative to argv[0].
    rctx.file("defs.bzl", "CUDA_PATH = %r\n" % real)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME"],
    local = True,
    attrs = {"_build_tpl": attr.label(default = "//third_party:cuda.BUILD.tpl")},
)
