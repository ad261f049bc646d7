#!/usr/bin/env bash
# run-tests.sh — the one test runner: one line per test, then "N passed, N failed, N skipped".
#
#   tools/run-tests.sh [--tier quick|long | --all] [--check-tree] LIST [FILTER]
#
# Each non-comment line of the list is `name | command`; a test passes when its
# command exits 0 within NEBULA_TEST_TIMEOUT seconds (default 600), or within N
# seconds for a command ending in the comment `# timeout=N` (long trainings). A test
# that cannot run here (no GPU, not root) exits 77, as under automake, after printing
# one line that says why ("SKIP: needs root"): it is reported as SKIP with that reason
# and counted apart, never as passed. The output of a failing test is printed after its
# line; all output is kept in build/test-logs/ (or NEBULA_TEST_LOGS). FILTER keeps the
# tests whose names contain it; --tier T keeps the lines tagged `# tier=T` (quick: `make
# test`; long: `make check-long`). Without --tier, every line but the long tier runs (`make
# check`); --all runs the long tier too (jobscripts/validate.sbatch). --check-tree (make
# test, make check; inside a git checkout) ends the run with one more check,
# tree/unchanged: no test may create, change or delete a file of the source tree (build/
# and the logs aside), so `git status --porcelain` reads the same after the run as before. The exit status is
# non-zero only when a test failed.
set -uo pipefail

usage='usage: tools/run-tests.sh [--tier quick|long | --all] [--check-tree] LIST [FILTER]'
tier= all=0 check_tree=0
while :; do
    case "${1:-}" in
    --tier) tier=${2:?$usage}; shift 2 ;;
    --all) all=1; shift ;;
    --check-tree) check_tree=1; shift ;;
    *) break ;;
    esac
done
list=${1:?$usage}
filter=${2:-}
logdir=${NEBULA_TEST_LOGS:-build/test-logs}
mkdir -p "$logdir"

# mpirun as root (CI containers) needs explicit consent; oversubscription is the
# norm here (4 ranks on 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export MPIRUN="mpirun --oversubscribe"
# Python's byte-code caches would land beside the test scripts in the source tree.
export PYTHONDONTWRITEBYTECODE=1

# The source tree's state (git's view, ignored files included, build/ and the logs left
# out), taken before and after a whole-list run.
tree_state() {
    git status --porcelain --ignored --untracked-files=all 2>/dev/null |
        grep -v -e '^!! build/' -e "^!! ${logdir%/}/" -e "^?? ${logdir%/}/" || true
}
watch_tree=0
if [ $check_tree -eq 1 ] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    watch_tree=1
    tree_before=$(tree_state)
fi

SKIP_RC=77
passed=0 failed=0 skipped=0 failed_names=()
while IFS= read -r line; do
    [[ -z "${line// }" || "$line" =~ ^[[:space:]]*# ]] && continue
    name=$(sed 's/[[:space:]]*|.*//' <<<"$line")
    cmd=$(sed 's/^[^|]*|[[:space:]]*//' <<<"$line")
    [[ -n "$filter" && "$name" != *"$filter"* ]] && continue
    [[ -n "$tier" && ! "$cmd" =~ \#.*tier=$tier([[:space:]]|$) ]] && continue
    [[ -z "$tier" && $all -eq 0 && "$cmd" =~ \#.*tier=long([[:space:]]|$) ]] && continue
    log="$logdir/${name//[^A-Za-z0-9_.-]/_}.log"
    start=$(date +%s%N)
    limit=${NEBULA_TEST_TIMEOUT:-600}
    [[ "$cmd" =~ \#.*timeout=([0-9]+) ]] && limit=${BASH_REMATCH[1]}
    timeout --kill-after=10 "$limit" bash -c "$cmd" </dev/null >"$log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    secs="$((ms / 1000)).$((ms % 1000 / 100))"
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS  %-44s %6ss\n' "$name" "$secs"
    elif [ $rc -eq $SKIP_RC ]; then
        skipped=$((skipped + 1))
        # the reason: the test's last line that starts with SKIP (or "skipped"), without the word
        why=$(grep -iE '^(SKIP|skipped)' "$log" | tail -n 1 | sed -E 's/^(SKIP|skipped)[[:space:]:-]*//I')
        printf 'SKIP  %-44s %6ss  (%s)\n' "$name" "$secs" "${why:-no reason given}"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        printf 'FAIL  %-44s %6ss  (exit %d, log %s)\n' "$name" "$secs" "$rc" "$log"
        tail -n 30 "$log" | sed 's/^/      | /'
    fi
done <"$list"

if [ $watch_tree -eq 1 ]; then
    changed=$(diff <(printf '%s\n' "$tree_before") <(tree_state) | sed -n 's/^[<>] //p')
    if [ -z "$changed" ]; then
        passed=$((passed + 1))
        printf 'PASS  %-44s\n' tree/unchanged
    else
        failed=$((failed + 1))
        failed_names+=(tree/unchanged)
        printf 'FAIL  %-44s (the source tree changed: a test wrote outside build/)\n' tree/unchanged
        printf '%s\n' "$changed" | head -n 30 | sed 's/^/      | /'
    fi
fi

[ $failed -gt 0 ] && printf 'failed: %s\n' "${failed_names[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
