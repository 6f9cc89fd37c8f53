#!/usr/bin/env bash
# The example binary trains, resumes and evaluates the model registered in tiny_convnet.cc, and
# trains it on the dataset registered in levels_dataset.cc.
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

# The registered dataset: offered by --dataset, checked like the other generated one, learnt.
grep -q "tensors, levels)" <<<"$help" || fail "--dataset does not list levels"
set +e
bad=$("$bin" train --dataset levels --synthetic-size 0x1x8x8 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--synthetic-size must be" <<<"$bad" || fail "--synthetic-size 0x1x8x8 not refused: $bad"
"$bin" train --model tiny_convnet --dataset levels --synthetic-size 256x1x8x8 --width 4 --batch-size 16 --workers 0 \
  --device cpu --epochs 3 --output-dir "$TEST_TMPDIR/levels" >"$TEST_TMPDIR/levels.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/levels.txt"; fail "training on levels exited $?"; }
# Four classes: chance is 25%; the levels are learnt to 100% in 3 epochs (98.8% after 2).
top1=$(sed -n 's/^epoch 2 eval: .*top-1 \([0-9.]*\)%.*/\1/p' "$TEST_TMPDIR/levels.txt")
[ -n "$top1" ] || { cat "$TEST_TMPDIR/levels.txt"; fail "no evaluation after epoch 3 on levels"; }
awk -v t="$top1" 'BEGIN { exit !(t >= 90) }' || fail "top-1 $top1% on levels after 3 epochs: expected >= 90%"
echo "PASSED"
