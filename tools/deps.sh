#!/usr/bin/env bash
# deps.sh — find, report and install Nebula's dependencies.
#
#   tools/deps.sh report        ✓/✗ per build dependency (compiled and linked, not asked of a
#                               package manager) and per test tool; exit 1 when a build
#                               dependency is missing
#   tools/deps.sh ensure        before a build: probe the libraries with the flags of
#                               mk/detect.mk; when one is missing and this is Debian as root,
#                               apt-get install the build packages; else name what is missing
#                               and the variable that points at it (exit 2)
#   tools/deps.sh ensure-test   before make test/check: as root on Debian, install missing test
#                               packages; create build/venv when missing (never fails the run:
#                               the tests that need a missing tool say so)
#   tools/deps.sh install       make deps: every build and test package (Debian, root), build/venv
#   tools/deps.sh install-test  make deps-test: the test packages and build/venv only
#
# The one decision: a build needs compilers and libraries, not packages. The probes
# compile and link one small program per library with the flags the Makefile will use
# (NEBULA_PROBE_* from mk/detect.mk, or `make -s probe-vars` when run alone), so a
# login node with Lmod modules, a RHEL host or a non-root user builds whenever the
# libraries are there; the package lists below are only how Debian gets them.
#
# build/venv is Debian's python3 with its system packages visible (torch, h5py, numpy
# from apt) plus what Debian does not ship, from PyPI: safetensors and tensorboard, which
# the converter's and the TensorBoard writer's tests read back with, and Opacus, whose RDP
# accountant the federated module's privacy accountant is compared with. It is test-time
# only: an offline login node builds without it. pip honours PIP_INDEX_URL and PIP_FIND_LINKS.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# What the build links (Debian 12 names).
BUILD_PKGS=(
    build-essential pkg-config
    openmpi-bin libopenmpi-dev                # MPI (OpenMPI 4.1)
    libhdf5-openmpi-dev                       # parallel HDF5
    libopenblas-dev libopenblas-openmp-dev    # BLAS for GEMM (the OpenMP build is linked)
    libdnnl-dev                               # oneDNN: direct convolutions and batch norm for CNNs
    libpapi-dev libhwloc-dev                  # profiler counters (optional: PAPI=0), topology and binding
    libinih-dev libjansson-dev zlib1g-dev     # INI config parser, JSON, CRC-32 combination
    libisal-dev                               # ISA-L: CRC-32 at memory speed (PCLMUL), zlib-compatible
    libpcre2-dev                              # PCRE2 (UTF, UCP): the tokenizers' pre-tokenisation regex
    libutf8proc-dev                           # utf8proc: Unicode categories, NFD, lower case (WordPiece)
    libpng-dev libjpeg62-turbo-dev            # image folders (nebula-train prepare --images)
    libsodium-dev                             # libsodium: X25519, ChaCha20, BLAKE2b (secure aggregation)
    libxxhash-dev libzstd-dev                 # XXH3-128 and zstd: nebula-model's content-addressed chunks
    libprotobuf-c-dev protobuf-c-compiler     # protobuf-c: nebula-deploy reads and writes ONNX files
    help2man                                  # make install: man pages from --help
)
# What make test / make check run beside the binaries.
TEST_PKGS=(
    hdf5-tools                                # h5dump reads the checkpoints in tests
    libblis-openmp-dev                        # the BLAS=blis build test
    python3-torch python3-torchvision python3-h5py python3-numpy   # reference-vs-PyTorch validation
    python3-scipy                             # Opacus's RDP analysis (build/venv) imports scipy.special
    python3-venv                              # build/venv: PyPI's safetensors beside Debian's torch
    python3-sklearn                           # the handwritten digits of the ResNet convergence test
    chromium python3-html5lib                 # nebula-report: its page rendered headless and parsed strictly
    iproute2 nftables                         # tools/netns-cluster: namespaces, veth, tbf rate limits, loss
    slurm-wlm munge                           # tools/slurm-local: the Slurm cluster of the job-script tests
    shellcheck                                # the job scripts are linted in make check
    environment-modules                       # the modulefile of make install is loaded in a test
    xxhash zstd                               # xxh128sum and zstd: nebula-model's objects rebuilt by hand in its tests
)
# Optional: `make fuzz` only (libFuzzer and the sanitizer runtimes, OpenMP for clang).
FUZZ_PKGS=(clang libclang-rt-dev libomp-dev)
VENV=$ROOT/build/venv
VENV_PKGS=(safetensors==0.8.0 tensorboard==2.21.0 transformers==4.46.3 tokenizers==0.20.3)
# Installed with pip --no-deps: Opacus 1.5.2 pins torch>=2.0, which would pull a new torch
# over Debian's; the RDP analysis the tests use needs only numpy and scipy (Debian's).
# ONNX Runtime (the edge engine's reference) likewise: its wheel asks for numpy >= 2 only
# through its dependencies; inference runs with Debian's numpy 1.24 and these three.
VENV_NODEPS=(opacus==1.5.2 onnxruntime==1.32.0 flatbuffers==25.12.19 coloredlogs==15.0.1 humanfriendly==10.0)

