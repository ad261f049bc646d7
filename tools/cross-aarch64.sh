#!/usr/bin/env bash
# cross-aarch64.sh — the aarch64 (Grace, GH200) cross build and its unit tests under qemu.
#
#   tools/cross-aarch64.sh deps    install the cross compiler and qemu-user (root) and fill
#                                  the arm64 sysroot; without root, print what is missing
#   tools/cross-aarch64.sh build   build kernels, libcore and the test programs into build/aarch64/
#   tools/cross-aarch64.sh test    build, then run the tests below under qemu-aarch64, one line
#                                  per test; exit 1 when one failed, 77 ("SKIP: why") when the
#                                  toolchain, qemu or the sysroot is missing and cannot be had
#
# The tests are validation/tests.list's own lines, rewritten: every `unit/*` line (those
# that force an x86 level with NEBULA_CPU_ISA excepted: aarch64 has one level), and the
# one-rank MPI lines `mpi/*-np1` run as singletons (no mpirun: MPI_Init alone under
# qemu), except mpi/tp-np1 (2.5 min under qemu) and the NCCL fake. JOBS (2) run at once.
# NEBULA_CROSS_SKIP (a regex of names) leaves more out: make check's line leaves out
# unit/kernels-attn (its central differences take 1-2 min under qemu; it has no aarch64
# code of its own, and its portable path runs natively as unit/kernels-attn-base), which
# the long tier's cross/aarch64-all runs.
#
# The one design decision: the arm64 libraries live in a private sysroot
# (build/aarch64/sysroot, Debian's arm64 packages unpacked with dpkg -x), not in the
# machine's multiarch tree. Debian 12's arm64 OpenMPI, parallel HDF5 and ISA-L cannot be
# installed beside their amd64 builds (apt would remove openmpi-bin, libhdf5-openmpi-dev,
# slurm and libisal-dev), and the multiarch libraries that can would force amd64 upgrades
# of shared libraries (systemd's libudev1, libssl3). The sysroot needs no root once the
# arm64 package lists exist, changes nothing on the machine, and is exactly Debian's
# arm64 layout, so `qemu-aarch64 -L build/aarch64/sysroot` runs the tests with the
# libraries a Grace node would load. The machine gets only gcc-aarch64-linux-gnu and
# qemu-user (and `dpkg --add-architecture arm64` for the package lists).
set -euo pipefail
cd "$(dirname "$0")/.."

X=build/aarch64
SR=$X/sysroot
HOST_PKGS=(gcc-aarch64-linux-gnu qemu-user)
# What the build links (headers and .so links only: their dependencies are not followed).
DEV_PKGS=(libc6-dev linux-libc-dev libcrypt-dev libopenblas-openmp-dev libinih-dev libjansson-dev
          libhwloc-dev libisal-dev zlib1g-dev libpapi-dev libdnnl-dev libopenmpi-dev libhdf5-openmpi-dev
          libpcre2-dev libutf8proc-dev libpng-dev libjpeg62-turbo-dev libsodium-dev libxxhash-dev libzstd-dev)
# What the tests load at run time: these and everything they depend on.
RUN_PKGS=(libc6 libgomp1 libopenblas0-openmp libinih1 libjansson4 libhwloc15 libisal2 zlib1g
          libpapi7.0 libsde1 libdnnl2 libopenmpi3 libhdf5-openmpi-103-1
          libpcre2-8-0 libutf8proc2 libpng16-16 libjpeg62-turbo libsodium23 libxxhash0 libzstd1)
# Dependencies of the run-time closure that are programs or data, not libraries.
NOT_LIBS='^(adduser|cdebconf|debconf|dpkg|install-info|passwd|tar|readline-common|libdebian-installer4|libnewt0\.52|libslang2|libtextwrap1|libpam.*|libsemanage.*|libaudit.*|libreadline8)$'

