"""Writes small source trees for the tools' tests (check_notes_test.py,
check_function_length_test.py), which run their checkers on them.
"""

import os


def write_tree(root, files):
    """Writes {path relative to `root`: text} under `root`, making folders as needed."""
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
