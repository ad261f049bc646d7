#!/usr/bin/env bash
# make demo: the suite's main job on an embedded default. Until nebula-train lands
# this is the communication benchmark: 4 ranks as 2 virtual nodes, every allreduce
# algorithm beside OpenMPI's own, checked bit-exact (configs/demo-comm.ini).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-4}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
set -x
mpirun --oversubscribe -np "$NP" build/bin/nebula-bench comm --config configs/demo-comm.ini "$@"
