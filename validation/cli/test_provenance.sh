#!/usr/bin/env bash
# Every machine-readable output of the benchmarks carries its provenance
# (docs/benchmarks.md#provenance), every field non-empty and of its type, git_revision the
# build's commit (`git rev-parse HEAD`; "unknown" outside a git checkout), hosts and ranks
# those of the run: nebula-bench comm (--out, --save-tune, --json, --csv) at 3 ranks, model
# (--csv, --json, --dry-run --json) and dgc (--csv, --json) at one, `nebula-bench provenance`
# in its three formats (--command and --param in place of its own), tools/bench-table.py
# (from the runs' provenance, and computed for a file that has none), a 6-second
# nebula-chaos soak (samples.csv, report.json) at 2 ranks and, as root, 4 hosts of the
# namespace cluster; the CSVs still read with csv.DictReader once comment lines are skipped.
. "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
P() { $PY validation/cli/provenance_check.py "$@" || fails=$((fails + 1)); }
quiet() { "$@" >/dev/null 2>&1; }
small=(--algo flat --max-bytes 64 --factor 8 --rounds 1 --iters 1 --warmup 0)

# --- nebula-bench comm, model, dgc ---------------------------------------------------------
$MPIRUN -np 3 $BENCH comm "${small[@]}" --out "$tmp/comm.json" --save-tune "$tmp/tune.json" >/dev/null 2>&1
$MPIRUN -np 3 $BENCH comm "${small[@]}" --json >"$tmp/comm-stdout.json" 2>/dev/null
$MPIRUN -np 3 $BENCH comm "${small[@]}" --csv >"$tmp/comm.csv" 2>/dev/null
P --ranks 3 --hosts 1 "$tmp/comm.json" "$tmp/tune.json" "$tmp/comm-stdout.json" "$tmp/comm.csv"
check "the tuning table with its provenance still loads" quiet $MPIRUN -np 3 $BENCH comm --algo auto --max-bytes 64 \
    --factor 8 --rounds 1 --iters 1 --tune-file "$tmp/tune.json"
tiny=(--model gpt2-tiny --batch 1 --seq 8 --steps 1 --set bench.model_warmup=0 --threads 1)
$BENCH model "${tiny[@]}" --csv >"$tmp/model.csv" 2>/dev/null
$BENCH model "${tiny[@]}" --json >"$tmp/model.jsonl" 2>/dev/null
$BENCH model --model gpt2-tiny --dry-run --json >"$tmp/dry.jsonl" 2>/dev/null
$BENCH dgc --count 65536 --rounds 1 --csv >"$tmp/dgc.csv" 2>/dev/null
$BENCH dgc --count 65536 --rounds 1 --json >"$tmp/dgc.jsonl" 2>/dev/null
P --ranks 1 --hosts 1 "$tmp/model.csv" "$tmp/model.jsonl" "$tmp/dry.jsonl" "$tmp/dgc.csv" "$tmp/dgc.jsonl"
check "the config recorded is the resolved one (bench.batch 1, model.name gpt2-tiny, a default: bench.factor 2)" \
    $PY -c 'import json,sys; c=json.loads(open(sys.argv[1]).readline())["provenance"]["config"]
sys.exit(not (c["bench.batch"] == "1" and c["model.name"] == "gpt2-tiny" and c["bench.factor"] == "2"))' "$tmp/model.jsonl"
check "the command is the one typed" \
    $PY -c 'import json,sys; p=json.loads(open(sys.argv[1]).readline()[len("# provenance: "):])
sys.exit(p["command"] != "build/bin/nebula-bench dgc --count 65536 --rounds 1 --csv")' "$tmp/dgc.csv"

