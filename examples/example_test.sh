#!/usr/bin/env bash
# The example binary trains, resumes and evaluates the model registered in tiny_convnet.cc.
set -euo pipefail
bin="$TEST_SRCDIR/$TEST_WORKSPACE/examples/ringtape_example"
out="$TEST_TMPDIR/run"
fail() { echo "FAILED: $*" >&2; exit 1; }

help=$("$bin" train --help)
grep -q "tiny_convnet" <<<"$help" || fail "--model does not list tiny_convnet"
common=(--model tiny_convnet --dataset synthetic --synthetic-size 64x1x8x8 --num-classes 4 --width 4
        --batch-size 8 --workers 0 --device cpu)
"$bin" train "${common[@]}" --epochs 1 --steps 3 --print-freq 1 --output-dir "$out" >"$TEST_TMPDIR/train.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/train.txt"; fail "training exited $?"; }
grep -q "model tiny_convnet" "$TEST_TMPDIR/train.txt" || fail "the log does not name the model"
[ -s "$out/model.safetensors" ] || fail "no model.safetensors"
[ "$(grep -c '"type":"train"' "$out/metrics.jsonl")" -eq 3 ] || fail "expected 3 training records"
# The user's layer names its parameters: stage1.conv.weight, stage1.bn.running_var, fc.bias.
for key in stage1.conv.weight stage1.bn.running_var stage3.bn.weight fc.bias; do
  grep -aq "$key" "$out/model.safetensors" || fail "model.safetensors has no $key"
done
"$bin" train "${common[@]}" --epochs 1 --resume "$out/checkpoint.safetensors" >"$TEST_TMPDIR/resume.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/resume.txt"; fail "resuming exited $?"; }
[ "$(grep -c '"type":"eval"' "$out/metrics.jsonl")" -eq 1 ] || fail "the resumed run did not evaluate"
"$bin" eval "${common[@]}" --init-weights "$out/model.safetensors" >"$TEST_TMPDIR/eval.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/eval.txt"; fail "eval exited $?"; }
grep -q "top-1" "$TEST_TMPDIR/eval.txt" || fail "eval printed no accuracy"
echo "PASSED"
