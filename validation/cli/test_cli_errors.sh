#!/usr/bin/env bash
# Bad input gets one clear message naming what is wrong and exit code 2, before
# any rank starts communicating; --help and --version exit 0.
. "$(dirname "$0")/lib.sh"

printf '[bench]\nmax_bytes = 1M\nitres = 5\n' >"$tmp/badkey.ini"
printf '[bench]\nmax_bytes = 1M\niters = lots\n' >"$tmp/badval.ini"
printf '[bench]\nrounds = 0\n' >"$tmp/range.ini"
printf '[comm]\nalgo = tree\n' >"$tmp/enum.ini"
printf '[bench\nrounds = 3\n' >"$tmp/syntax.ini"

expect "unknown config key names file:line and suggests" 2 "badkey.ini:3: unknown key 'bench.itres'; did you mean 'bench.iters'" -- \
    $BENCH comm --config "$tmp/badkey.ini"
expect "bad value type names file:line and the type" 2 "badval.ini:3: bench.iters: 'lots' is not a valid" -- \
    $BENCH comm --config "$tmp/badval.ini"
expect "out-of-range value names the range" 2 "range.ini:2: bench.rounds" -- $BENCH comm --config "$tmp/range.ini"
expect "bad enum lists the valid values" 2 "auto|mpi|flat|hier|ring" -- $BENCH comm --config "$tmp/enum.ini"
expect "INI syntax error names the line" 2 "syntax.ini:1" -- $BENCH comm --config "$tmp/syntax.ini"
expect "missing config file is named" 2 "$tmp/nope.ini" -- $BENCH comm --config "$tmp/nope.ini"
expect "unknown flag suggests the right one" 2 "unknown option '--max-byte'; did you mean '--max-bytes'?" -- \
    $BENCH comm --max-byte 1M
expect "flag without its value" 2 "option '--iters' needs a value" -- $BENCH comm --iters
expect "bad --set key" 2 "unknown key 'bench.nope'" -- $BENCH comm --set bench.nope=1
expect "bad --set value" 2 "bench.factor" -- $BENCH comm --set bench.factor=1
expect "bad size suffix" 2 "bench.max_bytes" -- $BENCH comm --max-bytes 12Q
expect "unknown subcommand" 2 "unknown subcommand 'comms'" -- $BENCH comms
expect "positional argument" 2 "unexpected argument 'extra'" -- $BENCH comm extra
expect "errors print once under mpirun, exit 2" 2 "unknown option" -- $MPIRUN -np 2 $BENCH comm --bogus
out=$($MPIRUN -np 2 $BENCH comm --bogus 2>&1)
n=$(grep -c "unknown option" <<<"$out")
if [ "$n" -eq 1 ]; then echo "ok - one message for 2 ranks"; else echo "FAIL - $n messages for 2 ranks"; fails=$((fails + 1)); fi
# rank 0 slower than the others (started a second late): the ranks that find the same
# error first wait for it, so its message is out before the launcher ends the job
cat >"$tmp/slow0.sh" <<'SH'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 0 ] && sleep 1
exec "$@"
SH
chmod +x "$tmp/slow0.sh"
expect "a usage error at 4 ranks whose rank 0 starts last still prints its message" 2 "sched.mode: 'fastest'" -- \
    $MPIRUN -np 4 "$tmp/slow0.sh" build/bin/nebula-train --model gpt2-tiny --set sched.mode=fastest
expect "the same for nebula-bench" 2 "unknown option '--bogus'" -- $MPIRUN -np 4 "$tmp/slow0.sh" $BENCH comm --bogus
expect "--help lists options with defaults" 0 "bench.max_bytes" -- $BENCH comm --help
expect "--help shows defaults" 0 "256M" -- $BENCH comm --help
expect "--version" 0 "nebula-bench 0.1.0" -- $BENCH --version
expect "NEBULA_CPU_ISA that is no level lists the levels" 2 "NEBULA_CPU_ISA=sse9 is not an instruction-set level; use auto, base, avx2" -- \
    env NEBULA_CPU_ISA=sse9 $BENCH model --model gpt2-tiny --steps 1
if ! grep -qw amx_tile /proc/cpuinfo; then
    expect "NEBULA_CPU_ISA above this CPU names what it runs" 2 "NEBULA_CPU_ISA=amx: this CPU runs" -- \
        env NEBULA_CPU_ISA=amx $MPIRUN -np 1 build/bin/nebula-train --model gpt2-tiny --steps 1 \
        --set data.train=synthetic --run-dir "$tmp/isa"
fi
expect "singletons under srun are refused with a hint" 2 "srun --mpi=pmix" -- \
    env -u OMPI_COMM_WORLD_SIZE SLURM_STEP_NUM_TASKS=4 $BENCH comm --max-bytes 64
finish