# --- nebula-bench provenance, for the scripts --------------------------------------------------
$MPIRUN -np 2 $BENCH provenance --command "tools/x.sh --a 'b c'" --param a=1 --param b= >"$tmp/p.json" 2>/dev/null
$MPIRUN -np 2 $BENCH provenance --param a=1 --format csv >"$tmp/p.txt" 2>/dev/null
$MPIRUN -np 2 $BENCH provenance --param a=1 --format markdown >"$tmp/p.md" 2>/dev/null
sed -i '1s/^/{"provenance": /; 1s/$/}/' "$tmp/p.json"  # the bare object, as a document for the checker
P --ranks 2 --hosts 1 "$tmp/p.json" "$tmp/p.txt" "$tmp/p.md"
check "--command and --param stand for the script's command line and settings" \
    $PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["provenance"]
sys.exit(not (p["command"] == "tools/x.sh --a '"'b c'"'" and p["config"] == {"a": "1", "b": ""}))' "$tmp/p.json"
expect "provenance: --param without = is refused" 2 "expected KEY=VALUE" -- $BENCH provenance --param novalue
expect "provenance: an unknown format is refused" 2 "expected json, csv or markdown" -- $BENCH provenance --format xml

# --- tools/bench-table.py -----------------------------------------------------------------------
$PY tools/bench-table.py "$tmp/comm.json" "$tmp/comm-stdout.json" >"$tmp/table.md" 2>"$tmp/table.err"
P --ranks 3 --hosts 1 "$tmp/table.md"
check "the table's provenance: its own command and inputs, the runs' sources" \
    $PY -c 'import json,sys; p=json.loads(open(sys.argv[1]).readline()[len("<!-- provenance: "):-4])
sys.exit(not ("bench-table.py" in p["command"] and p["config"]["inputs"].endswith("comm-stdout.json")
              and len(p["sources"]) == 2 and all(s["command"].startswith("build/bin/nebula-bench comm") for s in p["sources"])))' \
    "$tmp/table.md"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); del d["provenance"]; json.dump(d, open(sys.argv[2], "w"))' \
    "$tmp/comm.json" "$tmp/old.json"
$PY tools/bench-table.py "$tmp/old.json" >"$tmp/old.md" 2>/dev/null
P --ranks 1 --hosts 1 "$tmp/old.md"

# --- nebula-chaos soak ----------------------------------------------------------------------------
[ -s build/data/licenses/train.bin ] ||
    build/bin/nebula-train prepare build/data/licenses /usr/share/common-licenses/* >/dev/null
build/bin/nebula-chaos soak --duration 6s --fault-every 60s --sample-every 1s --set scenario.ranks=2 \
    --set soak.faults=kill --out "$tmp/soak" >"$tmp/soak.log" 2>&1
check "a 6-second soak wrote samples.csv and report.json (exit 0 or 1, not 2)" \
    test -s "$tmp/soak/samples.csv" -a -s "$tmp/soak/report.json"
P --ranks 2 --hosts 1 "$tmp/soak/samples.csv" "$tmp/soak/report.json"
check "samples.csv: csv.DictReader over the lines that are not comments reads the samples" \
    $PY -c 'import csv,sys; r=list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
sys.exit(not (len(r) >= 2 and float(r[-1]["step"]) > 0 and "rss_mb" in r[0]))' "$tmp/soak/samples.csv"

# --- several hosts: the namespace cluster (root) ------------------------------------------------------
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
    export NEBULA_NETNS_PREFIX=nblprov
    tools/netns-cluster down >/dev/null 2>&1
    if tools/netns-cluster up 4 >/dev/null 2>&1; then
        timeout 60 tools/netns-cluster mpirun 4 "$PWD/$BENCH" provenance --param a=1 --format csv \
            </dev/null 2>/dev/null | grep '^# provenance: ' >"$tmp/netns.txt"
        tools/netns-cluster down >/dev/null 2>&1
        P --ranks 4 --hosts 4 "$tmp/netns.txt"
    else
        echo "FAIL - tools/netns-cluster up 4"; fails=$((fails + 1))
    fi
else
    echo "ok - # skipped the 4-host check: the namespace cluster needs root"
fi
finish
