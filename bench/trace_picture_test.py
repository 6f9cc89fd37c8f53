"""bench/trace_picture.py on small synthetic traces: a well-formed SVG with the lanes and slices
of the chosen step only, and exit code 2 with a message for input it cannot draw."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "trace_picture.py")  # beside it, here and in the runfiles
NS = "{http://www.w3.org/2000/svg}"


def meta(kind, pid, tid, name):
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def x(name, cat, ts, dur, pid=0, tid=0, **args):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def trace(gpu=True):
    """Steps 1 and 2 (1000 us each) on the main thread, a loader and a communication thread,
    and with gpu=True a GPU process with two streams, a memory counter each and a flow."""
    ev = [meta("process_name", 0, 0, "rank 0 host"), meta("thread_name", 0, 0, "main"),
          meta("thread_name", 0, 1, "loader"), meta("thread_name", 0, 2, "communication")]
    for n, t in ((1, 0), (2, 1000)):
        op = "only_in_step1" if n == 1 else "conv2d"
        ev += [x(f"step {n}", "step", t, 1000), x("forward", "phase", t + 10, 500),
               x("layer1", "module", t + 20, 400), x("layer1.conv1", "module", t + 30, 300),
               x(op, "op", t + 40, 250, layer="layer1.conv1", inputs="[8, 3, 32, 32] f32",
                 phase="forward", flops=1e6, step=n),
               x("backward", "phase", t + 520, 400), x("conv2d backward", "op", t + 530, 300),
               x(f"batch {n + 1}", "range", t + 100, 200, tid=1),
               x("allreduce bucket 0", "range", t + 600, 200, tid=2)]
        ev.append({"ph": "C", "name": "memory cpu", "pid": 0, "tid": 0, "ts": t + 50,
                   "args": {"allocated MiB": 10 + n, "reserved MiB": 32}})
        if gpu:
            ev += [x("implicit_convolve_sgemm", "kernel", t + 60, 200, pid=1, tid=7),
                   x("Memcpy HtoD", "memcpy", t + 5, 30, pid=1, tid=9),
                   {"ph": "C", "name": "memory cuda:0", "pid": 0, "tid": 0, "ts": t + 70,
                    "args": {"allocated MiB": 100 * n, "reserved MiB": 512}},
                   {"ph": "s", "name": "launch", "id": n, "pid": 0, "tid": 0, "ts": t + 41},
                   {"ph": "f", "name": "launch", "id": n, "pid": 1, "tid": 7, "ts": t + 60}]
    if gpu:
        ev += [meta("process_name", 1, 0, "rank 0 GPU"),
               meta("thread_name", 1, 7, "compute (stream 7)"),
               meta("thread_name", 1, 9, "copies (stream 9)")]
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


class TracePictureTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_script(self, content, *args):
        path = os.path.join(self.dir.name, "trace.json")
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        out = os.path.join(self.dir.name, "out.svg")
        r = subprocess.run([sys.executable, SCRIPT, path, "-o", out, *args],
                           capture_output=True, text=True)
        return r, out

    def picture(self, content, *args):
        r, out = self.run_script(content, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        root = ET.parse(out).getroot()  # raises if the SVG is not well-formed XML
        self.assertEqual(root.tag, NS + "svg")
        return {t.text for t in root.iter(NS + "text")}, {t.text for t in root.iter(NS + "title")}

    def test_step_with_gpu_and_counters(self):
        texts, tips = self.picture(trace(), "--step", "2", "--width", "1200")
        for label in ("rank 0 host", "main", "loader", "communication", "rank 0 GPU",
                      "compute (stream 7)", "copies (stream 9)", "memory cpu", "memory cuda:0",
                      "step 2", "forward", "backward", "layer1", "conv2d", "conv2d backward",
                      "batch 3", "allreduce bucket 0", "implicit_convolve_sgemm"):
            self.assertIn(label, texts)
        self.assertIn("ringtape trace: step 2, 1.0 ms, rank 0 host", texts)
        self.assertTrue(any(t.startswith("conv2d (op): 0.250 ms") for t in tips), tips)
        self.assertFalse([t for t in texts | tips if "only_in_step1" in t])

    def test_default_step_host_only(self):
        texts, _ = self.picture(trace(gpu=False))
        self.assertIn("only_in_step1", texts)
        self.assertNotIn("rank 0 GPU", texts)

    def test_no_counters(self):
        t = trace(gpu=False)
        t["traceEvents"] = [e for e in t["traceEvents"] if e["ph"] != "C"]
        texts, _ = self.picture(t)
        self.assertNotIn("memory (MiB)", texts)
        self.assertIn("main", texts)

    def test_bad_input(self):
        for content, args, message in (
                (trace(), ("--step", "9"), "step 9 is not in"),
                (trace(), ("--step", "9"), "its steps: 1, 2"),
                ("", (), "is empty"),
                ("{not json", (), "is not JSON"),
                ({"traceEvents": []}, (), "no 'step' slices")):
            r, _ = self.run_script(content, *args)
            self.assertEqual(r.returncode, 2, (message, r.stderr))
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main()