have() { command -v "$1" >/dev/null 2>&1; }
is_debian_root() { [ "$(id -u)" -eq 0 ] && have apt-get && have dpkg-query; }

# Debian packages of a list that are not installed (empty off Debian).
missing_pkgs() {
    have dpkg-query || return 0
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

apt_install() {
    [ $# -gt 0 ] || return 0
    echo "nebula: installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "$@"
}

# ---- build probes ---------------------------------------------------------------
probe_vars() {
    if [ -z "${NEBULA_PROBE_CC:-}" ]; then
        eval "$(make -C "$ROOT" --no-print-directory -s probe-vars)"
    fi
}

# probe NAME HINT CODE: compile and link CODE with the build's flags; on failure
# print NAME, HINT and the compiler's first error.
PROBE_FAILED=()
probe() {
    local name=$1 hint=$2 code=$3 dir err
    dir=$(mktemp -d)
    printf '%s\n' "$code" > "$dir/p.c"
    # shellcheck disable=SC2086 # the flags are word lists
    if err=$($NEBULA_PROBE_CC -std=c11 -D_GNU_SOURCE -fopenmp -I"$ROOT/kernels" $NEBULA_PROBE_CFLAGS "$dir/p.c" -o "$dir/p" \
                 $NEBULA_PROBE_LIBS 2>&1); then
        printf '  ✓ %-10s %s\n' "$name" "$(probe_version "$name")"
    else
        printf '  ✗ %-10s not usable: %s\n' "$name" "$hint"
        printf '%s\n' "$err" | grep -m1 -E 'error|undefined' | sed 's/^/               /'
        PROBE_FAILED+=("$name")
    fi
    rm -rf "$dir"
}

probe_version() {
    case $1 in
        MPI)     mpirun --version 2>/dev/null | head -1 || true ;;
        HDF5)    pkg-config --modversion hdf5-openmpi hdf5 2>/dev/null | head -1 || true ;;
        BLAS)    echo "$NEBULA_PROBE_BLAS $(pkg-config --modversion "$NEBULA_PROBE_BLAS" 2>/dev/null || true)" ;;
        *)       pkg-config --modversion "$(echo "$1" | tr 'A-Z' 'a-z' | sed 's/isa-l/libisal/; s/^pcre2$/libpcre2-8/; s/^utf8proc$/libutf8proc/; s/^xxhash$/libxxhash/; s/^zstd$/libzstd/; s/^protobuf-c$/libprotobuf-c/')" 2>/dev/null || true ;;
    esac
}

