#!/usr/bin/env python3
"""tools/check_kernel_headers.py on synthetic trees: each rule of Note [Kernel headers] is
reported when broken, and a tree that keeps them passes."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_kernel_headers as ckh  # noqa: E402


def run(tree):
    return ckh.check(sorted(tree), lambda p: tree[p])


GOOD = {
    "kernels/cuda/BUILD": "",
    "kernels/cuda/softmax.h": "// y = softmax(x)\nvoid softmax(int n, const float* x, float* y);\n",
    "kernels/cuda/common.cuh": "__device__ float warp_sum(float v);\n",
    "kernels/cuda/softmax.cu": '#include "kernels/cuda/common.cuh"\n__global__ void k() {}\n',
    "kernels/cuda/plan.h": "#define RT_HD __host__ __device__\nRT_HD inline int f() { return 1; }  // __global__ in a comment\n",
    "kernels/cuda/plan.cc": '#include "kernels/cuda/plan.h"\n',
    "engine/ops/softmax.cc": '#include "kernels/cuda/softmax.h"\n',
    "tests/cuda_emu/planted.cu": '#include "kernels/cuda/common.cuh"\n',
    "tests/cuda/softmax_test.cc": '#include "kernels/cuda/common.cuh"\n',
}


class CheckKernelHeadersTest(unittest.TestCase):
    def test_a_tree_that_keeps_the_rules_passes(self):
        self.assertEqual(run(GOOD), [])

    def test_a_room_above_including_a_cuh_is_named(self):
        tree = dict(GOOD)
        tree["engine/ops/softmax.cc"] = '#include <x>\n#include "kernels/cuda/common.cuh"\n'
        problems = run(tree)
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("engine/ops/softmax.cc:2: includes kernels/cuda/common.cuh"))

    def test_device_code_in_a_host_header_is_named(self):
        for code in ("__global__ void k();", "__device__ float f();", "  RT_LAUNCH(1, 1, 0, s, k)(n);",
                     "k<<<1, 1>>>();", "__shared__ float tile[32];"):
            tree = dict(GOOD)
            tree["kernels/cuda/softmax.h"] = "#pragma once\n" + code + "\n"
            problems = run(tree)
            self.assertEqual(len(problems), 1, code)
            self.assertIn("kernels/cuda/softmax.h:2: device code in a host header", problems[0])

    def test_a_cu_file_outside_the_room_is_named(self):
        tree = dict(GOOD)
        tree["distributed/reduce_kernel.cu"] = "__global__ void k() {}\n"
        problems = run(tree)
        self.assertEqual(len(problems), 1)
        self.assertIn("distributed/reduce_kernel.cu:1: a .cu file outside kernels/cuda", problems[0])

    def test_another_kind_of_file_in_the_room_is_named(self):
        tree = dict(GOOD)
        tree["kernels/cuda/notes.txt"] = "x\n"
        self.assertEqual(len(run(tree)), 1)


if __name__ == "__main__":
    unittest.main()
