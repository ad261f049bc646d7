#!/usr/bin/env bash
# Heterogeneous ranks (sched.mode, libcore/train/control/sched.c): gpt2-tiny on the licence-text
# corpus, 4 ranks as 2 virtual nodes x 2, global batch 16, micro-batch 4, 20 steps:
#   - static shares 3,3,1,1 (6,6,2,2 samples: the slow ranks run one partial micro-batch of
#     2) match uniform data parallelism (4 each) within 1e-5 relative at every step, and
#     the final parameters within rel_L2 1e-3 (the derivation of test_hybrid.sh: the same
#     products summed in another order, AdamW's normalisation growing the roundings);
#     equal shares (1,1,1,1) are uniform data parallelism bit for bit;
#   - balanced mode with rank 3 slowed (runtime.slowdown, 200 ms before each step's first
#     forward, several times the step) measures the speeds every 5 steps and gives rank 3
#     less than an equal share but at least sched.min_share of one (1 of 4 samples); its
#     losses match uniform within 1e-5;
#   - balanced mode on 2 fast + 2 slow ranks for real (cgroup CPU quotas 50,50,20,20 where
#     root can set them): losses within 1e-5 of uniform;
#   - performance mode, rank 3 slowed the same way: the predicted step (fixed time + share /
#     forward-backward rate per rank, water-filled) cannot be shortened by giving rank 3
#     work, so it is held at the floor, 1 sample (no starvation: sched.min_share = 0.1 of an
#     equal share of 4), and the log says why; with sched.min_share = 0 it is excluded (0
#     samples: its zero gradient still joins the sum); losses within 1e-5 of uniform;
#   - economy mode, costs 4,4,1,1 and a target the cheapest rank reaches alone: the two
#     expensive ranks are held at the floor; an unreachable target is said;
#   - resume: static runs stopped at 10 and resumed to 20 are bit-identical to the straight
#     run; a balanced run resumed at 10 takes the checkpoint's shares (assigned at step 10)
#     and its steps 11-15, until it measures anew, are the straight run's bit for bit;
#   - bad configs exit 2 naming the key: shares of the wrong count or sign, an unknown mode,
#     sched with a pipeline. (Shares are weights: they always apportion the global batch.)
. "$(dirname "$0")/lib.sh"
CKPT=build/bin/nebula-ckpt
licenses_data

run() {
    local dir=$1
    shift
    licenses_run "$dir" 4 --ranks-per-node 2 --set ckpt.every_steps=10 --set train.global_batch=16 \
        --set train.micro_batch=4 "$@"
}

# close_params A B: every parameter tensor of two checkpoints within rel_L2 1e-3
close_params() {
    $CKPT diff "$1" "$2" --json >"$tmp/diff.json" 2>/dev/null
    $PY - "$tmp/diff.json" <<'PY'
import json, sys
d = [x for x in json.load(open(sys.argv[1]))["datasets"] if x["name"].startswith("/params/")]
worst = max((x.get("rel_l2") or 0.0) for x in d)
print(f"    {len(d)} parameter tensors, worst rel_L2 {worst:.2e}")
sys.exit(0 if d and worst <= 1e-3 else 1)
PY
}

run "$tmp/u" --steps 20
check "uniform data parallelism, 4 x 4 samples, trains 20 steps" test -s "$tmp/u/metrics.jsonl"
run "$tmp/s" --steps 20 --set sched.mode=static --set sched.shares=3,3,1,1
check "static shares 3,3,1,1 are 6,6,2,2 samples" grep -q "shares of the global batch 16: 6,6,2,2" "$tmp/s.log"
check "static 6,6,2,2: losses within 1e-5 of uniform at every step" same_losses "$tmp/u" "$tmp/s"
check "static 6,6,2,2: final parameters within rel_L2 1e-3 of uniform" \
    close_params "$tmp/u/ckpt/step_00000020" "$tmp/s/ckpt/step_00000020"
run "$tmp/e" --steps 20 --set sched.mode=static --set sched.shares=1,1,1,1
check "equal shares: uniform data parallelism bit for bit" same_losses "$tmp/u" "$tmp/e" 1 exact