probe_all() {
    probe_vars
    PROBE_FAILED=()
    if ! have "${NEBULA_PROBE_CC%% *}"; then
        printf '  ✗ %-10s %s not found (MPICC=/path/to/mpicc, or module load openmpi)\n' MPI "$NEBULA_PROBE_CC"
        PROBE_FAILED+=(MPI)
        return
    fi
    probe MPI "mpicc cannot build an MPI program (MPICC=...)" \
        '#include <mpi.h>
int main(void) { int v, s; return MPI_Get_version(&v, &s); }'
    probe HDF5 "a parallel HDF5 (HDF5_DIR=prefix, or module load hdf5/parallel)" \
        '#include <hdf5.h>
#ifndef H5_HAVE_PARALLEL
#error this HDF5 was built without MPI: a parallel build is needed
#endif
int main(void) { unsigned a, b, c; return H5get_libversion(&a, &b, &c) < 0; }'
    probe BLAS "a CBLAS (BLAS=openblas|blis|mkl|flexiblas, BLAS_DIR=prefix)" \
        '#include "cpu/blas.h"
int main(void) { float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1, &a, 1, &b, 1, 0, &c, 1); return c != 1; }'
    probe oneDNN "oneDNN (ONEDNN_DIR=prefix, or module load onednn)" \
        '#include <dnnl.h>
int main(void) { return dnnl_version() == 0; }'
    probe hwloc "hwloc (PKG_CONFIG_PATH to its hwloc.pc)" \
        '#include <hwloc.h>
int main(void) { return hwloc_get_api_version() == 0; }'
    probe inih "inih (PKG_CONFIG_PATH to its inih.pc)" \
        '#include <ini.h>
int main(void) { return ini_parse_string("", 0, 0); }'
    probe jansson "jansson (PKG_CONFIG_PATH to its jansson.pc)" \
        '#include <jansson.h>
int main(void) { json_t *j = json_object(); json_decref(j); return 0; }'
    probe ISA-L "ISA-L (PKG_CONFIG_PATH to its libisal.pc)" \
        '#include <stdint.h>
#include <isa-l/crc.h>
int main(void) { return crc32_gzip_refl(0, (const unsigned char *)"", 0) != 0; }'
    probe PCRE2 "PCRE2 with 8-bit code units (PKG_CONFIG_PATH to its libpcre2-8.pc)" \
        '#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
int main(void) { uint32_t u = 0; return pcre2_config(PCRE2_CONFIG_UNICODE, &u) < 0 || !u; }'
    probe utf8proc "utf8proc (PKG_CONFIG_PATH to its libutf8proc.pc)" \
        '#include <utf8proc.h>
int main(void) { return utf8proc_tolower(65) != 97; }'
    probe libpng "libpng (PKG_CONFIG_PATH to its libpng.pc)" \
        '#include <png.h>
int main(void) { return png_access_version_number() == 0; }'
    probe libjpeg "libjpeg or libjpeg-turbo (PKG_CONFIG_PATH to its libjpeg.pc)" \
        '#include <stdio.h>
#include <jpeglib.h>
int main(void) { struct jpeg_decompress_struct c; struct jpeg_error_mgr e; c.err = jpeg_std_error(&e); jpeg_create_decompress(&c); jpeg_destroy_decompress(&c); return 0; }'
    probe libsodium "libsodium (PKG_CONFIG_PATH to its libsodium.pc)" \
        '#include <sodium.h>
int main(void) { return sodium_init() < 0; }'
    probe xxhash "libxxhash (PKG_CONFIG_PATH to its libxxhash.pc)" \
        '#include <xxhash.h>
int main(void) { return XXH3_128bits("", 0).low64 == 0; }'
    probe zstd "libzstd (PKG_CONFIG_PATH to its libzstd.pc)" \
        '#include <zstd.h>
int main(void) { return ZSTD_versionNumber() == 0; }'
    probe protobuf-c "libprotobuf-c (PKG_CONFIG_PATH to its libprotobuf-c.pc) and protoc-c on PATH" \
        '#include <protobuf-c/protobuf-c.h>
int main(void) { return protobuf_c_version_number() == 0; }'
    if ! have protoc-c; then
        printf '  ✗ %-10s protoc-c not found: the ONNX messages are compiled with it (protobuf-c-compiler)\n' protoc-c
        PROBE_FAILED+=(protoc-c)
    fi
    probe zlib "zlib" \
        '#include <zlib.h>
int main(void) { return crc32(0, 0, 0) != 0; }'
    if [[ "$NEBULA_PROBE_CFLAGS" == *NEBULA_PAPI* ]]; then
        probe PAPI "PAPI (or PAPI=0: the profiler reports its counters n/a)" \
            '#include <papi.h>
