"""tools/kernel_lab_compare.py on synthetic inputs: a lab report in profile/kernel_lab.cc's format,
a profiler trace in profile/trace.cc's, an ncu --csv output in Nsight Compute's. Checks the kernel
names brought to one key across GCC's and the demangler's spellings (exact pairs), the three
steps of the join, the medians and totals, the kernels found on one side only, ncu's counters
against the lab's at ncu's batch, and the command line's exit codes."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "kernel_lab_compare.py")  # beside it, here and in the runfiles
spec = importlib.util.spec_from_file_location("kernel_lab_compare", SCRIPT)
klc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(klc)

# The same kernels as GCC prints them (the lab) and as CUPTI/ncu give them (demangled), with the key.
NAME_PAIRS = [
    ("rt::cuda::{anonymous}::map_vec<__nv_bfloat16, rt::cuda::{anonymous}::BinaryFwd<rt::ew::Add, float> >",
     "void rt::cuda::(anonymous namespace)::map_vec<__nv_bfloat16, rt::cuda::(anonymous namespace)::BinaryFwd<"
     "rt::ew::Add, float>>(long, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
     "rt::cuda::(anonymous namespace)::BinaryFwd<rt::ew::Add, float>)",
     "map_vec<__nv_bfloat16,BinaryFwd<Add,float>>"),
    ("rt::cuda::{anonymous}::transpose_kernel<short unsigned int>",
     "void rt::cuda::(anonymous namespace)::transpose_kernel<unsigned short>(unsigned short const*, unsigned short*, "
     "long, long)",
     "transpose_kernel<ushort>"),
    ("rt::cuda::{anonymous}::reduce_kernel<long int, 256>",
     "void rt::cuda::(anonymous namespace)::reduce_kernel<long, 256u>(long const*, long*, long)",
     "reduce_kernel<long,256>"),
    ("(& rt::cuda::detail::channel_finalize)",
     "void rt::cuda::detail::channel_finalize(float const*, float*, int)",
     "channel_finalize"),
    ("rt::cuda::detail::channel_partials_rows<rt::cuda::{anonymous}::BackwardFold<__nv_bfloat16>, 8, "
     "PartialSink<SumState<float> > >",
     "void rt::cuda::detail::channel_partials_rows<rt::cuda::(anonymous namespace)::BackwardFold<__nv_bfloat16>, 8, "
     "rt::cuda::detail::PartialSink<rt::cuda::detail::SumState<float>>>(rt::cuda::(anonymous namespace)::"
     "BackwardFold<__nv_bfloat16>, long, long, rt::cuda::detail::PartialSink<rt::cuda::detail::SumState<float>>)",
     "channel_partials_rows<BackwardFold<__nv_bfloat16>,8,PartialSink<SumState<float>>>"),
    ("rt::cuda::{anonymous}::fill_kernel<const float*, 'A'>",
     "void rt::cuda::(anonymous namespace)::fill_kernel<float const*, (char)65>(long)",
     "fill_kernel<float*,65>"),
    ("rt::cuda::{anonymous}::map_kernel<rt::cuda::launch_map(rt::Tensor&)::<lambda(float)> >",
     "void rt::cuda::(anonymous namespace)::map_kernel<rt::cuda::launch_map(rt::Tensor&)::{lambda(float)#1}>"
     "(long, float*)",
     "map_kernel<lambda(float)>"),
    # ncu writes the parameters its own way and may leave the return type out.
    ("rt::cuda::{anonymous}::sgd_kernel<float>",
     "rt::cuda::<unnamed>::sgd_kernel<float>(long, float *, const float *, float)",
     "sgd_kernel<float>"),
]

RANDOM_GCC = "rt::cuda::{anonymous}::random_kernel<rt::cuda::<unnamed>::Dist::normal, float>"
RANDOM_DEMANGLED = "void rt::cuda::(anonymous namespace)::random_kernel<(rt::cuda::(anonymous namespace)::Dist)0, " \
                   "float>(float*, long, unsigned long)"
MAP_VEC, MAP_VEC_DEV = NAME_PAIRS[0][0], NAME_PAIRS[0][1]
FINALIZE, FINALIZE_DEV = NAME_PAIRS[3][0], NAME_PAIRS[3][1]
FILL_GCC = "rt::cuda::{anonymous}::fill_kernel<float>"
RELU_DEV = "void rt::cuda::(anonymous namespace)::relu_kernel<float>(long, float const*, float*)"
GEMM_DEV = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"

ZERO = {c: 0.0 for c in klc.LAB_COUNTERS}


def counters(**kw):
    c = dict(ZERO)
    c.update(kw)
    return c


def row(kind, kernel, bound, at_target, measured=None, site="", limiter="memory", registers=None, occupancy=None):
    r = {"kind": kind, "kernel": kernel, "site": site, "at_target": at_target, "bound_us": bound, "limiter": limiter,
         "measured": measured or [dict(ZERO)] * 3, "not_linear": []}
    if kind == "kernel":
        r.update(registers_per_thread=registers, occupancy=occupancy)
    return r


def report():
    """map_vec launched from two sites, channel_finalize in GCC's deduced form, random_kernel with an
    enum argument, fill_kernel that the GPU never runs, a library call and the copies."""
    b4 = lambda **kw: [dict(ZERO), dict(ZERO), counters(**kw)]  # noqa: E731 (at batches 1, 2, 4)
    rows = [
        row("kernel", MAP_VEC, 300.0, counters(launches=2, global_load_requests=100, global_load_sectors=400,
                                                global_load_sectors_ideal=400, global_store_requests=50,
                                                global_store_sectors=200, global_store_sectors_ideal=100,
                                                dram_bytes=1e6),
            b4(launches=2, global_load_sectors=8, global_load_sectors_ideal=8, global_store_sectors=4,
               global_store_sectors_ideal=2, dram_bytes=4000), "kernels/cuda/elementwise.cu:214", "memory", 16, 1.0),
        row("kernel", MAP_VEC, 100.0, counters(launches=1, global_load_requests=25, global_load_sectors=100,
                                                global_load_sectors_ideal=100, dram_bytes=5e5),
            b4(launches=1, global_load_sectors=2, global_load_sectors_ideal=2, dram_bytes=1000),
            "kernels/cuda/elementwise.cu:230", "launch", 16, 1.0),
        row("kernel", FINALIZE, 50.0, counters(launches=4, shared_load_requests=10, shared_store_requests=10,
                                                shared_bank_conflicts=5, shared_wavefronts=25),
            b4(launches=4, shared_load_requests=1, shared_store_requests=1, shared_bank_conflicts=1),
            "./kernels/cuda/channel_reduce.cuh:125", "launch", 32, 0.5),
        row("kernel", RANDOM_GCC, 10.0, counters(launches=1), site="kernels/cuda/random.cu:101", registers=20),
        row("kernel", FILL_GCC, 4.0, counters(launches=2), site="kernels/cuda/fill.cu:24", limiter="launch"),
        row("library", "cudnn tc_implicit_gemm convolution forward", 1000.0, counters(launches=10),
            site="cudnnBackendExecute", limiter="latency"),
        row("memcpy", "memcpy", 20.0, counters(launches=3), limiter="launch"),
    ]
    return {"format": "ringtape kernel lab report 1", "device": "NVIDIA H200 (modelled, cuda_emu/h200.h)",
            "measured_batches": [1, 2, 4], "target_batch": 256,
            "summary": {"bound_us": 1484.0, "kernel_bound_us": 464.0, "library_bound_us": 1000.0,
                        "copy_bound_us": 20.0, "kernel_launches": 10.0, "library_calls": 10.0, "copies": 3.0},
            "rows": rows}


def x(name, cat, ts, dur, pid=1, tid=7):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def trace():
    """Steps 3, 4 and 5 (1000 us each, 1000 us apart): map_vec 3 calls of 100/110/80 us, channel_finalize
    4 x 10 us, random_kernel 5 us, relu_kernel (on the GPU only) 7 us, a library GEMM 2 x 200 us and a
    copy 15 us per step; one kernel between the steps."""
    ev = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0 host"}}]
    for i, (step, t0, mv) in enumerate(((3, 0, 100.0), (4, 2000, 110.0), (5, 4000, 80.0))):
        ev.append(x(f"step {step}", "step", t0, 1000, pid=0, tid=0))
        t = t0 + 10
        for _ in range(3):
            ev.append(x(MAP_VEC_DEV, "kernel", t, mv))
            t += mv + 1
        for _ in range(4):
            ev.append(x(FINALIZE_DEV, "kernel", t, 10))
            t += 11
        ev += [x(RANDOM_DEMANGLED, "kernel", t, 5), x(RELU_DEV, "kernel", t + 6, 7),
               x(GEMM_DEV, "kernel", t + 20, 200), x(GEMM_DEV, "kernel", t + 230, 200),
               x("memcpy DtoD", "memcpy", t + 440, 15, tid=9)]
    ev.append(x(RELU_DEV, "kernel", 1500, 7))  # between steps 3 and 4: outside every step
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


NCU_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
            '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def ncu_csv():
    """map_vec's 3 launches and the first of channel_finalize's 4 (ncu's launch count ran out), in the
    form ncu prints them (thousands separators, units, n/a, its own lines between the rows)."""
    map_vec = "void rt::cuda::(anonymous namespace)::map_vec<__nv_bfloat16, rt::cuda::(anonymous namespace)::" \
              "BinaryFwd<rt::ew::Add, float>>(long, const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, " \
              "rt::cuda::(anonymous namespace)::BinaryFwd<rt::ew::Add, float>)"
    finalize = "rt::cuda::detail::channel_finalize(const float *, float *, int)"
    per = {
        map_vec: [("gpu__time_duration.sum", "nsecond", "2,048"), ("launch__registers_per_thread", "register/thread",
                                                                    "18"),
                  ("sm__maximum_warps_per_active_cycle_pct", "%", "100"),
                  ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "2"),
                  ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "4"),
                  ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "", "1"),
                  ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "2"),
                  ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct", "%", "100"),
                  ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct", "%", "50"),
                  ("dram__bytes_read.sum", "Kbyte", "1.5"), ("dram__bytes_write.sum", "byte", "1,000"),
                  ("smsp__thread_inst_executed_per_inst_executed.ratio", "", "n/a")],
        finalize: [("gpu__time_duration.sum", "usecond", "1.5"), ("launch__registers_per_thread", "register/thread",
                                                                 "30"),
                   ("smsp__inst_executed_op_shared_ld.sum", "inst", "4"),
                   ("smsp__inst_executed_op_shared_st.sum", "inst", "4"),
                   ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "2"),
                   ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "2"),
                   ("dram__bytes_read.sum", "byte", "100"), ("dram__bytes_write.sum", "byte", "0"),
                   ("smsp__thread_inst_executed_per_inst_executed.ratio", "", "31.5")],
    }
    lines = ["==PROF== Connected to process 4242 (/tmp/payload/bin/bench__train_step_bench)",
             "==WARNING== Note: kernels are profiled with caches flushed", NCU_HEAD]
    for i, kernel in enumerate([map_vec, map_vec, map_vec, finalize]):
        for metric, unit, value in per[kernel]:
            lines.append(",".join(f'"{v}"' for v in (i, 4242, "bench__train_step_bench", "host", kernel, 1, 7,
                                                     "(256, 1, 1)", "(64, 1, 1)", 0, "9.0", "Command line profiler "
                                                     "metrics", metric, unit, value)))
        if i == 1:
            lines.append("==PROF== Profiling \"channel_finalize\" - 3: 0%....50%....100% - 9 passes")
    lines.append("==PROF== Disconnected from process 4242")
    return "\n".join(lines) + "\n"


class NamesTest(unittest.TestCase):
    def test_gcc_and_demangled_names_share_a_key(self):
        for gcc, demangled, key in NAME_PAIRS:
            with self.subTest(key=key):
                self.assertEqual(klc.kernel_key(gcc), key)
                self.assertEqual(klc.kernel_key(demangled), key)

    def test_hand_written_is_namespace_rt(self):
        self.assertTrue(klc.Name(MAP_VEC_DEV).hand_written())
        self.assertTrue(klc.Name(FINALIZE).hand_written())
        self.assertFalse(klc.Name(GEMM_DEV).hand_written())
        self.assertFalse(klc.Name("void cutlass::Kernel<rt_like::Op>(rt_like::Op::Params)").hand_written())

    def test_an_enum_argument_is_a_wildcard(self):
        lab, dev = klc.Name(RANDOM_GCC), klc.Name(RANDOM_DEMANGLED)
        self.assertEqual(lab.key, "random_kernel<normal,float>")
        self.assertEqual(dev.key, "random_kernel<(Dist)0,float>")
        self.assertTrue(lab.compatible(dev))
        self.assertFalse(lab.compatible(klc.Name("void rt::cuda::random_kernel<(rt::cuda::Dist)0, double>(double*)")))


class JoinTest(unittest.TestCase):
    def names(self, raw):
        return {klc.kernel_key(n): klc.Name(n) for n in raw}

    def test_exact_then_wildcard_then_name_only(self):
        lab = self.names([MAP_VEC, RANDOM_GCC, "rt::cuda::{anonymous}::odd_kernel<rt::cuda::Odd<3> >", FILL_GCC])
        dev = self.names([MAP_VEC_DEV, RANDOM_DEMANGLED, "void rt::cuda::odd_kernel<rt::cuda::Odd<3ul, 1> >(int)",
                          RELU_DEV])
        pairs, lab_only, dev_only = klc.join(lab, dev)
        self.assertEqual(sorted(pairs), [
            ("map_vec<__nv_bfloat16,BinaryFwd<Add,float>>", "map_vec<__nv_bfloat16,BinaryFwd<Add,float>>", "exact"),
            ("odd_kernel<Odd<3>>", "odd_kernel<Odd<3,1>>", "name only"),
            ("random_kernel<normal,float>", "random_kernel<(Dist)0,float>", "wildcard"),
        ])
        self.assertEqual(lab_only, ["fill_kernel<float>"])
        self.assertEqual(dev_only, ["relu_kernel<float>"])

    def test_an_ambiguous_wildcard_pairs_nothing(self):
        lab = self.names([RANDOM_GCC, RANDOM_GCC.replace("normal", "uniform")])
        dev = self.names([RANDOM_DEMANGLED, RANDOM_DEMANGLED.replace(")0,", ")1,")])
        pairs, lab_only, dev_only = klc.join(lab, dev)
        self.assertEqual(pairs, [])
        self.assertEqual(lab_only, ["random_kernel<normal,float>", "random_kernel<uniform,float>"])
        self.assertEqual(dev_only, ["random_kernel<(Dist)0,float>", "random_kernel<(Dist)1,float>"])


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.report = self.write("report.json", json.dumps(report()))
        self.trace = self.write("trace.json", json.dumps(trace()))
        self.ncu = self.write("ncu.csv", ncu_csv())

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def rows(self, res):
        return {r["kernel"]: r for r in res["rows"]}

    def test_times_join_the_lab_per_kernel(self):
        res = klc.compare(self.report, self.trace, batch=256)
        rows = self.rows(res)
        mv = rows["map_vec<__nv_bfloat16,BinaryFwd<Add,float>>"]
        self.assertEqual(mv["match"], "exact")
        self.assertEqual(mv["lab_calls"], 3)         # two launch sites summed
        self.assertEqual(mv["lab_bound_us"], 400.0)
        self.assertEqual(mv["limiter"], "memory")    # the site with the larger bound
        self.assertEqual(mv["gpu_calls"], 3)
        self.assertAlmostEqual(mv["gpu_us"], 300.0)  # median of 300, 330, 240
        self.assertAlmostEqual(mv["gpu_over_bound"], 0.75)
        self.assertAlmostEqual(mv["lab_at_target"]["sector_efficiency"], 600 / 700)
        fin = rows["channel_finalize"]
        self.assertEqual((fin["gpu_calls"], fin["gpu_us"], fin["lab_bound_us"]), (4, 40.0, 50.0))
        self.assertEqual(fin["lab_at_target"]["bank_conflicts_per_request"], 0.25)
        self.assertEqual(rows["random_kernel<normal,float>"]["match"], "wildcard")
        self.assertEqual(rows["random_kernel<normal,float>"]["device_key"], "random_kernel<(Dist)0,float>")
        self.assertEqual(res["lab_only"], ["fill_kernel<float>"])
        self.assertEqual(res["device_only"], ["relu_kernel<float>"])
        self.assertNotIn(GEMM_DEV, rows)  # library kernels go to the totals only
        self.assertNotIn("ncu", mv)

    def test_totals(self):
        t = klc.compare(self.report, self.trace, batch=256)["totals"]
        self.assertEqual(t["steps"], 3)
        self.assertAlmostEqual(t["hand_written_us"], 352.0)  # median of 352, 382, 292
        self.assertAlmostEqual(t["hand_written_launches"], 9.0)
        self.assertEqual(t["lab_kernel_bound_us"], 464.0)
        self.assertAlmostEqual(t["matched_gpu_us"], 345.0)
        self.assertAlmostEqual(t["matched_lab_bound_us"], 460.0)
        self.assertAlmostEqual(t["library_us"], 400.0)
        self.assertAlmostEqual(t["copy_us"], 15.0)
        self.assertAlmostEqual(t["gpu_busy_us"], 767.0)
        self.assertAlmostEqual(t["step_ms_median"], 1.0)
        self.assertEqual(t["records_outside_steps"], 1)

    def test_ncu_counters_against_the_lab_at_ncus_batch(self):
        res = klc.compare(self.report, self.trace, self.ncu, ncu_batch=4, batch=256)
        self.assertEqual(res["ncu"]["launches"], 4)
        rows = self.rows(res)
        mv = rows["map_vec<__nv_bfloat16,BinaryFwd<Add,float>>"]
        n, lab4 = mv["ncu"], mv["lab_at_ncu_batch"]
        self.assertEqual(n["launches"], 3)
        self.assertAlmostEqual(n["sector_efficiency"], 15 / 18)  # 100% of 4 sectors and 50% of 2, per launch
        self.assertAlmostEqual(n["load_sectors_per_request"], 2.0)
        self.assertEqual(n["dram_bytes"], 7500.0)                # 1.5 Kbyte + 1,000 byte, three launches
        self.assertFalse(n["dram_bytes_scaled"])
        self.assertEqual((n["registers"], n["occupancy"]), (18, 1.0))
        self.assertAlmostEqual(n["time_us"], 3 * 2.048)
        self.assertIsNone(n["active_lanes_per_instruction"])    # n/a in every launch
        self.assertAlmostEqual(lab4["sector_efficiency"], 12 / 14)  # the lab's measured batch 4, both sites
        self.assertEqual(lab4["dram_bytes"], 5000.0)
        fin = rows["channel_finalize"]["ncu"]
        self.assertEqual(fin["launches"], 1)
        self.assertEqual(fin["bank_conflicts_per_request"], 0.5)
        self.assertEqual(rows["channel_finalize"]["lab_at_ncu_batch"]["bank_conflicts_per_request"], 0.5)
        self.assertEqual(fin["dram_bytes"], 400.0)             # one launch of the step's four, scaled
        self.assertTrue(fin["dram_bytes_scaled"])
        self.assertEqual(fin["active_lanes_per_instruction"], 31.5)
        self.assertIsNone(fin["sector_efficiency"])
        self.assertNotIn("ncu", rows["random_kernel<normal,float>"])
        md = klc.markdown(res)
        self.assertIn("| `map_vec<__nv_bfloat16,BinaryFwd<Add,float>>` | 3 / 3 | 300.0 | 400.0 | 0.75 | memory | 3 | "
                      "0.86 / 0.83 | - / - | 0.0 / 0.0 | 16 / 18 |", md)
        self.assertIn("| `channel_finalize` | 4 / 4 | 40.0 | 50.0 | 0.80 | launch | 1 | - / - | 0.50 / 0.50 | "
                      "0.0 / 0.0~ | 32 / 30 |", md)

    def test_lab_counters_between_batches_follow_the_labs_line(self):
        r = row("kernel", MAP_VEC, 1.0, counters(launches=1, dram_bytes=2560),
                [counters(launches=1, dram_bytes=10), counters(launches=1, dram_bytes=20),
                 counters(launches=1, dram_bytes=40)])
        self.assertEqual(klc.lab_counters_at(r, 2, [1, 2, 4], 256)["dram_bytes"], 20)
        self.assertEqual(klc.lab_counters_at(r, 8, [1, 2, 4], 256)["dram_bytes"], 80)  # 40 + (8 - 4) * 10
        self.assertEqual(klc.lab_counters_at(r, 256, [1, 2, 4], 256)["dram_bytes"], 2560)

    def test_without_a_report_every_kernel_is_the_gpus_alone(self):
        res = klc.compare(None, self.trace)
        self.assertEqual(sorted(res["device_only"]), ["channel_finalize", "map_vec<__nv_bfloat16,BinaryFwd<Add,float>>",
                                                      "random_kernel<(Dist)0,float>", "relu_kernel<float>"])
        self.assertEqual(res["lab_only"], [])
        self.assertIn("no lab report", klc.markdown(res))

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_command_line(self):
        md, js = os.path.join(self.dir.name, "out.md"), os.path.join(self.dir.name, "out.json")
        p = self.run_script("--report", self.report, "--trace", self.trace, "--ncu", self.ncu, "--ncu-batch", "4",
                            "--batch", "256", "--md", md, "--json", js)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(js, encoding="utf-8") as f:
            res = json.load(f)
        self.assertEqual(res["format"], "ringtape kernel lab comparison 1")
        with open(md, encoding="utf-8") as f:
            self.assertEqual(f.read(), res["markdown"])
        self.assertIn("only in the lab: `fill_kernel<float>`", res["markdown"])
        self.assertIn("only on the GPU: `relu_kernel<float>`", res["markdown"])

    def test_ncu_metrics_are_one_comma_separated_line(self):
        p = self.run_script("--ncu-metrics")
        self.assertEqual(p.returncode, 0)
        metrics = p.stdout.strip().split(",")
        self.assertEqual(len(metrics), len(klc.NCU_METRICS))
        self.assertIn("dram__bytes_read.sum", metrics)

    def test_bad_inputs_say_what_and_how(self):
        p = self.run_script("--trace", os.path.join(self.dir.name, "missing.json"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot read the profiler's trace", p.stderr)
        self.assertIn("--profile-steps", p.stderr)
        p = self.run_script("--trace", self.trace, "--report", self.trace)
        self.assertEqual(p.returncode, 1)
        self.assertIn("is not a kernel lab report", p.stderr)
        self.assertIn("bench/run_kernel_lab.sh", p.stderr)
        empty = self.write("empty.csv", "==PROF== No kernels were profiled.\n")
        p = self.run_script("--trace", self.trace, "--ncu", empty, "--ncu-batch", "4")
        self.assertEqual(p.returncode, 1)
        self.assertIn("ncu profiled nothing", p.stderr)
        self.assertEqual(self.run_script("--ncu", self.ncu).returncode, 2)  # no --trace


if __name__ == "__main__":
    unittest.main()
