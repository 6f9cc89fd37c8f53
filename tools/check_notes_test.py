#!/usr/bin/env python3
"""Tests tools/check_notes.py on small trees written into a temporary directory.

Run from the repository root: python3 tools/check_notes_test.py (CI runs it after the check).
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_notes  # noqa: E402
from tree_fixture import write_tree  # noqa: E402


class CheckNotesTest(unittest.TestCase):
    def run_check(self, files):
        """Writes {path: text} under a fresh directory and checks those files."""
        with tempfile.TemporaryDirectory() as root:
            write_tree(root, files)
            return check_notes.check(root, sorted(files))

    def assert_problem(self, problems, where, words):
        hits = [p for p in problems if p.startswith(where) and words in p]
        self.assertTrue(hits, "no problem at %s with %r in:\n%s" % (where, words, "\n".join(problems)))

    def test_good(self):
        problems, summary = self.run_check({
            "a/x.h": "// Note [Pairs]\n// Every pair is ordered.\nint f();\n",
            "a/x.cc": "int f() { return 0; }  // sorted (Note [Pairs] in a/x.h)\n",
            "BUILD": "# Note [Rules]\n# One rule per file.\ncc_library(name = 'x')  # Note [Pairs]\n",
            "t.py": "x = 1  # as Note [Rules] says\n",
            "README.md": "Pairs are sorted (Note [Pairs]); the syntax is `// Note [Name]`.\n",
        })
        self.assertEqual(problems, [])
        self.assertEqual(summary, "notes: 2 defined, 4 references, all found")

    def test_missing_definition(self):
        problems, _ = self.run_check({
            "x.cc": "// Uses Note [Nowhere] here.\nint x;\n",
        })
        self.assert_problem(problems, "x.cc:1:", "[Nowhere] is referred to (1 times) but never defined")

    def test_duplicate_definition(self):
        problems, _ = self.run_check({
            "a.h": "// Note [Twice]\n// First text.\nint a;\n",
            "b.h": "// Note [Twice]\n// Second text.\nint b;  // see Note [Twice]\n",
        })
        self.assert_problem(problems, "a.h:1:", "[Twice] is defined 2 times")
        self.assert_problem(problems, "b.h:1:", "[Twice] is defined 2 times")

    def test_split_reference(self):
        problems, _ = self.run_check({
            "a.h": "// Note [Split]\n// Text.\nint a;\n",
            "b.cc": "// what it relies on (Note [Split\n// ]) and more.\n"
                    "// and also (Note\n// [Split]) here.\nint b;\n",
        })
        self.assert_problem(problems, "b.cc:1:", "split across lines")
        self.assert_problem(problems, "b.cc:3:", "split across lines")

    def test_unreferenced_note(self):
        problems, _ = self.run_check({
            "a.h": "// Note [Alone]\n// Nobody refers to this.\nint a;\n",
        })
        self.assert_problem(problems, "a.h:1:", "[Alone] is defined but never referred to")

    def test_old_forms(self):
        problems, _ = self.run_check({
            "a.h": "// Note [Old]: the text on the name's line.\nint a;\n",
            "b.h": "// Note [New]\n\nint b;\n//   (Note [New]).\n",
        })
        self.assert_problem(problems, "a.h:1:", "followed by ':'")
        self.assert_problem(problems, "a.h:1:", "never defined")
        self.assert_problem(problems, "b.h:1:", "no comment text on the next line")
        self.assert_problem(problems, "b.h:4:", "alone on its comment line")

    def test_markdown_defines_nothing(self):
        problems, _ = self.run_check({
            "docs/x.md": "# Note [Doc]\n\nText.\n\n```cpp\n// Note [Code]\n```\n",
            "x.cc": "int x;  // Note [Doc]\n",
        })
        self.assert_problem(problems, "docs/x.md:1:", "defined in Markdown")
        self.assert_problem(problems, "x.cc:1:", "[Doc] is referred to (1 times) but never defined")
        self.assertFalse([p for p in problems if "[Code]" in p], "\n".join(problems))

    def test_paths_outside_the_repository(self):
        problems, _ = self.run_check({
            "a.h": "// See ../shared/reference/x/NOTES.md.\nint a;\n",
            "docs/b.md": "As shared/conventions/NUMERICS.md says.\n",
            "data.txt": "nothing outside\n",
        })
        self.assert_problem(problems, "a.h:1:", "outside the repository")
        self.assert_problem(problems, "docs/b.md:1:", "outside the repository")
        self.assertFalse([p for p in problems if p.startswith("data.txt")])

    def test_skipped_and_unscanned_files(self):
        problems, summary = self.run_check({
            "tools/check_notes.py": "# Note [Example]\n# An example in the checker's docstring.\n",
            "third_party/x/y.h": "// Note [Vendored]: not ours.\n",
            "notes.txt": "Note [Free text] is not a source file.\n",
        })
        self.assertEqual(problems, [])
        self.assertEqual(summary, "notes: 0 defined, 0 references, all found")


if __name__ == "__main__":
    unittest.main()
