"""tools/emu_line_coverage.py's reading of device code: the bodies of __global__ and __device__
functions (one-line, multi-line, templates, members), not their declarations, signatures of
multi-line bodies, lines of braces alone, comments or host code; and its refusal without gcov
data."""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("emu_line_coverage", os.path.join(HERE, "emu_line_coverage.py"))
cov = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cov)

SOURCE = """// __global__ in a comment is not code
__device__ float twice(float v);
__device__ __forceinline__ float half(float v) { return v / 2; }
template <typename T>
__global__ void k(T* p, int n) {
  for (int i = 0; i < n; ++i) {
    p[i] = half(p[i]);
  }
}
void launcher(float* p) {
  k<float><<<1, 1>>>(p, 1);
}
struct Op {
  __device__ void operator()(float& v) const {
    v += 1;
  }
};
"""


class DeviceLinesTest(unittest.TestCase):
    def test_bodies_only(self):
        with tempfile.NamedTemporaryFile("w", suffix=".cu", delete=False) as f:
            f.write(SOURCE)
        lines, text = cov.device_lines(f.name)
        os.unlink(f.name)
        self.assertEqual(sorted(lines), [3, 6, 7, 15])
        self.assertEqual(text[6].strip(), "p[i] = half(p[i]);")

    def test_no_gcov_data_is_an_error(self):
        out = io.StringIO()
        with contextlib.redirect_stderr(out):
            rc = cov.main(["emu_line_coverage.py", tempfile.mkdtemp(), tempfile.mkdtemp()])
        self.assertEqual(rc, 2)
        self.assertIn("no .gcda", out.getvalue())


if __name__ == "__main__":
    unittest.main()
