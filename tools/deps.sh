#!/usr/bin/env bash
# deps.sh — detect, report and install Nebula's dependencies (Debian 12 package names).
#
#   tools/deps.sh report    print ✓/✗ per dependency (MPI and its PMLs, parallel HDF5, BLAS, ...);
#                           exit 1 when a required package is missing
#   tools/deps.sh install   apt-get install every missing package (root), else print how;
#                           then the Python environment below
#   tools/deps.sh ensure    install only when something required is missing; the Python
#                           environment when it is missing
#
# Required packages are what the CPU build and `make check` need; CUDA, NCCL and cuDNN are
# optional and only reported.
#
# The Python environment build/venv is Debian's python3 with its system packages visible
# (torch, torchvision, h5py, numpy come from apt, above) plus what Debian does not ship,
# from PyPI: the official safetensors package, which validation/cli/test_ckpt_torch.sh
# loads nebula-ckpt's files with. pip honours PIP_INDEX_URL and PIP_FIND_LINKS (a mirror,
# a directory of wheels) for machines without PyPI.
set -euo pipefail

REQUIRED_PKGS=(
    build-essential pkg-config
    openmpi-bin libopenmpi-dev            # MPI (OpenMPI 4.1)
    libhdf5-openmpi-dev hdf5-tools        # parallel HDF5 and h5dump
    libopenblas-dev libopenblas-openmp-dev   # BLAS for GEMM (the OpenMP build is linked)
    libdnnl-dev                              # oneDNN: direct convolutions and batch norm for CNNs
    libucx-dev libpmix-dev                # UCX transport, PMIx for srun --mpi=pmix
    libpapi-dev libhwloc-dev              # hardware counters, topology and binding
    libinih-dev libjansson-dev zlib1g-dev # INI config parser, JSON, CRC-32 combination
    libisal-dev                           # ISA-L: CRC-32 at memory speed (PCLMUL), zlib-compatible
    python3-torch python3-torchvision python3-h5py python3-numpy   # reference-vs-PyTorch validation
    python3-venv                          # build/venv (below): PyPI's safetensors beside Debian's torch
    python3-sklearn                       # the handwritten digits of the ResNet convergence test
    chromium python3-html5lib             # nebula-report: its page rendered headless and parsed strictly (test report/html)
    iproute2 nftables                     # tools/netns-cluster: namespaces, veth, tbf rate limits, packet loss
    slurm-wlm munge                       # tools/slurm-local: the Slurm cluster the job-script tests start
    shellcheck                            # the job scripts are linted in make check
)
# Optional: `make fuzz` only (libFuzzer and the sanitizer runtimes, OpenMP for clang);
# `make check` replays the fuzz corpus with gcc's sanitizers and needs none of them.
FUZZ_PKGS=(clang libclang-rt-dev libomp-dev)
# PyPI packages of build/venv, at the version the checks were written against:
# safetensors (the converter's tests), tensorboard (its own event-file reader checks the
# trainer's RUN_DIR/tb files: validation/cli/test_tensorboard.sh).
VENV=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/venv
VENV_PKGS=(safetensors==0.8.0 tensorboard==2.21.0)

missing_pkgs() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

mark() { if "$@" >/dev/null 2>&1; then printf '✓'; else printf '✗'; fi; }

# True when build/venv runs and holds every VENV_PKGS version (without importing torch,
# which takes seconds).
venv_ok() {
    local p
    [ -x "$VENV/bin/python" ] || return 1
    for p in "${VENV_PKGS[@]}"; do
        "$VENV/bin/python" -c 'import sys; from importlib.metadata import version
n, v = sys.argv[1].split("=="); sys.exit(version(n) != v)' "$p" 2>/dev/null || return 1
    done
}

venv_install() {
    venv_ok && return 0
    echo "nebula: creating $VENV (python3 -m venv --system-site-packages) with ${VENV_PKGS[*]} from PyPI"
    if ! /usr/bin/python3 -m venv --clear --system-site-packages "$VENV"; then
        echo "nebula: python3 -m venv failed; on Debian/Ubuntu it needs python3-venv" \
             "(make deps as root installs it)" >&2
        return 2
    fi
    if ! "$VENV/bin/python" -m pip install -q "${VENV_PKGS[@]}"; then
        echo "nebula: pip could not install ${VENV_PKGS[*]} into $VENV: is PyPI reachable? (PIP_INDEX_URL" \
             "or PIP_FIND_LINKS can point pip at a mirror or a directory of wheels)" >&2
        return 2
    fi
    venv_ok || { echo "nebula: $VENV still lacks ${VENV_PKGS[*]} after pip install" >&2; return 2; }
}