BAL=(--set sched.mode=balanced --set sched.interval=5 --set runtime.slowdown=3:200)
run "$tmp/b" --steps 20 "${BAL[@]}" --set device.precision=auto
grep "^sched:" "$tmp/b.log" | sed 's/^/    /'
check "balanced: rank 3 (slowed) gets less than an equal share, at least min_share of one" $PY - "$tmp/b.log" <<'PY'
import re, sys
rows = [list(map(int, m.group(1).split(","))) for m in re.finditer(r"step (?:5|10|15|20): shares of the global batch 16: ([\d,]+)", open(sys.argv[1]).read())]
sys.exit(0 if rows and all(sum(r) == 16 and 1 <= r[3] < 4 for r in rows) else 1)
PY
check "balanced: losses within 1e-5 of uniform at every step" same_losses "$tmp/u" "$tmp/b"
check "device.precision = auto: each of the 4 CPU ranks prints its device, fp32" \
    test "$(grep -cE '^sched: rank [0-3]: .*cpu .*, fp32$' "$tmp/b.log")" -eq 4
check "balanced: metrics.jsonl has a sched record per change, its shares those of the log" $PY - "$tmp/b" <<'PY'
import json, re, sys
recs = [j for j in map(json.loads, open(sys.argv[1] + "/metrics.jsonl")) if j["kind"] == "sched"]
logged = {int(s): list(map(int, c.split(","))) for s, c in re.findall(r"sched: step (\d+): shares of the global batch 16: ([\d,]+)", open(sys.argv[1] + ".log").read())}
sys.exit(0 if recs and all(logged.get(j["step"]) == j["shares"] and j["mode"] == "balanced" for j in recs) else 1)
PY

# 2 fast + 2 slow ranks for real: ranks 2 and 3 capped at 20% of a CPU, 0 and 1 at 50%
# (tools/cpu-quota, root and a writable cgroup CPU controller; skipped otherwise)
if [ "$(id -u)" -eq 0 ] && tools/cpu-quota --check >/dev/null 2>&1; then
    export NEBULA_QUOTA_TAG=sched$$
    $MPIRUN -np 4 --bind-to none tools/cpu-quota 50,50,20,20 -- build/bin/nebula-train \
        --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/q" --ranks-per-node 2 --set data.train="$data/train.bin" \
        --set data.val= --set optim.schedule=constant --set optim.warmup_steps=0 --set train.log_interval=1 \
        --set train.eval_interval=0 --set ckpt.every_steps=10 --set train.global_batch=16 --set train.micro_batch=4 \
        --set train.threads=1 --steps 20 --set sched.mode=balanced --set sched.interval=5 >"$tmp/q.log" 2>&1 </dev/null
    tools/cpu-quota --cleanup
    grep "^sched: step" "$tmp/q.log" | sed 's/^/    /'
    check "balanced, 2 ranks at 50% and 2 at 20% of a CPU: losses within 1e-5 of uniform at every step" \
        same_losses "$tmp/u" "$tmp/q"
else
    echo "    (no root or no writable cgroup CPU controller: the quota-capped balanced run is not made)"
fi

# shares_at LOG STEP PYEXPR: the shares assigned at STEP (c[0..3]) satisfy PYEXPR
shares_at() {
    $PY - "$1" "$2" "$3" <<'PY'
import re, sys
m = re.search(rf"step {sys.argv[2]}: shares of the global batch 16: ([\d,]+)", open(sys.argv[1]).read())
c = list(map(int, m.group(1).split(","))) if m else None
sys.exit(0 if c and sum(c) == 16 and eval(sys.argv[3]) else 1)
PY
}
run "$tmp/p" --steps 20 --set sched.mode=performance "${BAL[@]:2}"
grep "^sched: step 5" "$tmp/p.log" | sed 's/^/    /'
check "performance: rank 3, slowed by a fixed 200 ms, is held at the floor, exactly 1 sample (min_share 0.1 of 4)" \
    shares_at "$tmp/p.log" 5 "c[3] == 1"
check "performance: the log says why (its fixed time against the others' step)" grep -q "rank 3 held at the floor" "$tmp/p.log"
check "performance: losses within 1e-5 of uniform" same_losses "$tmp/u" "$tmp/p"
run "$tmp/p0" --steps 20 --set sched.mode=performance --set sched.min_share=0 "${BAL[@]:2}"
check "performance with sched.min_share = 0: rank 3 is excluded (0 samples; its zero gradient still joins the sum)" \
    shares_at "$tmp/p0.log" 5 "c[3] == 0"
