#!/usr/bin/env bash
# A rank that never arrives (it sleeps 60 s): the others give up at the 1 s deadline,
# name it, free their communicators without waiting for it, and the job ends with
# exit code 1 — within 30 s, where a hang would run into `timeout` (exit 124).
. "$(dirname "$0")/lib.sh"
for algo in mpi flat hier; do
    expect "$algo: late rank 3 is named, job exits 1 without waiting for it" 1 "rank 3 did not arrive" -- \
        timeout 30 $MPIRUN -np 4 build/test/mpi/test_comm --ranks-per-node 2 --timeout-test $algo
done
finish