# apt-cache and apt-get download write temporary files; where TMPDIR is not writable,
# they go under build/aarch64/tmp.
if [ ! -w "${TMPDIR:-/tmp}" ]; then
    mkdir -p "$X/tmp" && TMPDIR=$PWD/$X/tmp && export TMPDIR
fi

skip() { echo "SKIP: $*"; exit 77; }
have_host_tools() { command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; }
have_arm64_lists() { dpkg --print-foreign-architectures | grep -qx arm64 && apt-cache show libc6:arm64 >/dev/null 2>&1; }
stamp_text() { printf '%s\n' "${DEV_PKGS[@]}" "${RUN_PKGS[@]}"; }
have_sysroot() { [ -f "$SR/.complete" ] && [ "$(cat "$SR/.complete")" = "$(stamp_text)" ]; }

# apt-get update; apt's download sandbox (user _apt) needs a temporary directory it may write.
apt_update() {
    local t
    t=$(mktemp -d) && chmod 1777 "$t"
    TMPDIR=$t apt-get update -q
    rm -rf "$t"
}

# The arm64 run-time closure of RUN_PKGS, one name per line (first alternative of each dependency).
run_closure() {
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances "${RUN_PKGS[@]/%/:arm64}" |
        sed -n 's/^\([a-z0-9][^ ]*\):arm64$/\1/p' | grep -Ev "$NOT_LIBS" | sort -u
}

# Debian 12's packages keep /lib and /usr/lib apart (usrmerge joins them on a system);
# the sysroot joins them the same way, and absolute symlinks point into the sysroot.
sysroot_fix() {
    local d l t
    for d in lib sbin bin; do
        if [ -d "$SR/$d" ] && [ ! -L "$SR/$d" ]; then
            mkdir -p "$SR/usr/$d"
            cp -a "$SR/$d/." "$SR/usr/$d/" && rm -rf "${SR:?}/$d"
        fi
        [ -e "$SR/$d" ] || ln -s "usr/$d" "$SR/$d"
    done
    find "$SR" -type l -lname '/*' -print0 | while IFS= read -r -d '' l; do
        t=$(readlink "$l")
        ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$SR$t")" "$l"
    done
}