int main(void) { return PAPI_is_initialized() < 0; }'
    else
        printf '  - %-10s not built in (PAPI=0 or no libpapi): profiler counters report n/a\n' PAPI
    fi
}

# ---- test tools -----------------------------------------------------------------
venv_ok() {
    local p
    [ -x "$VENV/bin/python" ] || return 1
    for p in "${VENV_PKGS[@]}" "${VENV_NODEPS[@]}"; do
        "$VENV/bin/python" -c 'import sys; from importlib.metadata import version
n, v = sys.argv[1].split("=="); sys.exit(version(n) != v)' "$p" 2>/dev/null || return 1
    done
}

venv_install() {
    venv_ok && return 0
    # A venv whose python runs gains what it lacks (pip skips the pins already met); a
    # missing or broken one is made again.
    if ! "$VENV/bin/python" -c '' 2>/dev/null; then
        echo "nebula: creating $VENV (python3 -m venv --system-site-packages)"
        if ! /usr/bin/python3 -m venv --clear --system-site-packages "$VENV"; then
            echo "nebula: python3 -m venv failed; on Debian/Ubuntu it needs python3-venv" >&2
            return 2
        fi
    fi
    echo "nebula: installing ${VENV_PKGS[*]} and, without their dependencies, ${VENV_NODEPS[*]} into $VENV from PyPI"
    if ! "$VENV/bin/python" -m pip install -q "${VENV_PKGS[@]}" ||
       ! "$VENV/bin/python" -m pip install -q --no-deps "${VENV_NODEPS[@]}"; then
        echo "nebula: pip could not install ${VENV_PKGS[*]} ${VENV_NODEPS[*]} into $VENV: is PyPI reachable?" \
             "(PIP_INDEX_URL or PIP_FIND_LINKS can point pip at a mirror or a directory of wheels)" >&2
        return 2
    fi
    venv_ok || { echo "nebula: $VENV still lacks ${VENV_PKGS[*]} ${VENV_NODEPS[*]} after pip install" >&2; return 2; }
}

mark() { if "$@" >/dev/null 2>&1; then printf '✓'; else printf '✗'; fi; }
pymods() { /usr/bin/python3 -c 'import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' "$@"; }

report_tests() {
    echo "nebula: test tools (a missing one makes the tests that need it fail or skip, never the build)"
    printf '  %s h5dump     %s\n' "$(mark have h5dump)" "$(command -v h5dump || echo 'not found (hdf5-tools)')"
    printf '  %s Python     torch, torchvision, h5py, numpy, sklearn, html5lib\n' \
        "$(mark pymods torch torchvision h5py numpy sklearn html5lib)"
    if venv_ok; then printf '  ✓ venv       %s: %s\n' "$VENV" "${VENV_PKGS[*]} ${VENV_NODEPS[*]}"
    else printf '  ✗ venv       %s: missing or without %s (make deps-test)\n' "$VENV" "${VENV_PKGS[*]} ${VENV_NODEPS[*]}"; fi
    printf '  %s Slurm      %s, munge %s\n' "$(mark have slurmctld)" \
        "$(slurmctld -V 2>/dev/null || echo 'slurmctld not found')" "$(mark have munged)"
    # UCX and PMIx are OpenMPI's and Slurm's plugins (libucx0, libpmix2 come with them):
    # Nebula links neither, so their runtime components are what counts.
    printf '  %s UCX        OpenMPI pml ucx component (the UCX test: mpi/ucx-pml)\n' \
        "$(mark bash -c 'ompi_info --parsable | grep -q mca:pml:ucx')"
    printf '  %s PMIx       Slurm mpi_pmix plugin (srun --mpi=pmix in the job scripts)\n' \
        "$(mark bash -c 'ls /usr/lib/*/slurm-wlm/mpi_pmix*.so')"
    printf '  %s modules    %s\n' "$(mark test -f /usr/share/modules/init/bash)" "environment-modules (the modulefile test)"
    printf '  %s others     chromium %s, nft %s, shellcheck %s, help2man %s\n' \
        "$(mark have chromium)" "$(mark have chromium)" "$(mark have nft)" "$(mark have shellcheck)" "$(mark have help2man)"
    local nvcc
    nvcc=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
    if [ -n "$nvcc" ]; then
        local cinc  # the toolkit nvcc itself names (PATH may hold a wrapper script)
        cinc="$("$nvcc" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)/../include"
        printf '  ✓ CUDA       %s (NCCL %s, cuDNN %s)\n' "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" \
            "$(mark test -f "$cinc/nccl.h")" "$(mark test -f "$cinc/cudnn.h")"
    else
        printf '  - CUDA       nvcc not found (CPU build only)\n'
    fi
    printf '  %s libFuzzer  clang %s (make fuzz only)\n' "$(mark have clang)" "$(clang -dumpversion 2>/dev/null || echo '-')"
}

