#!/usr/bin/env bash
# bench-train.sh — the nebula-train benchmarks of docs/benchmarks.md, each beside its peer in
# the same run:
#   overlap  GPT-2 124M on 4 ranks (2 virtual nodes x 2), micro-batch 1 x T=64: time a
#            step waits for gradient communication after backward, against the time
#            the same buckets take with nothing to overlap (calibrated at start-up),
#            with overlap (25 MiB buckets launched from backward) and without it (one
#            bucket holding every gradient, launched when backward ends);
#   ckpt     GPT-2 124M with AdamW state (1.49 GB), 1 rank, checkpoints every 4 steps:
#            the stall of the step loop of an asynchronous save (ckpt_save +
#            ckpt_fence + the commit in ckpt_poll), the extra time of the steps its
#            background copy and write overlap, and the stall of the same save made
#            synchronously, each against one memcpy of the same tensors (measured by
#            the checkpoint writer in the same process at start-up); the background
#            write rate against dd's sequential write of as many bytes to the same
#            disk (bs=64M, through the page cache with fdatasync, and with O_DIRECT).
# The first line is the provenance of the tables (docs/benchmarks.md#provenance), as a
# Markdown comment "<!-- provenance: {...} -->", gathered on the 4 ranks of the overlap runs.
# Usage: tools/bench-train.sh [overlap|ckpt|all] (default all); REPS (default 3).
set -euo pipefail
cmdline=$(printf '%q ' "$0" "$@")
cd "$(dirname "$0")/.."
what=${1:-all}
reps=${REPS:-3}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mpirun --oversubscribe -np 4 build/bin/nebula-bench provenance --format markdown --command "${cmdline% }" \
    --param what="$what" --param reps="$reps" </dev/null
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
med() { /usr/bin/python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" | tail -1; }

if [ "$what" = overlap ] || [ "$what" = all ]; then
    w1=() c1=() w2=() c2=()
    for r in $(seq 1 "$reps"); do
        for mode in overlap none; do
            extra=(); [ $mode = none ] && extra=(--set train.bucket_bytes=16G)
            out=$(mpirun --oversubscribe -np 4 build/bin/nebula-train --model gpt2 --ranks-per-node 2 \
                  --run-dir "$tmp/ov" --set data.train=synthetic --set train.micro_batch=1 --seq-len 64 --steps 6 \
                  --set optim.warmup_steps=0 --set train.log_interval=6 "${extra[@]}" </dev/null 2>&1 | grep '^summary')
            if [ $mode = overlap ]; then w1+=("$(field comm_wait_ms <<<"$out")"); c1+=("$(field comm_ms <<<"$out")")
            else w2+=("$(field comm_wait_ms <<<"$out")"); c2+=("$(field comm_ms <<<"$out")"); fi
        done
    done
    W1=$(med "${w1[@]}") C1=$(med "${c1[@]}") W2=$(med "${w2[@]}") C2=$(med "${c2[@]}")
    echo "| gradient communication, GPT-2 124M, 4 ranks (2x2) | wait after backward | communication time | not hidden (wait ÷ communication) |"
    echo "|---|---:|---:|---:|"
    printf "| 25 MiB buckets launched from backward | %.0f ms | %.0f ms | %.0f%% |\n" "$W1" "$C1" "$(echo "100*$W1/$C1" | bc -l)"
    printf "| one bucket after backward (no overlap) | %.0f ms | %.0f ms | %.0f%% |\n" "$W2" "$C2" "$(echo "100*$W2/$C2" | bc -l)"
fi

if [ "$what" = ckpt ] || [ "$what" = all ]; then
    # The save of step 8 is reported complete on the step-12 line (previous_*). Its
    # background copy and write run during steps 9-11: their extra time over the
    # median of steps 2-4 (before any save) is the cost of sharing the rank's core
    # (mpirun binds one rank to one core) with the copy and the write.
    st=() sv=() fe=() fi=() cp=() wr=() wi=() mc=() dd_=() ex=() sy=() dx=()
    for r in $(seq 1 "$reps"); do
        rm -rf "$tmp/ck"
        out=$(mpirun --oversubscribe -np 1 build/bin/nebula-train --model gpt2 --run-dir "$tmp/ck" \
              --set data.train=synthetic --set train.micro_batch=2 --seq-len 64 --steps 12 --set optim.warmup_steps=0 \
              --set train.log_interval=1 --set ckpt.every_steps=4 --set ckpt.async=true </dev/null 2>&1)
        line=$(grep '^checkpoint step=12' <<<"$out")
        st+=("$(field previous_stall_ms <<<"$line")")
        sv+=("$(field previous_save_ms <<<"$line")")
        fe+=("$(field previous_fence_ms <<<"$line")")
        fi+=("$(field previous_finish_ms <<<"$line")")
        cp+=("$(field previous_copy_ms <<<"$line")")
        mc+=("$(field memcpy_ms <<<"$line")")
        wr+=("$(sed -n 's/.*previous_write_MB\/s=\([0-9.]*\).*/\1/p' <<<"$line")")
        wi+=("$(sed -n 's/^checkpoint last background write: .* = \([0-9.]*\) MB\/s/\1/p' <<<"$out")")
        bytes=$(field bytes <<<"$line")
        ex+=("$(/usr/bin/python3 -c "
import re, statistics, sys
ms = {int(s): float(t) for s, t in re.findall(r'^step=(\d+) .*step_ms=([0-9.]+)', sys.stdin.read(), re.M)}
base = statistics.median(ms[s] for s in (2, 3, 4))
print(sum(ms[s] - base for s in (9, 10, 11)))" <<<"$out")")
        rm -rf "$tmp/ck"
        sy+=("$(mpirun --oversubscribe -np 1 build/bin/nebula-train --model gpt2 --run-dir "$tmp/ck" \
              --set data.train=synthetic --set train.micro_batch=2 --seq-len 64 --steps 8 --set optim.warmup_steps=0 \
              --set train.log_interval=8 --set ckpt.every_steps=4 --set ckpt.async=false </dev/null 2>&1 |
              grep '^checkpoint step=8' | field stall_ms)")
        dd_+=("$(dd if=/dev/zero of="$tmp/dd" bs=64M count=$((bytes / 67108864 + 1)) conv=fdatasync 2>&1 |
                 sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' | awk -v b="$bytes" '{printf "%.0f", (int(b/67108864)+1)*67108864/$1/1e6}')")
        rm -f "$tmp/dd"
        dx+=("$(dd if=/dev/zero of="$tmp/dd" bs=64M count=$((bytes / 67108864 + 1)) oflag=direct conv=fdatasync 2>&1 |
                 sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' | awk -v b="$bytes" '{printf "%.0f", (int(b/67108864)+1)*67108864/$1/1e6}')")
        rm -f "$tmp/dd"
    done
    echo
    echo "| async checkpoint, GPT-2 124M + AdamW ($(/usr/bin/python3 -c "print(round($bytes/1e9, 2))") GB) | Nebula | peer | ratio |"
    echo "|---|---:|---:|---:|"
    S=$(med "${st[@]}") M=$(med "${mc[@]}") WR=$(med "${wr[@]}") D=$(med "${dd_[@]}")
    printf "| step-loop stall vs one memcpy of the same tensors | %.0f ms (save %.0f, fence %.0f, finish %.0f) | %.0f ms | %.2f |\n" \
        "$S" "$(med "${sv[@]}")" "$(med "${fe[@]}")" "$(med "${fi[@]}")" "$M" "$(echo "$S/$M" | bc -l)"
    E=$(med "${ex[@]}")
    printf "| extra time of steps 9-11 (background copy %.0f ms and write) vs one memcpy | %.0f ms | %.0f ms | %.2f |\n" \
        "$(med "${cp[@]}")" "$E" "$M" "$(echo "$E/$M" | bc -l)"
    printf "| the same save synchronous (parallel HDF5), stall vs one memcpy | %.0f ms | %.0f ms | %.2f |\n" \
        "$(med "${sy[@]}")" "$M" "$(echo "$(med "${sy[@]}")/$M" | bc -l)"
    WI=$(med "${wi[@]}")
    X=$(med "${dx[@]}")
    printf "| background write rate while training (sharing the core) vs dd conv=fdatasync | %.0f MB/s | %.0f MB/s | %.2f |\n" "$WR" "$D" "$(echo "$WR/$D" | bc -l)"
    printf "| background write rate, last save (loop finished) vs dd conv=fdatasync | %.0f MB/s | %.0f MB/s | %.2f |\n" "$WI" "$D" "$(echo "$WI/$D" | bc -l)"
    printf "| background write rate while training vs dd oflag=direct conv=fdatasync | %.0f MB/s | %.0f MB/s | %.2f |\n" "$WR" "$X" "$(echo "$WR/$X" | bc -l)"
fi
