#!/usr/bin/env bash
# nebula-bench comm at NP ranks: every algorithm 0 wrong elements at every size,
# a JSON file with one row per (size, algorithm: ompi, mpi, flat, hier, ring, auto), a CSV header, a placement table;
# the JSON file and the tuning table carry the run's provenance (NP ranks; docs/benchmarks.md#provenance).
# usage: test_bench_comm.sh NP [RANKS_PER_NODE]
. "$(dirname "$0")/lib.sh"
np=${1:?NP}
rpn=${2:-0}
args=(comm --ranks-per-node "$rpn" --algo all --min-bytes 8 --max-bytes 4M --factor 4 --rounds 1 --iters 2
      --warmup 1 --out "$tmp/out.json" --save-tune "$tmp/tune.json")
expect "bench comm at $np ranks reports 0 wrong" 0 "# 0 wrong elements in 60 rows" -- $MPIRUN -np "$np" $BENCH "${args[@]}"
rows=$(/usr/bin/python3 -c "import json,sys; d=json.load(open('$tmp/out.json')); print(len(d['rows']), sum(r['wrong'] for r in d['rows']), d['world_size'])")
if [ "$rows" = "60 0 $np" ]; then echo "ok - JSON has 60 rows, 0 wrong, world $np"; else echo "FAIL - JSON: $rows"; fails=$((fails+1)); fi
$PY validation/cli/provenance_check.py --ranks "$np" "$tmp/out.json" "$tmp/tune.json" || fails=$((fails + 1))
expect "tuning table reloads" 0 "# 0 wrong elements" -- \
    $MPIRUN -np "$np" $BENCH comm --ranks-per-node "$rpn" --algo auto --max-bytes 64K --factor 8 --rounds 1 --iters 1 --tune-file "$tmp/tune.json"
expect "csv output has a header" 0 "size,count,type,algo,time_us" -- \
    $MPIRUN -np "$np" $BENCH comm --ranks-per-node "$rpn" --algo flat --max-bytes 1K --rounds 1 --iters 1 --csv
json_ok=$($MPIRUN -np "$np" $BENCH comm --ranks-per-node "$rpn" --algo hier --max-bytes 1K --factor 8 --rounds 1 --iters 1 --json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(len(d['rows']))")
if [ "$json_ok" = "6" ]; then echo "ok - --json prints parseable JSON alone on stdout"; else echo "FAIL - --json: '$json_ok'"; fails=$((fails+1)); fi
for dt in double int32 int64; do
    expect "dtype $dt exact" 0 "# 0 wrong elements" -- \
        $MPIRUN -np "$np" $BENCH comm --ranks-per-node "$rpn" --dtype $dt --max-bytes 1M --factor 32 --rounds 1 --iters 1
done
finish
