#!/usr/bin/env bash
# nebula-bench table hybrid at the smallest scale: gpt2-tiny (120576 parameters) on 2
# network namespaces x 2 ranks, unshaped, 6 steps of 8 sequences of 16 tokens, as dp4 (the
# hierarchical allreduce) and tp2 x pp2. Checked: one CSV row per layout with numbers;
# the first line is the provenance naming 2 hosts of 2 ranks; both layouts end on the same
# loss (within 1e-5 relative: the same model, summed in another order); the bytes measured
# at the switch are physically right —
#   - dp4 moves at least the gradient both ways between the two nodes per step:
#     2 x 4 x 120576 B = 0.96 MB (a node must receive the other's partial sums; frames add
#     headers, never fewer bytes). The bytes per step are (a 6-step run - a 2-step run) / 4:
#     the start-up traffic of two runs differs by some kB on loaded cores, which a one-step
#     difference (0.97 MB measured against 0.965) does not absorb;
#   - tp2 x pp2 moves only the stage boundary and the tied wte: per step 8 micro-batches x
#     16 x 64 floats each way for each of the 2 tp ranks (131 kB) plus the allreduce of each
#     rank's 128-row wte shard between the two ends (131 kB), 0.26 MB of payload: under half
#     of dp4's (0.27 of its minimum, so headers and the loss's small messages cannot close
#     the gap);
# tp2 x pp2's rank 0 holds <= 0.55 x dp4's parameters, and its bubble is reported beside
# 1F1B's (p - 1) / (m + p - 1) = 1/9; bad arguments exit 2 naming the
# argument; the namespaces are removed.
. "$(dirname "$0")/lib.sh"
expect "table hybrid: an unknown layout is named" 2 "unknown layout 'tp4'" -- $BENCH table hybrid --layouts dp4,tp4
expect "table hybrid: a model the grid does not take is named" 2 "model 'resnet18' trains data-parallel only" -- \
    $BENCH table hybrid --models resnet18
expect "table hybrid: a global batch the layouts cannot split" 2 "--global-batch must be a multiple of 4" -- \
    $BENCH table hybrid --global-batch 6
expect "table hybrid: too few steps" 2 "--steps must be an integer >= 3" -- $BENCH table hybrid --steps 2
expect "table hybrid: a bad rate is named" 2 "bad rate '5gbps'" -- $BENCH table hybrid --rates 5gbps
if [ "$(id -u)" -ne 0 ]; then
    expect "table hybrid without root says it skipped" 0 "skipped" -- $BENCH table hybrid --models gpt2-tiny
    finish; exit
fi
export NEBULA_NETNS_PREFIX=nblhyb  # its own namespaces
$BENCH table hybrid --models gpt2-tiny --rates none --layouts dp4,tp2pp2 --steps 6 --seq-len 16 --global-batch 8 \
    --csv >"$tmp/hybrid.csv" 2>"$tmp/hybrid.err"
cat "$tmp/hybrid.csv" "$tmp/hybrid.err" | sed 's/^/    /' | cut -c1-160
$PY validation/cli/provenance_check.py --ranks 4 --hosts 2 "$tmp/hybrid.csv" || fails=$((fails + 1))
if $PY - "$tmp/hybrid.csv" <<'PYEOF'
import csv, sys
rows = {r["layout"]: r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#"))}
dp, hy = rows["dp4"], rows["tp2pp2"]
f = lambda r, k: float(r[k])
checks = [
    ("a dp4 and a tp2pp2 row of gpt2-tiny, unshaped", set(rows) == {"dp4", "tp2pp2"} and dp["model"] == "gpt2-tiny" and dp["link"] == "none"),
    ("step times and tokens per second are positive", all(f(r, "ms_per_step") > 0 and f(r, "tok_per_s") > 0 for r in rows.values())),
    ("dp4 holds the whole model on rank 0", int(dp["params_floats"]) == 120576),
    ("both layouts end on the same loss", abs(f(dp, "final_loss") - f(hy, "final_loss")) <= 1e-5 * f(dp, "final_loss")),
    ("dp4 moves at least the gradient both ways between the nodes (0.96 MB)", f(dp, "internode_mb_per_step") >= 2 * 4 * 120576 / 1e6),
    ("tp2pp2 moves under half of dp4's bytes", 0 < f(hy, "internode_mb_per_step") < 0.5 * f(dp, "internode_mb_per_step")),
    ("tp2pp2's rank 0 holds <= 0.55 x dp4's parameters", int(hy["params_floats"]) <= 0.55 * int(dp["params_floats"])),
    ("tp2pp2 reports its bubble beside 1F1B's 1/9 (8 micro-batches, 2 stages); dp4 none",
     0 <= f(hy, "bubble") < 1 and hy["bubble_1f1b"] == "0.111" and dp["bubble"] == ""),
    ("each row says how it was measured", all("bytes at the switch" in r["measured"] for r in rows.values())),
]
bad = 0
for what, ok in checks:
    print(("ok - " if ok else "FAIL - ") + "table hybrid: " + what)
    bad += not ok
sys.exit(1 if bad else 0)
PYEOF
then :; else fails=$((fails + 1)); fi
left=$(ip netns list 2>/dev/null | grep -c '^nblhyb_' || true)
if [ "$left" = 0 ]; then echo "ok - table hybrid removed its namespaces"; else echo "FAIL - namespaces left behind"; fails=$((fails + 1)); fi
finish
