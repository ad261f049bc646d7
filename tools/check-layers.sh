#!/usr/bin/env bash
# check-layers.sh — libcore's modules include only modules below them (docs/design.md):
#   base < kernels < comm < nn < data < dgc < ckpt < ckpt/tool < record < model
#        < train/core < train/control < train/observe < train (its top files) < fed
# the trainer's sub-modules in the same one-way order (each may include train/train.h,
# the module's public header, which names their shared train_run), and no file under
# libcore/ or kernels/ includes a private header (*_impl.h) of another folder. Prints
# every offending include; exits 1 when there is one.
set -uo pipefail
cd "$(dirname "$0")/.."
order=(base comm nn data dgc ckpt ckpt/tool record model train/core train/control train/observe train fed nano deploy)
rank() { local i; for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
bad=0
while IFS= read -r f; do
    dir=$(dirname "${f#libcore/}")
    me=$(rank "$dir")
    while IFS= read -r inc; do
        tgt=$(dirname "$inc")
        [ "$tgt" = . ] && continue                     # same folder
        case "$tgt" in cpu|cuda)                       # kernels: above base, below comm and the rest
            [ "$me" -ge 1 ] || { echo "$f includes $inc: base may not include kernels"; bad=1; }
            continue ;; esac
        case "$dir:$inc" in train/*:train/train.h) continue ;; esac  # the public header, below the sub-modules' code
        them=$(rank "$tgt")
        if [ "$them" -lt 0 ] || [ "$them" -gt "$me" ]; then
            echo "$f includes $inc: $dir may include only modules below it"; bad=1
        fi
        case "$inc" in *_impl.h) [ "$tgt" != "$dir" ] && [ "${dir%/tool}" != "$tgt" ] && {
            echo "$f includes the private $inc of another module"; bad=1; } ;; esac
    done < <(grep -o '#include "[a-z_/0-9]*\.h"' "$f" | sed 's/#include "//; s/"$//')
done < <(find libcore -name '*.[ch]' | sort)
# kernels: base only (log.h, dtype.h)
while IFS= read -r line; do
    echo "$line: kernels may include only libcore/base"; bad=1
done < <(grep -n '#include "[a-z]*/' kernels/cpu/*.[ch] kernels/cuda/*.{cu,h} | grep -v '"base/\|"cpu/\|"cuda/' )
# libnebula-nano (libcore/nano) stands alone: its own headers, libc, libm and OpenMP, so
# it links without MPI or HDF5 and cross-builds for arm64 boards.
while IFS= read -r line; do
    echo "$line: libcore/nano may include only its own headers and the C library"; bad=1
done < <(grep -n '#include' libcore/nano/*.[ch] | grep -v -E '#include "(nano/)?nano[a-z_]*\.h"' | grep -v -E '#include <(assert|errno|fcntl|float|limits|math|omp|stdatomic|stddef|stdint|stdio|stdlib|string|time|unistd|immintrin|arm_neon|cpuid|sys/[a-z]+|asm/hwcap)\.h>')
[ $bad -eq 0 ] && echo "layers: every include goes downward"
exit $bad