report() {
    local nvcc pmls
    nvcc=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
    pmls=$(ompi_info --parsable 2>/dev/null | sed -n 's/^mca:pml:\([a-z0-9]*\):version:"mca.*/\1/p' | sort -u | tr '\n' ' ')
    echo "nebula: dependencies"
    printf '  %s MPI        %s (PMLs: %s)\n' "$(mark command -v mpicc)" \
        "$(mpirun --version 2>/dev/null | head -1 || echo 'not found')" "${pmls:-none}"
    printf '  %s HDF5       parallel=%s (h5dump: %s)\n' \
        "$(mark grep -q 'define H5_HAVE_PARALLEL 1' /usr/include/hdf5/openmpi/H5pubconf.h)" \
        "$(grep -q 'define H5_HAVE_PARALLEL 1' /usr/include/hdf5/openmpi/H5pubconf.h 2>/dev/null && echo yes || echo no)" \
        "$(command -v h5dump || echo no)"
    printf '  %s BLAS       %s\n' "$(mark pkg-config --exists openblas)" "$(pkg-config --modversion openblas 2>/dev/null || echo 'openblas not found')"
    printf '  %s oneDNN     %s\n' "$(mark test -f /usr/include/oneapi/dnnl/dnnl.h)" "$(dpkg-query -W -f='${Version}' libdnnl-dev 2>/dev/null || echo 'not found')"
    printf '  %s UCX        %s\n' "$(mark pkg-config --exists ucx)" "$(pkg-config --modversion ucx 2>/dev/null || echo 'not found')"
    printf '  %s PMIx       %s\n' "$(mark pkg-config --exists pmix)" "$(pkg-config --modversion pmix 2>/dev/null || echo 'not found')"
    printf '  %s PAPI       %s\n' "$(mark pkg-config --exists papi)" "$(pkg-config --modversion papi 2>/dev/null || echo 'not found')"
    printf '  %s hwloc      %s\n' "$(mark pkg-config --exists hwloc)" "$(pkg-config --modversion hwloc 2>/dev/null || echo 'not found')"
    printf '  %s inih       %s\n' "$(mark pkg-config --exists inih)" "$(pkg-config --modversion inih 2>/dev/null || echo 'not found')"
    printf '  %s jansson    %s\n' "$(mark pkg-config --exists jansson)" "$(pkg-config --modversion jansson 2>/dev/null || echo 'not found')"
    printf '  %s Slurm      %s, munge %s (job-script tests)\n' "$(mark command -v slurmctld)" \
        "$(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null || echo 'not found')" \
        "$(dpkg-query -W -f='${Version}' munge 2>/dev/null || echo 'not found')"
    # Package versions, not imports: importing torch takes seconds.
    local pyv
    pyv=$(dpkg-query -W -f='${Package} ${Version}\n' python3-torch python3-h5py python3-numpy 2>/dev/null | tr '\n' ' ')
    printf '  %s Python     %s\n' "$(mark dpkg-query -W -f='${Status}' python3-torch)" "${pyv:-python3-torch/h5py/numpy not found}"
    if venv_ok; then
        printf '  ✓ venv       %s: %s, system packages visible\n' "$VENV" "${VENV_PKGS[*]}"
    else
        printf '  ✗ venv       %s: missing or without %s (make deps creates it)\n' "$VENV" "${VENV_PKGS[*]}"
    fi
    if [ -n "$nvcc" ]; then
        local cinc; cinc="$(dirname "$(dirname "$nvcc")")/include"
        printf '  ✓ CUDA       %s\n' "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
        printf '  %s NCCL\n' "$(mark test -f "$cinc/nccl.h")"
        printf '  %s cuDNN\n' "$(mark test -f "$cinc/cudnn.h")"
    else
        printf '  ✗ CUDA       nvcc not found (CPU build only)\n  ✗ NCCL\n  ✗ cuDNN\n'
    fi
    local fuzz_missing
    fuzz_missing=$(missing_pkgs "${FUZZ_PKGS[@]}" | tr '\n' ' ')
    printf '  %s libFuzzer  %s\n' "$([ -z "$fuzz_missing" ] && echo ✓ || echo ✗)" \
        "${fuzz_missing:+missing $fuzz_missing}${fuzz_missing:-clang $(clang -dumpversion 2>/dev/null)} (make fuzz only)"
    # Optional parts (CUDA, fuzzing) only report; a missing required package fails.
    local missing
    missing=$(missing_pkgs "${REQUIRED_PKGS[@]}" | tr '\n' ' ')
    if [ -n "$missing" ]; then
        echo "nebula: required packages missing: $missing(make deps installs them)" >&2
        return 1
    fi
}

install() {
    install_pkgs
    venv_install
}

install_pkgs() {
    local missing
    mapfile -t missing < <(missing_pkgs "${REQUIRED_PKGS[@]}" "${FUZZ_PKGS[@]}")
    if [ ${#missing[@]} -eq 0 ]; then
        echo "nebula: all required packages are installed"
        return 0
    fi
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "nebula: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        echo "nebula: missing packages: ${missing[*]}" >&2
        echo "  on Debian/Ubuntu: sudo apt-get install ${missing[*]}" >&2
        echo "  on a cluster with modules, typically: module load openmpi hdf5/parallel openblas hwloc" >&2
        echo "  (inih and jansson are small: build them from source into \$HOME/.local if no module exists)" >&2
        return 2
    fi
}

case "${1:-report}" in
    report)  report ;;
    install) install; report ;;
    ensure)  if [ -n "$(missing_pkgs "${REQUIRED_PKGS[@]}")" ]; then install_pkgs; fi; venv_install ;;
    *) echo "usage: tools/deps.sh report|install|ensure" >&2; exit 2 ;;
esac
