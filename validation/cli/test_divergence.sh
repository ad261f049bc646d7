#!/usr/bin/env bash
# test_divergence — a run whose numbers stop being finite ends as diverged, on every family:
#   - gpt2-tiny (AdamW, and SGD), bert-tiny and resnet18-cifar at optim.lr = 1000 without
#     clipping, the divergence guard's rollback off (monitor.nonfinite_action = log; the
#     guard is test_monitor's), exit 1 saying the run diverged, naming the last committed checkpoint and a
#     HINT: after train.max_skipped_steps = 2 skipped steps (a NaN loss, or ResNet's
#     running statistics overflowing) the third, or at once when an update overflows
#     (AdamW's second moment); never an internal CHECK or MPI_Abort; each skip line names
#     the step its metrics line has, and metrics.jsonl holds the events: a skipped record
#     per skip, one diverged record, the checkpoints;
#   - every checkpoint the runs committed holds finite values only (ResNet's batch-norm
#     running statistics included: a skipped step leaves them as they were) and passes
#     nebula-ckpt verify;
#   - under DGC-Pro the skip comes before the exchange: the residuals stay finite;
#   - a checkpoint whose parameters hold a NaN (its checksum made to match) fails verify
#     naming the tensor and the count, and nebula-train refuses to resume it (exit 2,
#     naming the tensor) instead of training on it.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
TRAIN=build/bin/nebula-train
CK=build/bin/nebula-ckpt

# diverge NAME MODEL [ARG...]: a run that diverges within a few steps; output in
# $tmp/NAME.log (one process without mpirun, stdout line-buffered: lines in the order written)
diverge() {
    local name=$1 model=$2
    shift 2
    timeout 120 stdbuf -oL $TRAIN --model "$model" "$@" --set train.micro_batch=2 --steps 40 --lr 1000 \
        --set optim.schedule=constant --set optim.warmup_steps=0 --set train.max_grad_norm=0 --set train.threads=1 \
        --set runtime.bind=none --set train.log_interval=1 --set ckpt.every_steps=2 --set train.max_skipped_steps=2 \
        --set monitor.nonfinite_action=log \
        --run-dir "$tmp/$name" >"$tmp/$name.log" 2>&1 </dev/null
}

# all_finite RUN_DIR: every float dataset of every committed checkpoint is finite
all_finite() {
    $PY - "$1" <<'PY'
import glob, os, sys
import h5py, numpy as np
bad = []
for d in sorted(glob.glob(sys.argv[1] + "/ckpt/step_*")):
    if not os.path.exists(d + "/COMMITTED"): continue
    with h5py.File(d + "/state.h5", "r") as f:
        f.visititems(lambda n, o: bad.append(d + ":" + n) if isinstance(o, h5py.Dataset) and o.dtype == np.float32
                     and not np.isfinite(o[()]).all() else None)
print("    non-finite:", bad[:4] or "none")
sys.exit(1 if bad else 0)
PY
}

# skip_steps_named LOG: each "step N: ... skipped" line comes right before its own step=N line
skip_steps_named() {
    awk '/the step is skipped/ { sub(/^.*error: step /, ""); want = $1 + 0; next }
         want && /^step=/ { split($1, a, "="); if (a[2] + 0 != want) bad = 1; want = 0; seen = 1 }
         END { exit !(seen && !bad) }' "$1"
}

# The three ways a run diverges: AdamW's second moment overflows (the update's check),
# the loss turns NaN (SGD: skipped steps), ResNet's running statistics overflow (skipped).
for m in gpt2-tiny gpt2-tiny-sgd bert-tiny resnet18-cifar; do
    case $m in
        gpt2-tiny-sgd) diverge "$m" gpt2-tiny --set optim.name=sgd ;;
        *) diverge "$m" "$m" ;;
    esac
    rc=$?
    log=$tmp/$m.log
    if [ "$rc" -eq 1 ] && grep -q "the run diverged" "$log" && grep -q "HINT: the last committed checkpoint is step" "$log"; then
        echo "ok - $m: divergence ends the run, exit 1, naming the last committed checkpoint"
    else
        echo "FAIL - $m: exit $rc, expected 1 and 'the run diverged'"; tail -5 "$log" | sed 's/^/    /'; fails=$((fails + 1))
    fi
    check "$m: no internal CHECK or MPI_Abort" bash -c "! grep -qE 'condition is false|MPI_ABORT' '$log'"
    [ "$m" = gpt2-tiny-sgd ] || [ "$m" = resnet18-cifar ] && check "$m: each skip line names the step of its metrics line" skip_steps_named "$log"
    [ "$m" = gpt2-tiny-sgd ] && check "$m: metrics.jsonl holds a skipped record per skip line, then one diverged record, and checkpoints" \
        $PY -c '
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
log = open(sys.argv[2]).read()
logged = [int(n) for n in re.findall(r"error: step (\d+): .*the step is skipped", log)]
skipped = [r["step"] for r in recs if r["kind"] == "skipped" and r["reason"] and r["in_a_row"] >= 1]
div = [r for r in recs if r["kind"] == "diverged"]
ck = [r["step"] for r in recs if r["kind"] == "checkpoint"]
sys.exit(not (logged and skipped == logged and len(div) == 1 and "in a row skipped" in div[0]["reason"]
              and ck and all(s % 2 == 0 for s in ck)))' "$tmp/$m" "$log"
    check "$m: every committed checkpoint is finite (BN statistics included)" all_finite "$tmp/$m"
    last=$(ls -d "$tmp/$m"/ckpt/step_* 2>/dev/null | tail -1)
    expect "$m: nebula-ckpt verify passes the last checkpoint" 0 "ok" -- $CK verify "$last"
    [ "$m" = gpt2-tiny ] && gpt2_last=$last
