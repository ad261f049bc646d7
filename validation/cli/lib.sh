# lib.sh — helpers for the command-line tests: run a command, check its exit code
# and that its output contains a text. Sourced by the test scripts.
fails=0
BENCH=build/bin/nebula-bench
MPIRUN=${MPIRUN:-mpirun --oversubscribe}
tmp=$(mktemp -d)
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$tmp"' EXIT

# expect NAME CODE TEXT -- COMMAND...
expect() {
    local name=$1 code=$2 text=$3
    shift 4
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$code" ]; then
        echo "FAIL - $name: exit $rc, expected $code"; echo "$out" | tail -5 | sed 's/^/    /'; fails=$((fails + 1))
    elif ! grep -qF -- "$text" <<<"$out"; then
        echo "FAIL - $name: output lacks '$text'"; echo "$out" | tail -5 | sed 's/^/    /'; fails=$((fails + 1))
    else
        echo "ok - $name"
    fi
}

PY=/usr/bin/python3  # Debian's interpreter, which sees Debian's numpy, h5py and PyTorch

# finish: the test's exit status, after one more check of whatever runs it made: every line
# of every metrics.jsonl left under $tmp parses under a strict JSON parser (NaN and
# Infinity refused) and carries the header of every record (docs/metrics.md)
finish() {
    local files
    files=$(find "$tmp" -name metrics.jsonl -type f 2>/dev/null | sort)
    [ -z "$files" ] || check "every line of the $(wc -l <<<"$files") metrics.jsonl file(s) these runs wrote: strict JSON, the header in each record" \
        $PY - $files <<'PY'
import json, sys
def refuse(c): raise ValueError(f"non-JSON constant {c}")
def null_paths(v, path=""):  # as metrics.c names them: a.b, layers.3.density
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    return [p for k, x in items for p in null_paths(x, f"{path}.{k}" if path else str(k))] if items else \
           ([path] if v is None else [])
bad = 0
for path in sys.argv[1:]:
    for n, line in enumerate(open(path), 1):
        try:
            j = json.loads(line, parse_constant=refuse)
            missing = [k for k in ("kind", "step", "time", "elapsed_s", "launch", "job") if k not in j]
            nulls = sorted(null_paths(j))
            assert not missing, f"lacks {missing}"
            assert nulls == sorted(j.get("nonfinite", [])), f"null keys {nulls}, nonfinite {j.get('nonfinite')}"
        except Exception as e:
            bad += 1
            if bad <= 3: print(f"    {path}:{n}: {e}: {line[:160]!r}")
sys.exit(1 if bad else 0)
PY
    [ "$fails" -eq 0 ]
}

# check NAME COMMAND...: ok when COMMAND succeeds
check() {
    local name=$1
    shift
    if "$@"; then echo "ok - $name"; else echo "FAIL - $name"; fails=$((fails + 1)); fi
}

# chaos_build_data: TRAIN, CHAOS (the -DCHAOS fault-injection build) and CKPT, failing when
# the CHAOS build is missing, and the licence corpus in $data (the fault tests' prelude)
chaos_build_data() {
    TRAIN=build/bin/nebula-train
    CHAOS=build/chaos/bin/nebula-train
    CKPT=build/bin/nebula-ckpt
    [ -x $CHAOS ] || { echo "FAIL - $CHAOS is missing (make chaos)"; exit 1; }
    licenses_data
}

# --- training runs on the licence-text corpus (configs/train/gpt2-tiny-licenses.ini) ---------

# licenses_data: the corpus prepared into $data = $tmp/data (train.bin, val.bin)
licenses_data() {
    data=$tmp/data
    build/bin/nebula-train prepare "$data" /usr/share/common-licenses/* >/dev/null || { echo "FAIL - prepare"; exit 1; }
}

# licenses_run RUN_DIR NP [ARG...]: gpt2-tiny on $data at a constant learning rate (so
# train.steps only bounds the loop and runs of different lengths share their first
# steps exactly), a loss line every step, no evaluation; output in RUN_DIR.log
licenses_run() {
    local dir=$1 np=$2
    shift 2
    $MPIRUN -np "$np" build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set optim.schedule=constant \
        --set optim.warmup_steps=0 --set train.log_interval=1 --set train.eval_interval=0 "$@" \
        >"$dir.log" 2>&1 </dev/null
}

# same_losses A B [FROM] [exact|scaled]: the training losses of two run directories' metrics,
# step by step from FROM (1) on, agree within 1e-5 relative, or bit for bit with `exact`;
# at least two common steps. With `scaled` the bound at a step grows with A's gradient
# norm there over its median: to first order |dL| <= |grad L| |d params|, so where two runs'
# parameters differ by rounding, a step whose gradient is G times the usual one may differ
# G times as much (a batch with a loss spike), while every ordinary step keeps 1e-5
same_losses() {
    $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-1}" "${4:-}" <<'PY'
import json, statistics, sys
def train(p):
    return {j["step"]: j for j in map(json.loads, open(p)) if j["kind"] == "train"}
a, b, first, mode = train(sys.argv[1]), train(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
steps = sorted(s for s in a if s in b and s >= first)
med = statistics.median(a[s]["gnorm"] for s in steps) if steps and mode == "scaled" else 1
bound = {s: 1e-5 * (max(1.0, a[s]["gnorm"] / med) if mode == "scaled" else 1.0) for s in steps}
rel = {s: abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"]) for s in steps}
worst = max(rel.values()) if steps else 1
print(f"    {len(steps)} common steps from {first}, worst relative difference {worst:.2e}")
for s in steps:
    if mode == "scaled" and bound[s] > 2e-5:
        print(f"    step {s}: gradient norm {a[s]['gnorm']:.3g} = {a[s]['gnorm'] / med:.0f} x the median, "
              f"bound {bound[s]:.1e}, difference {rel[s]:.2e}")
ok = all(rel[s] == 0 if mode == "exact" else rel[s] <= bound[s] for s in steps)
sys.exit(0 if len(steps) >= 2 and ok else 1)
PY
}
