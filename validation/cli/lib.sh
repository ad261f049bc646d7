# lib.sh — helpers for the command-line tests: run a command, check its exit code
# and that its output contains a text. Sourced by the test scripts.
fails=0
BENCH=build/bin/nebula-bench
MPIRUN=${MPIRUN:-mpirun --oversubscribe}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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

finish() { [ "$fails" -eq 0 ]; }
