#!/usr/bin/env bash
# make bench: the README's allreduce table (configs/bench-comm.ini) at 4 ranks as
# 2 virtual nodes x 2, written to build/bench/comm-np4.{txt,json}.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
mkdir -p build/bench
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpirun --oversubscribe -np "$NP" build/bin/nebula-bench comm --config configs/bench-comm.ini \
    --out "build/bench/comm-np$NP.json" --save-tune "build/bench/tune-np$NP.json" "$@" | tee "build/bench/comm-np$NP.txt"