check "performance, rank 3 excluded: losses within 1e-5 of uniform" same_losses "$tmp/u" "$tmp/p0"
ECO=(--set sched.mode=economy --set sched.interval=5 --set sched.costs=4,4,1,1)
run "$tmp/c" --steps 20 "${ECO[@]}" --set sched.target=1
grep "^sched: step 5" "$tmp/c.log" | sed 's/^/    /'
check "economy: a target the cheapest rank reaches alone: ranks 0 and 1 (cost 4) held at the floor" \
    shares_at "$tmp/c.log" 5 "c[0] == 1 and c[1] == 1 and max(c[2], c[3]) >= 7"
check "economy: losses within 1e-5 of uniform" same_losses "$tmp/u" "$tmp/c"
run "$tmp/c2" --steps 10 "${ECO[@]}" --set sched.target=1e9
check "economy: an unreachable target is said, every rank at work" grep -q "sched.target = 1e+09 samples/s is out of reach" "$tmp/c2.log"

run "$tmp/s2" --steps 10 --set sched.mode=static --set sched.shares=3,3,1,1
run "$tmp/s2" --steps 20 --set sched.mode=static --set sched.shares=3,3,1,1
check "static: stopped at 10, resumed to 20, bit-identical" same_losses "$tmp/s" "$tmp/s2" 11 exact
mkdir -p "$tmp/b2/ckpt" && cp -r "$tmp/b/ckpt/step_00000010" "$tmp/b2/ckpt/" && touch "$tmp/b2/ckpt/step_00000010"
run "$tmp/b2" --steps 15 "${BAL[@]}"
check "balanced: resumed with the checkpoint's shares" grep -q "resumed with the checkpoint's shares (assigned at step 10)" "$tmp/b2.log"
check "balanced: resumed at 10, steps 11-15 bit-identical to the straight run" same_losses "$tmp/b" "$tmp/b2" 11 exact

# the elastic control file: a new grid is refused under sched (the run goes on); a new
# global batch is apportioned again by the same weights
mkdir -p "$tmp/grid" && printf 'tp=2\n' >"$tmp/grid/control"
run "$tmp/grid" --steps 3 --set sched.mode=static --set sched.shares=3,3,1,1
check "a control file's tp=2 under sched.mode: rejected, the run goes on and exits 0" \
    eval '[ $? -eq 0 ] && [ -e "$tmp/grid/control.rejected" ] && grep -q "heterogeneous shares are for data parallelism" "$tmp/grid.log"'
mkdir -p "$tmp/gb" && printf 'global_batch=32\n' >"$tmp/gb/control"
run "$tmp/gb" --steps 3 --set sched.mode=static --set sched.shares=3,3,1,1
check "a control file's global_batch=32: shares 12,12,4,4 from the same weights, the run exits 0" \
    eval '[ $? -eq 0 ] && grep -q "shares of the global batch 32: 12,12,4,4 (the global batch changed)" "$tmp/gb.log"'

# run_out DIR ARGS...: run, then its log on stdout (expect reads the message)
run_out() {
    run "$@"
    local rc=$?
    cat "$1.log"
    return $rc
}
expect "shares of the wrong count" 2 "needs 4 positive numbers" -- run_out "$tmp/x1" --steps 2 --set sched.mode=static --set sched.shares=1,1
expect "a negative share" 2 "sched.shares = '1,1,-1,1'" -- run_out "$tmp/x2" --steps 2 --set sched.mode=static --set sched.shares=1,1,-1,1
expect "an unknown mode" 2 "sched.mode" -- run_out "$tmp/x4" --steps 2 --set sched.mode=fastest
expect "economy without a target" 2 "needs sched.target" -- run_out "$tmp/x6" --steps 2 --set sched.mode=economy
expect "costs of the wrong count" 2 "sched.costs = '1,2'" -- run_out "$tmp/x7" --steps 2 "${ECO[@]::2}" --set sched.costs=1,2 --set sched.target=5
expect "sched with a pipeline" 2 "parallel.tp and parallel.pp must be 1 (or set sched.mode = off)" -- run_out "$tmp/x5" --steps 2 --set sched.mode=balanced --set parallel.pp=2
finish
