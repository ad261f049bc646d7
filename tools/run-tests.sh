#!/usr/bin/env bash
# run-tests.sh — the one test runner: one line per test, then "N passed, N failed".
#
#   tools/run-tests.sh validation/tests.list [FILTER]
#
# Each non-comment line of the list is `name | command`; a test passes when its
# command exits 0 within NEBULA_TEST_TIMEOUT seconds (default 600), or within N
# seconds for a command ending in the comment `# timeout=N` (long trainings). The output of a
# failing test is printed after its line; all output is kept in build/test-logs/ (or
# NEBULA_TEST_LOGS). FILTER keeps the tests whose names contain it.
set -uo pipefail

list=${1:?usage: tools/run-tests.sh LIST [FILTER]}
filter=${2:-}
logdir=${NEBULA_TEST_LOGS:-build/test-logs}
mkdir -p "$logdir"

# mpirun as root (CI containers) needs explicit consent; oversubscription is the
# norm here (4 ranks on 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export MPIRUN="mpirun --oversubscribe"

passed=0 failed=0 failed_names=()
while IFS= read -r line; do
    [[ -z "${line// }" || "$line" =~ ^[[:space:]]*# ]] && continue
    name=$(sed 's/[[:space:]]*|.*//' <<<"$line")
    cmd=$(sed 's/^[^|]*|[[:space:]]*//' <<<"$line")
    [[ -n "$filter" && "$name" != *"$filter"* ]] && continue
    log="$logdir/${name//[^A-Za-z0-9_.-]/_}.log"
    start=$(date +%s%N)
    limit=${NEBULA_TEST_TIMEOUT:-600}
    [[ "$cmd" =~ \#[[:space:]]*timeout=([0-9]+)[[:space:]]*$ ]] && limit=${BASH_REMATCH[1]}
    timeout --kill-after=10 "$limit" bash -c "$cmd" </dev/null >"$log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    secs="$((ms / 1000)).$((ms % 1000 / 100))"
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS  %-44s %6ss\n' "$name" "$secs"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        printf 'FAIL  %-44s %6ss  (exit %d, log %s)\n' "$name" "$secs" "$rc" "$log"
        tail -n 30 "$log" | sed 's/^/      | /'
    fi
done <"$list"

[ $failed -gt 0 ] && printf 'failed: %s\n' "${failed_names[*]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
