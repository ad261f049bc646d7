#!/usr/bin/env bash
# The build's switches for a site whose libraries differ from Debian's defaults: BLAS=blis
# (Debian's OpenMP build of BLIS, found without a .pc file) and PAPI=0, in a build tree of
# their own. The dense and convolution kernel tests, whose GEMMs then run on BLIS, pass
# against their plain-loop references, the binaries link libblis and no OpenBLAS, and
# `nebula --version` names BLIS and says PAPI is not built in.
cd "$(dirname "$0")/../.." || exit 1
. validation/cli/lib.sh

tri=$(mpicc -dumpmachine)
[ -f "/usr/include/$tri/blis-openmp/cblas.h" ] || pkg-config --exists blis ||
    { echo "SKIP: no BLIS with a CBLAS header (Debian: libblis-openmp-dev, make deps-test)"; exit 77; }
B=build/blas-blis
check "make B=$B BLAS=blis PAPI=0 USE_CUDA=0" \
    make -s -j2 B=$B BLAS=blis PAPI=0 USE_CUDA=0 $B/test/unit/test_kernels_dense $B/test/unit/test_kernels_conv $B/bin/nebula
check "the dense kernels on BLIS match their references" $B/test/unit/test_kernels_dense
check "the convolution kernels on BLIS match their references" $B/test/unit/test_kernels_conv
check "linked with libblis, not OpenBLAS" bash -c "ldd $B/bin/nebula | grep -q libblis && ! ldd $B/bin/nebula | grep -q openblas"
expect "nebula --version names BLIS" 0 "BLAS      BLIS" -- $B/bin/nebula --version
expect "and PAPI not built in" 0 "PAPI      not built in" -- $B/bin/nebula --version
finish
