#!/usr/bin/env bash
# nebula-bench table dgc at the smallest scale: gpt2-tiny, 4 network namespaces, links
# limited to 20 Mbit/s, 4 steps: one CSV row per (model, link) whose step times and losses
# are numbers, where DGC-Pro sent less than the dense ring (gpt2-tiny's tensors under
# dgc.min_numel go dense: about 3x less) and the rate limit took effect (a ring allreduce of
# gpt2-tiny's 0.48 MB sends 0.72 MB per rank: at least 0.29 s a step at 20 Mbit/s); the CSV's
# first line is its provenance, naming the 4 namespaces as 4 hosts of one rank each; bad
# arguments exit 2 naming the argument. The speedup is printed to 0.01 from the unrounded
# times, the times to 1 ms: it matches their ratio within 0.005 + 0.5/g + 0.5 d/g^2.
. "$(dirname "$0")/lib.sh"
expect "table dgc: a bad rate is named" 2 "bad rate '5gbps'" -- $BENCH table dgc --rates 5gbps
expect "table dgc: an unknown model is named" 2 "unknown model 'gpt3'" -- $BENCH table dgc --models gpt3
expect "table dgc: too few steps" 2 "--steps must be an integer >= 3" -- $BENCH table dgc --steps 2
expect "table: only dgc, edge, fed, hetero, hybrid, models, privacy and versioning" 2 "expected 'table dgc', 'table edge', 'table fed', 'table hetero', 'table hybrid', 'table models', 'table privacy' or 'table versioning'" -- $BENCH table comm
if [ "$(id -u)" -ne 0 ]; then
    expect "table dgc without root says it skipped" 0 "skipped" -- $BENCH table dgc --models gpt2-tiny
    finish; exit
fi
export NEBULA_NETNS_PREFIX=nbltest  # its own namespaces
$BENCH table dgc --models gpt2-tiny --rates 20mbit --steps 4 --csv >"$tmp/dgc.csv" 2>"$tmp/dgc.err"
out=$(cat "$tmp/dgc.csv" "$tmp/dgc.err")
$PY validation/cli/provenance_check.py --ranks 4 --hosts 4 "$tmp/dgc.csv" || fails=$((fails + 1))
row=$(grep '^gpt2-tiny,' <<<"$out")
if /usr/bin/python3 - "$row" <<'PYEOF'
import csv, sys
f = next(csv.reader([sys.argv[1]]))
model, params, link, dms, gms, speed, dloss, gloss, red = f[:9]
ok = (model == "gpt2-tiny" and int(params) == 120576 and link == "20mbit" and float(dms) > 290 and float(gms) > 0
      and abs(float(speed) - float(dms) / float(gms)) <= 0.005 + 0.5 / float(gms) + 0.5 * float(dms) / float(gms) ** 2 and 0 < float(dloss) < 10 and 0 < float(gloss) < 10
      and float(red) > 2 and len(f) == 10 and "median of 1" in f[9])
sys.exit(0 if ok else 1)
PYEOF
then echo "ok - table dgc: a gpt2-tiny row at 20mbit: $row"
else echo "FAIL - table dgc: row '$row'"; echo "$out" | tail -8; fails=$((fails + 1)); fi
check_clean=$(ip netns list 2>/dev/null | grep -c '^nbltest_' || true)
if [ "$check_clean" = 0 ]; then echo "ok - table dgc removed its namespaces"; else echo "FAIL - namespaces left behind"; fails=$((fails + 1)); fi
finish
