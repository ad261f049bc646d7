#!/usr/bin/env bash
# test_protocol — the start-up version exchange (libcore/base/runtime_version.c) under
# mpirun MPMD, one rank claiming another build or protocol through the documented test
# hooks NEBULA_TEST_BUILD and NEBULA_TEST_PROTOCOL:
#   - the same build everywhere: no versions line;
#   - another build string with the same protocol (a rolling upgrade): the run trains to
#     the end, rank 0's log lists both builds with their ranks and host;
#   - overlapping protocol ranges (1-2 and 1): run at protocol 1;
#   - no common protocol: every rank exits 2 before training, rank 0 naming each build,
#     its protocol range, its ranks and host;
#   - a malformed hook exits 2 naming it.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
licenses_data
host=$(hostname -s)
TRAIN=(build/bin/nebula-train --config configs/train/gpt2-tiny-licenses.ini --set data.train=$data/train.bin
       --set data.val= --set model.n_layer=1 --set model.n_embd=16 --set model.n_head=2 --set model.max_seq_len=16
       --set train.seq_len=16 --set train.global_batch=6 --set train.threads=1 --set optim.schedule=constant
       --set optim.warmup_steps=0 --steps 2 --ckpt-every 0)
# mpmd NAME ENV...: rank 0 with ENV, ranks 1-2 without; output in $tmp/NAME.log, exit code returned
mpmd() {
    local name=$1
    shift
    $MPIRUN -np 1 env "$@" "${TRAIN[@]}" --run-dir $tmp/$name : -np 2 "${TRAIN[@]}" --run-dir $tmp/$name \
        >$tmp/$name.log 2>&1 </dev/null
}

mpmd same NEBULA_TEST_BUILD=
rc=$?
check "one build: the run ends, no versions line" \
    bash -c "[ $rc -eq 0 ] && grep -q '^summary:' $tmp/same.log && ! grep -q 'mixed versions' $tmp/same.log"

mpmd rolling NEBULA_TEST_BUILD=0.0.9-test
rc=$?
check "another build, the same protocol: the run trains to the end" \
    bash -c "[ $rc -eq 0 ] && grep -q '^summary: steps=2' $tmp/rolling.log"
check "... rank 0 logs the builds in use, their ranks and host, and the protocol" \
    grep -qF "mixed versions, compatible: build 0.0.9-test (protocol 1..1) on rank 0 (host $host); build 0.1.0 (" \
    $tmp/rolling.log
check "... ranks 1-2 listed together" grep -q "(protocol 1..1) on ranks 1-2 (host $host); running protocol 1" \
    $tmp/rolling.log

mpmd overlap NEBULA_TEST_PROTOCOL=1-2 NEBULA_TEST_BUILD=0.2.0-test
rc=$?
check "overlapping protocol ranges (1..2 and 1..1) run at protocol 1" \
    bash -c "[ $rc -eq 0 ] && grep -q 'build 0.2.0-test (protocol 1..2) on rank 0.*running protocol 1' $tmp/overlap.log"

mpmd refused NEBULA_TEST_PROTOCOL=2 NEBULA_TEST_BUILD=0.2.0-test
rc=$?
check "no common protocol: exit 2" test $rc -eq 2
check "... rank 0 names each build, its protocol range, ranks and host" \
    grep -qF "no wire protocol version is spoken by every rank: build 0.2.0-test (protocol 2..2) on rank 0 (host $host); build 0.1.0 (" \
    $tmp/refused.log
check "... before any training: no config table, no step" \
    bash -c "! grep -q '^step=\|^summary:' $tmp/refused.log"
check "... every rank refused (all three exit 2, none aborted)" \
    bash -c "! grep -q 'MPI_ABORT' $tmp/refused.log"

mpmd malformed NEBULA_TEST_PROTOCOL=two
rc=$?
check "a malformed NEBULA_TEST_PROTOCOL exits 2 naming it" \
    bash -c "[ $rc -eq 2 ] && grep -q \"NEBULA_TEST_PROTOCOL='two' is not N or LO-HI\" $tmp/malformed.log"
finish
