#!/usr/bin/env bash
# nebula-bench table hetero at a small scale: GPT-2 tiny of 2 blocks of 128, global batch
# 32, 10 steps measured every 3, 4 ranks capped at 50/50/20/20% of a CPU by cgroups of their
# own (tools/cpu-quota), one run per mode: one CSV row per mode whose times are numbers, the
# uniform row at ratio 1; the balanced and performance rows end with shares that sum to the
# global batch and give each capped rank (2, 3) less than each full one (0, 1) — the
# quotas' 2.5 : 1 speed ratio, measured by the scheduler itself, not a timing this test
# asserts; the first line is the provenance (4 ranks on 1 host); no cgroup is left behind;
# tools/cpu-quota caps a rank (a busy loop's CPU time at 20% is at most a third of its wall
# time); bad arguments exit 2 naming the argument.
. "$(dirname "$0")/lib.sh"
expect "table hetero: bad quotas are named" 2 "--quotas must be 4 comma-separated percentages" -- $BENCH table hetero --quotas 50,50
expect "table hetero: an unknown mode is named" 2 "unknown mode 'fastest'" -- $BENCH table hetero --modes fastest
expect "table hetero: too few steps" 2 "--steps must exceed 2 x --interval" -- $BENCH table hetero --steps 4 --interval 2
expect "cpu-quota without a command" 2 "no command given" -- tools/cpu-quota 50
if [ "$(id -u)" -ne 0 ] || ! tools/cpu-quota --check >/dev/null 2>&1; then
    expect "table hetero without root or cgroups says it skipped" 0 "skipped" -- $BENCH table hetero
    echo "SKIP: needs root and a writable cgroup CPU controller for the rest"
    finish; exit 77
fi
export NEBULA_QUOTA_TAG=qtest$$
check "cpu-quota caps a rank: a busy second at 20% of a CPU uses at most a third of its wall time in CPU" \
    $PY - <<'PY'
import os, subprocess, sys, time
t0 = time.time()
out = subprocess.run(["tools/cpu-quota", "20", "--", "/usr/bin/python3", "-c",
                      "import time, os\nt = time.time()\nwhile time.time() - t < 1.0: pass\nprint(os.times().user + os.times().system)"],
                     capture_output=True, text=True, check=True).stdout
cpu, wall = float(out), time.time() - t0
print(f"    {cpu:.2f} s CPU in {wall:.2f} s")
sys.exit(0 if cpu <= wall / 3 else 1)
PY
tools/cpu-quota --cleanup
$BENCH table hetero --steps 10 --interval 3 --reps 1 --layers 2 --width 128 --global-batch 32 --csv \
    >"$tmp/h.csv" 2>"$tmp/h.err"
echo "    rc $?: $(tail -3 "$tmp/h.err")"
sed 's/^/    /' "$tmp/h.csv"
$PY validation/cli/provenance_check.py --ranks 4 --hosts 1 "$tmp/h.csv" || fails=$((fails + 1))
check "table hetero: a uniform row at ratio 1 and balanced and performance rows, the capped ranks with the smaller shares" \
    $PY - "$tmp/h.csv" <<'PY'
import csv, sys
rows = {r["mode"]: r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#"))}
u = rows["uniform (sched.mode = off)"]
ok = float(u["vs_uniform"]) == 1 and float(u["time_to_samples_s"]) > 0 and u["final_shares"] == "uniform"
for m in ("balanced", "performance"):
    s = list(map(int, rows[m]["final_shares"].split("/")))
    ok = ok and sum(s) == 32 and max(s[2], s[3]) < min(s[0], s[1]) and min(s) >= 1 and float(rows[m]["steady_ms_per_step"]) > 0
sys.exit(0 if ok else 1)
PY
check "table hetero removed its cgroups" test -z "$(ls -d /sys/fs/cgroup/cpu/nebula-quota-* /sys/fs/cgroup/nebula-quota-* 2>/dev/null)"
finish
