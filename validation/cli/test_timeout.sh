#!/usr/bin/env bash
# A rank that never arrives: the others give up at the deadline, name it, and the
# job ends with exit code 1 instead of hanging.
. "$(dirname "$0")/lib.sh"
expect "late rank 3 is named, job exits 1" 1 "rank 3 did not arrive" -- \
    timeout 60 $MPIRUN -np 4 build/test/mpi/test_comm --ranks-per-node 2 --timeout-test
finish