fill_sysroot() {
    local pkgs p
    mapfile -t pkgs < <({ printf '%s\n' "${DEV_PKGS[@]}"; run_closure; } | sort -u)
    echo "cross-aarch64: downloading ${#pkgs[@]} arm64 packages into $X/debs"
    mkdir -p "$X/debs"
    # Stale package lists name versions the mirror no longer has: as root, update once and retry.
    (cd "$X/debs" && apt-get download -q "${pkgs[@]/%/:arm64}" >/dev/null) ||
        { [ "$(id -u)" -eq 0 ] && apt_update && (cd "$X/debs" && apt-get download -q "${pkgs[@]/%/:arm64}" >/dev/null); } ||
        { echo "cross-aarch64: apt-get download failed (network, or stale lists: apt-get update)" >&2; return 1; }
    rm -rf "$SR" && mkdir -p "$SR"
    for p in "$X"/debs/*.deb; do
        dpkg-deb -x "$p" "$SR" || { echo "cross-aarch64: cannot unpack $p" >&2; return 1; }
    done
    sysroot_fix || return 1
    stamp_text >"$SR/.complete"
    echo "cross-aarch64: sysroot ready ($(du -sh "$SR" | cut -f1))"
}

# Installs (root) or reports what is missing; returns non-zero when something still is
# (the last line printed says what).
deps() {
    local root=0
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null && root=1
    if ! have_host_tools && [ $root = 1 ]; then
        apt_update && apt-get install -y -q --no-install-recommends "${HOST_PKGS[@]}"
    fi
    if ! have_host_tools; then
        echo "cross-aarch64: missing ${HOST_PKGS[*]}; as root: apt-get install --no-install-recommends ${HOST_PKGS[*]}" >&2
        return 1
    fi
    if ! have_arm64_lists && [ $root = 1 ]; then
        dpkg --add-architecture arm64 && apt_update
    fi
    if ! have_arm64_lists; then
        echo "cross-aarch64: no arm64 package lists; as root: dpkg --add-architecture arm64 && apt-get update" >&2
        return 1
    fi
    have_sysroot || fill_sysroot
}

# "name|command" of the tests.list lines that run here, commands rewritten for qemu.
cross_tests() {
    local name cmd
    while IFS='|' read -r name cmd; do
        name=${name//[[:space:]]/}
        cmd=${cmd%%#*}
        [ -n "${NEBULA_CROSS_SKIP:-}" ] && [[ "$name" =~ ^($NEBULA_CROSS_SKIP)$ ]] && continue
        case "$name" in
            unit/*) [[ "$cmd" == *NEBULA_CPU_ISA=* ]] && continue ;;
            mpi/tp-np1) continue ;;
            mpi/*-np1) [[ "$cmd" == *build/test/mpi/* ]] || continue
                       cmd=${cmd/\$MPIRUN -np 1 /} ;;
            *) continue ;;
        esac
        echo "$name|${cmd//build\/test\//\$QEMU $X/test/}"
    done < <(grep -v '^[[:space:]]*#' validation/tests.list)
}

# Runs one "name|command" line; prints its result line; the log under $X/test-logs.
run_one() {
    local name=${1%%|*} cmd=${1#*|} log start rc secs
    log=$X/test-logs/${name//[^A-Za-z0-9_.-]/_}.log
    start=$(date +%s%N)
    QEMU="qemu-aarch64 -L $SR" timeout --kill-after=10 "${NEBULA_TEST_TIMEOUT:-600}" bash -c "$cmd" </dev/null >"$log" 2>&1
    rc=$?
    secs=$((($(date +%s%N) - start) / 100000000))
    secs="$((secs / 10)).$((secs % 10))"
    if [ $rc -eq 0 ]; then printf 'PASS  %-36s %6ss\n' "aarch64 $name" "$secs"
    elif [ $rc -eq 77 ]; then printf 'SKIP  %-36s %6ss  (%s)\n' "aarch64 $name" "$secs" "$(grep -m1 -i '^skip' "$log")"
    else printf 'FAIL  %-36s %6ss  (exit %d, log %s)\n' "aarch64 $name" "$secs" "$rc" "$log"; tail -n 20 "$log" | sed 's/^/      | /'
    fi
    [ $rc -eq 0 ] || [ $rc -eq 77 ]
}

cross_build() {
    local targets
    mapfile -t targets < <(cross_tests | grep -o "$X/test/[^ ]*" | sort -u)
    make -j"${JOBS:-2}" "${targets[@]}"
}

case "${1:-}" in
    deps) deps ;;
    build)
        deps
        cross_build ;;
    test)
        mkdir -p "$X"
        if ! deps >"$X/deps.log" 2>&1; then
            skip "aarch64 cross build unavailable: $(tail -n 1 "$X/deps.log" | sed 's/^cross-aarch64: //')"
        fi
        cross_build >"$X/build.log" 2>&1 || { tail -n 40 "$X/build.log"; echo "FAIL  aarch64 build (log $X/build.log)"; exit 1; }
        mkdir -p "$X/test-logs"
        export X SR OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export -f run_one
        # The kernel tests take most of the time under qemu: they start first.
        # shellcheck disable=SC2016  # $1 is the inner shell's
        { cross_tests | grep '^unit/kernels'; cross_tests | grep -v '^unit/kernels'; } | tr '\n' '\0' |
            xargs -0 -P "${JOBS:-2}" -I{} bash -c 'run_one "$1"' _ {} | tee "$X/test-results" || true
        count() { grep -c "^$1" "$X/test-results" || true; }
        pass=$(count PASS) fail=$(count FAIL) skipped=$(count SKIP)
        echo "aarch64 under qemu: $pass passed, $fail failed, $skipped skipped"
        [ "$fail" -eq 0 ] ;;
    *)
        echo "usage: tools/cross-aarch64.sh deps|build|test" >&2
        exit 2 ;;
esac
