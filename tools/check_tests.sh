#!/usr/bin/env bash
# Every test file is some test target's source: a *_test.cc, *_test.sh or *_test.py that no
# cc_test / sh_test / py_test builds would never run, and nothing else would say so. Plain
# tests are found by their folder's glob (Note [Test tags], tests/BUILD); a test with
# dependencies of its own has its rule. tools/check_notes_test.py is run by .ci/run itself.
# Exit 0 when every file is built, 1 naming those that are not, 2 when Bazel cannot answer.
set -uo pipefail
cd "$(dirname "$0")/.."

built=$(bazel query --output=label 'labels(srcs, tests(//...))' 2>/dev/null) || {
  echo "check_tests: bazel query failed" >&2
  exit 2
}
missing=0
while IFS= read -r f; do
  [ "$f" = tools/check_notes_test.py ] && continue
  label="//$(dirname "$f"):$(basename "$f")"
  if ! grep -qxF "$label" <<<"$built"; then
    echo "check_tests: $f is no test target's source: add its rule to $(dirname "$f")/BUILD (or name it *_test.cc in a globbing folder)"
    missing=$((missing + 1))
  fi
done < <(git ls-files '*_test.cc' '*_test.sh' '*_test.py' | grep -v '^third_party/')
if [ "$missing" -gt 0 ]; then
  echo "check_tests: $missing test file(s) not built"
  exit 1
fi
echo "check_tests: every test file is built"
