"""tools/emu_kernel_coverage.py on synthetic test logs: the join of several tests' kernel logs
(zipped as Bazel leaves them, and unzipped), an instantiation compiled but never launched
named and failing, a log cut short, malformed lines, no log at all, and tests without kernels;
the runs (processes) a log holds: a launch counts only in its own run, two builds of one program
in a log (a file reused) are refused, and so are lines of no run (the format before run ids)."""
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
PROGRAM = "/out/bin/tests/cuda/a_test"


def body(rid, *lines):
    """`lines`, ("compiled" or "launched", KEY), as run `rid` writes them: after its id."""
    return "".join(f"{rid:016x} {kind} {key}\n" for kind, key in lines)


def run(rid, *lines, pid=100, build="b83b010b", program=PROGRAM):
    """One process's first write to a log as coverage.cc makes it: its run's header, then `lines`."""
    return f"run {rid:016x} pid={pid} build={build} program={program}\n" + body(rid, *lines)


def compiled(*keys):
    return [("compiled", k) for k in keys]


def launched(*keys):
    return [("launched", k) for k in keys]


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
        self.write_test("//tests/cuda:a_test", run(1, *compiled(CAST, WIDE), *launched(CAST)))
        self.write_test("//tests/cuda:b_test", run(2, *compiled(CAST, WIDE, DEDUCED), *launched(WIDE, DEDUCED)),
                        zipped=False)
        rc, out = self.run_main("//tests/cuda:a_test", "//tests/cuda:b_test")
        self.assertEqual(rc, 0, out)
        self.assertIn("launched: 3 of 3 compiled (2 tests, 0 of them without kernels; 2 runs of 1 programs)", out)

    def test_one_never_launched_fails_named(self):
        self.write_test("//tests/cuda:a_test", run(1, *compiled(CAST, WIDE), *launched(CAST)))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1)
        self.assertIn("launched: 1 of 2 compiled", out)
        self.assertIn(f"never launched: {WIDE}", out)
        self.assertNotIn(f"never launched: {CAST}", out)

    def test_only_the_named_tests_count(self):
        self.write_test("//tests/cuda:a_test", run(1, *compiled(WIDE)))
        self.write_test("//tests/cuda:other_test", run(2, *compiled(WIDE), *launched(WIDE)))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1, out)
        rc, out = self.run_main()  # no label: every test under the folder
        self.assertEqual(rc, 0, out)

    def test_the_runs_of_one_test_join(self):
        # A launcher and its ranks (forked, or other programs it starts): one file, a run each.
        self.write_test("//tests/cuda:a_test", run(1, *compiled(CAST, WIDE)) + run(2, *compiled(CAST, WIDE)) +
                        run(3, *compiled(CAST), *launched(CAST), pid=101, program="/out/bin/cli/ringtape",
                            build="77aa") + body(2, *launched(WIDE)))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 0, out)
        self.assertIn("launched: 2 of 2 compiled (1 tests, 0 of them without kernels; 3 runs of 2 programs)", out)

    def test_a_launch_counts_only_in_its_own_run(self):
        # Run 2 launched CAST without listing it compiled (a log spliced from another): it covers
        # nothing, not even run 1's CAST, and is named.
        self.write_test("//tests/cuda:a_test", run(1, *compiled(CAST)) + run(2, *compiled(WIDE), *launched(WIDE, CAST)))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1, out)
        self.assertIn(f"never launched: {CAST}", out)
        self.assertIn(f"launched in a run that does not list it compiled (a log cut short or spliced?): {CAST}", out)

    def test_two_builds_of_one_program_in_a_log_are_refused(self):
        # The file reused outside Bazel: the old build's launch of WIDE must not cover the new build's.
        old = run(1, *compiled(WIDE), *launched(WIDE), build="0ld")
        self.write_test("//tests/cuda:a_test", old + run(2, *compiled(WIDE), build="9e3"))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 2, out)
        self.assertIn("outputs.zip: lines 1 and 4: runs of two builds of /out/bin/tests/cuda/a_test (0ld, 9e3)", out)
        self.write_test("//tests/cuda:a_test", old + run(2, *compiled(WIDE), build="0ld"))  # rerun, same build
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 0, out)

    def test_launched_without_compiled_is_a_log_cut_short(self):
        self.write_test("//tests/cuda:a_test", run(1, *launched(CAST)))
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 1)
        self.assertIn("does not list it compiled", out)

    def test_tests_without_kernels_pass_but_no_log_at_all_fails(self):
        self.write_test("//tests/cuda:a_test", run(1, *compiled(CAST), *launched(CAST)))
        rc, out = self.run_main("//tests/cuda:a_test", "//tests/cuda_emu:cublas_fake_test")
        self.assertEqual(rc, 0, out)
        self.assertIn("1 of them without kernels", out)
        rc, out = self.run_main("//tests/cuda_emu:cublas_fake_test")
        self.assertEqual(rc, 2)
        self.assertIn("RINGTAPE_EMU_KERNEL_LOG", out)

    def assert_refused(self, text, *expected):
        self.write_test("//tests/cuda:a_test", text, zipped=False)
        rc, out = self.run_main("//tests/cuda:a_test")
        self.assertEqual(rc, 2, out)
        self.assertIn(os.path.join("a_test", "test.outputs", cov.LOG) + ": ", out)  # the file named
        for e in expected:
            self.assertIn(e, out)

    def test_a_malformed_line_is_an_error(self):
        self.assert_refused(run(1, *compiled(CAST)) + body(1, ("ran", CAST)), "line 3", "expected 'run ID")
        self.assert_refused(run(1, *compiled(CAST)) + "\n", "line 3")

    def test_the_format_before_run_ids_is_refused(self):
        # Lines of an older build appended to the file: they name no run, so they cannot count.
        self.assert_refused(run(1, *compiled(CAST)) + f"launched {CAST}\n", "line 3: no run id, the format before")
        self.assert_refused(f"compiled {CAST}\nlaunched {CAST}\n", "line 1: no run id")

    def test_a_line_of_no_run_is_refused(self):
        self.assert_refused(run(1, *compiled(CAST)) + body(2, *launched(CAST)),
                            f"line 3: run {2:016x} has no 'run {2:016x} ...' line before it")
        self.assert_refused(run(1, *compiled(CAST)) + run(1), f"line 3: run {1:016x} started again (first at line 1)")
        self.assert_refused(run(1, *compiled(CAST)) + f"{1:016x} launched kernels/cuda/ca", "line 3: cut short")
        self.assert_refused(run(1)[:-1], "line 1: cut short")  # a header cut short


if __name__ == "__main__":
    unittest.main()