done

# DGC-Pro (2 ranks on 2 virtual nodes): the skip is decided before the exchange, so the
# residuals a skipped step would have absorbed stay finite
timeout 120 $MPIRUN -np 2 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 40 --set dgc.mode=on \
    --ranks-per-node 1 --set optim.name=sgd --lr 1000 --set optim.schedule=constant --set optim.warmup_steps=0 \
    --set train.max_grad_norm=0 --set train.threads=1 --set runtime.bind=none --set train.log_interval=1 \
    --set train.max_skipped_steps=2 --run-dir "$tmp/dgc" >"$tmp/dgc.log" 2>&1 </dev/null
rc=$?
check "DGC-Pro: divergence exits 1 (got $rc), the skips found before the exchange" \
    bash -c "[ $rc -eq 1 ] && grep -q 'found before DGC-Pro' '$tmp/dgc.log' && grep -q 'the run diverged' '$tmp/dgc.log'"
check "DGC-Pro: the residuals stay finite through the skipped steps" \
    bash -c "grep -q 'residual=' '$tmp/dgc.log' && ! grep -qiE 'residual=-?(nan|inf)' '$tmp/dgc.log'"

# Evaluation of a diverged model (SGD, the licence corpus, an evaluation every step): its
# loss and perplexity become null in metrics.jsonl with their keys kept, and every line of
# the file is one JSON object (JSON has no NaN; a blank or torn line would break readers).
licenses_data
diverge eval gpt2-tiny --set optim.name=sgd --set data.train="$data/train.bin" --set data.val="$data/val.bin" \
    --set train.eval_interval=1 --set train.eval_batches=1 --set train.max_skipped_steps=1
check "eval of a diverged model: loss and ppl are null with their keys kept and listed in nonfinite, every line strict JSON" $PY -c '
import json, sys
def refuse(c): raise ValueError(c)
recs = [json.loads(l, parse_constant=refuse) for l in open(sys.argv[1])]
ev = [r for r in recs if r.get("kind") == "eval"]
sys.exit(not (ev and any(r["loss"] is None and r["ppl"] is None and {"loss", "ppl"} <= set(r["nonfinite"])
                         for r in ev)))' "$tmp/eval/metrics.jsonl"

# A checkpoint of a run that had diverged: a NaN in h.0.attn.c_attn.weight, its checksum
# made to match (as a writer without the check would have written it).
nan=$tmp/nan/ckpt/$(basename "$gpt2_last")
mkdir -p "$tmp/nan/ckpt" && cp -r "$gpt2_last" "$nan"
$PY - "$nan/state.h5" <<'PY'
import sys, zlib
import h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/params/h.0.attn.c_attn.weight"]
    a = d[()]
    a.flat[5] = np.nan
    a.flat[9] = np.inf
    d[...] = a
    d.attrs["checksum"] = np.uint32(zlib.crc32(a.tobytes()) & 0xFFFFFFFF)
PY
expect "verify fails on NaN parameters, naming the tensor and the count" 1 \
    "/params/h.0.attn.c_attn.weight: holds 2 NaN or Inf value(s)" -- $CK verify "$nan"
expect "resuming NaN parameters is refused, exit 2, naming the tensor" 2 \
    "h.0.attn.c_attn.weight holds 2 NaN or Inf value(s)" -- \
    timeout 60 $TRAIN --model gpt2-tiny --set train.micro_batch=2 --steps 1000 --set train.threads=1 \
    --set runtime.bind=none --run-dir "$tmp/nan" --resume "$nan"
finish
