#!/usr/bin/env python3
"""Tests tools/check_function_length.py on synthetic sources written into a temporary directory.

Run from the repository root: python3 tools/check_function_length_test.py, or
bazel test //tools:check_function_length_test (how CI runs it, in `bazel test //...`).
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_function_length as cfl  # noqa: E402
from tree_fixture import write_tree  # noqa: E402


def body(lines, filler="  x += 1;"):
    """A function whose name and "{" share the first line: `lines` lines long in all."""
    return ["int f%d(int x) {" % lines] + [filler] * (lines - 2) + ["}"]


class CheckFunctionLengthTest(unittest.TestCase):
    def lengths(self, lines):
        return [(line, name, length) for line, name, length in cfl.functions("\n".join(lines) + "\n")]

    def run_check(self, files):
        """Writes {path: text} under a fresh directory and checks those files."""
        with tempfile.TemporaryDirectory() as root:
            write_tree(root, files)
            return cfl.check(root, sorted(files))

    def test_limit_is_inclusive(self):
        text = "\n".join(["namespace a {"] + body(120) + body(121) + ["}  // namespace a"]) + "\n"
        problems, _ = self.run_check({"a/x.cc": text})
        self.assertEqual(problems, ["a/x.cc:122: f121 is 121 lines (limit 120)"])

    def test_count_starts_at_the_name_not_the_template_line(self):
        lines = ["template <typename T>", "[[nodiscard]] T", "g(T x)", "{"] + ["  x += 1;"] * 116 + ["}"]
        self.assertEqual(self.lengths(lines), [(3, "g", 119)])

    def test_braces_in_comments_strings_and_literals(self):
        lines = [
            "int f() {  // a comment with an unmatched {",
            "  /* and a block one }} with { */",
            '  const char* s = "a string with } and {";',
            '  const char* r = R"x(a raw " { string)x";',
            "  char c = '}', d = '{', e = '\\'';",
            "  for (int n = 1'000; n > 0; --n) {  // a digit separator, not a character literal",
            "    c += n;",
            "  }",
            "  return s[0] + r[0] + c + d + e;",
            "}",
            "int g() { return 0; }",
        ]
        self.assertEqual(self.lengths(lines), [(1, "f", 10), (11, "g", 1)])

    def test_preprocessor_lines_are_not_code(self):
        lines = [
            "#define OPEN {",
            "#define BLOCK(x) do { \\",
            "    x; } while (0",
            "int f() {",
            "  return 1;",
            "}",
        ]
        self.assertEqual(self.lengths(lines), [(4, "f", 3)])

    def test_scopes(self):
        lines = [
            'extern "C" {',
            "int c_api(int a) { return a; }",
            "}",
            "namespace rt::x {",
            "namespace {",
            "enum class E { a, b };",
            "const int kTable[] = {1, 2, 3};",
            "}  // namespace",
            "class Foo : public Bar<decltype(make())> {",
            " public:",
            "  Foo(int a, std::vector<int> v = {}) : a_(a), v_{a, 2} {",
            "    auto local = [](int y) {",
            "      return y;",
            "    };",
            "  }",
            "  int get() const override { return a_; }",
            "  bool operator()(int b) const noexcept { return b == a_; }",
            " private:",
            "  int a_;",
            "};",
            "template <>",
            "void gemm<float>(int n) {",
            "}",
            "auto Foo::make() -> std::vector<int> {",
            "  return {};",
            "}",
            "const auto kGlobal = [](int z) {",
            "  return z;",
            "};",
            "}  // namespace rt::x",
        ]
        self.assertEqual(self.lengths(lines), [
            (2, "c_api", 1), (11, "Foo", 5), (16, "get", 1), (17, "operator()", 1), (22, "gemm", 2),
            (24, "Foo::make", 3), (27, "lambda", 3)])

    def test_lambdas_in_a_global_table(self):
        lines = ["const std::vector<Case> kCases = {", '    {"relu", [](int x) {', "       return x;", "     }},",
                 '    {"id", [](int x) { return x; }},', "};"]
        self.assertEqual(self.lengths(lines), [(2, "lambda", 3), (5, "lambda", 1)])

    def test_tests_and_third_party_are_not_product_code(self):
        with tempfile.TemporaryDirectory() as root:
            self.assertEqual(os.system("git init -q %s" % root), 0)
            paths = ("a/x.cc", "tests/a/x_test.cc", "third_party/y/y.h", "bench/b.cc", "a/notes.txt")
            write_tree(root, {path: "int f() { return 0; }\n" for path in paths})
            self.assertEqual(os.system("cd %s && git add -A" % root), 0)
            self.assertEqual(cfl.product_files(root), ["a/x.cc", "bench/b.cc"])

    def test_summary(self):
        problems, summary = self.run_check({"x.cc": "\n".join(body(3) + body(120)) + "\n"})
        self.assertEqual(problems, [])
        self.assertEqual(summary, "functions: 2 scanned, none over 120 lines")


if __name__ == "__main__":
    unittest.main()
