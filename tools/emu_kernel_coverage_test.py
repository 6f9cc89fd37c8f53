"""tools/emu_kernel_coverage.py on synthetic test logs: the join of several tests' kernel logs
(zipped as Bazel leaves them, and unzipped), an instantiation compiled but never launched
named and failing, a log cut short, malformed lines, no log at all, and tests without kernels."""
import contextlib
import importlib.util
import io
import os
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "emu_kernel_coverage.py")
spec = importlib.util.spec_from_file_location("emu_kernel_coverage", SCRIPT)
cov = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cov)

CAST = "kernels/cuda/cast.cu:57 rt::cuda::{anonymous}::cast_kernel<float, __half>"
WIDE = "kernels/cuda/elementwise.cu:263 rt::cuda::{anonymous}::binary_broadcast_kernel<float, long int, rt::ew::Add>"
DEDUCED = "kernels/cuda/channel_reduce.cuh:202 channel_finalize (long int, long int, float*)"


class CoverageTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def write_test(self, label, text, zipped=True):
        pkg, _, name = label.lstrip("/").partition(":")
        folder = os.path.join(self.dir, pkg, name, "test.outputs")
        os.makedirs(folder, exist_ok=True)
        if zipped:
            with zipfile.ZipFile(os.path.join(folder, "outputs.zip"), "w") as z:
                z.writestr(cov.LOG, text)
        else:
            with open(os.path.join(folder, cov.LOG), "w", encoding="utf-8") as f:
                f.write(text)

    def run_main(self, *labels):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = cov.main(["emu_kernel_coverage.py", self.dir, *labels])
        return rc, out.getvalue()

    def test_every_instantiation_launched_by_some_test(self):
        self.write_test("//tests/cuda:a_test", f"compiled {CAST}\ncompiled {WIDE}\nlaunched {CAST}\n")
        self.write_test("//tests/cuda:b_test", f"compiled {CAST}\ncompiled {WIDE}\ncompiled {DEDUCED}\n"
                        f"launched {WIDE}\nlaunched {DEDUCED}\n", zipped=False)
        rc, out = self.run_main("//tests/cuda:a_test", "//tests/cuda:b_test")
        self.assertEqual(rc, 0, out)
        self.assertIn("launched: 3 of 3 compiled (2 tests, 0 of them without kernels)", out)

    def test_one_never_launched_fails_named(self):
        self.write_test("//tests/cuda:a_test", f"compiled {CAST}\ncompiled {WIDE}\nlaunched {CAST}\n")
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1)
        self.assertIn("launched: 1 of 2 compiled", out)
        self.assertIn(f"never launched: {WIDE}", out)
        self.assertNotIn(f"never launched: {CAST}", out)

    def test_only_the_named_tests_count(self):
        self.write_test("//tests/cuda:a_test", f"compiled {WIDE}\n")
        self.write_test("//tests/cuda:other_test", f"compiled {WIDE}\nlaunched {WIDE}\n")
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1, out)
        rc, out = self.run_main()  # no label: every test under the folder
        self.assertEqual(rc, 0, out)

    def test_launched_without_compiled_is_a_log_cut_short(self):
        self.write_test("//tests/cuda:a_test", f"launched {CAST}\n")
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1)
        self.assertIn("not in any 'compiled' list", out)

    def test_tests_without_kernels_pass_but_no_log_at_all_fails(self):
        self.write_test("//tests/cuda:a_test", f"compiled {CAST}\nlaunched {CAST}\n")
        rc, out = self.run_main("//tests/cuda:a_test", "//tests/cuda_emu:cublas_fake_test")
        self.assertEqual(rc, 0, out)
        self.assertIn("1 of them without kernels", out)
        rc, out = self.run_main("//tests/cuda_emu:cublas_fake_test")
        self.assertEqual(rc, 2)
        self.assertIn("RINGTAPE_EMU_KERNEL_LOG", out)

    def test_a_malformed_line_is_an_error(self):
        self.write_test("//tests/cuda:a_test", f"compiled {CAST}\nran {CAST}\n")
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 2)
        self.assertIn("line 2", out)


if __name__ == "__main__":
    unittest.main()