report() {
    echo "nebula: build dependencies (compiled and linked with the build's flags; mk/detect.mk)"
    probe_all
    report_tests
    if [ ${#PROBE_FAILED[@]} -gt 0 ]; then
        echo "nebula: cannot build without: ${PROBE_FAILED[*]}" >&2
        return 1
    fi
}

ensure() {
    probe_all >/dev/null
    [ ${#PROBE_FAILED[@]} -eq 0 ] && return 0
    if is_debian_root; then
        mapfile -t m < <(missing_pkgs "${BUILD_PKGS[@]}")
        apt_install "${m[@]}"
        # The flags make computed before the install may lack what it brought: ask again.
        unset NEBULA_PROBE_CC
        probe_all >/dev/null
        [ ${#PROBE_FAILED[@]} -eq 0 ] && return 0
    fi
    echo "nebula: the build needs libraries that were not found:" >&2
    probe_all | grep '✗' >&2 || true
    if have dpkg-query; then
        mapfile -t m < <(missing_pkgs "${BUILD_PKGS[@]}")
        [ ${#m[@]} -eq 0 ] || echo "  on Debian/Ubuntu: sudo apt-get install ${m[*]} (or make deps as root)" >&2
    fi
    echo "  on a cluster: module load openmpi hdf5/parallel openblas hwloc, or point the variables of" >&2
    echo "  mk/detect.mk (HDF5_DIR, BLAS, BLAS_DIR, ONEDNN_DIR, MPICC, PKG_CONFIG_PATH) at them" >&2
    return 2
}

ensure_test() {
    if is_debian_root; then
        mapfile -t m < <(missing_pkgs "${TEST_PKGS[@]}")
        apt_install "${m[@]}" || echo "nebula: could not install the test packages ${m[*]}" >&2
    fi
    venv_install || echo "nebula: continuing without build/venv: the tests that read files back with" \
                         "safetensors and tensorboard, or compare with Opacus, will fail" >&2
    return 0
}

install_all() {
    if is_debian_root; then
        mapfile -t m < <(missing_pkgs "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${FUZZ_PKGS[@]}")
        if [ ${#m[@]} -eq 0 ]; then echo "nebula: every package is installed"; else apt_install "${m[@]}"; fi
    else
        mapfile -t m < <(missing_pkgs "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${FUZZ_PKGS[@]}")
        if [ ${#m[@]} -gt 0 ]; then
            echo "nebula: missing packages: ${m[*]}" >&2
            echo "  on Debian/Ubuntu: sudo apt-get install ${m[*]}" >&2
        elif ! have dpkg-query; then
            echo "nebula: not Debian: install the libraries of mk/detect.mk with the system's packages or modules" >&2
        fi
    fi
    venv_install
    # The flags make computed before the install may lack what it brought: ask again.
    unset NEBULA_PROBE_CC
}

install_test() {
    if is_debian_root; then
        mapfile -t m < <(missing_pkgs "${TEST_PKGS[@]}")
        apt_install "${m[@]}"
    fi
    venv_install
}

case "${1:-report}" in
    report)       report ;;
    ensure)       ensure ;;
    ensure-test)  ensure_test ;;
    install)      install_all; report ;;
    install-test) install_test; report_tests ;;
    *) echo "usage: tools/deps.sh report|ensure|ensure-test|install|install-test" >&2; exit 2 ;;
esac
