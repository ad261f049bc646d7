#!/usr/bin/env bash
# make install as a cluster's software team does it, checked from the user's side:
#  - DESTDIR=stage PREFIX=/opt/nebula: the tree (bin, lib/libnebula.so + nebula.pc,
#    include/nebula, share/nebula, man pages, modulefile); a program of the user's,
#    compiled with `pkg-config --cflags --libs nebula`, links libnebula.so from the stage
#    and runs a 2-rank allreduce through comm_allreduce with the exact sum;
#  - PREFIX=<dir> (no DESTDIR): `module load nebula` with Debian's environment-modules
#    puts nebula on PATH, `nebula --version` names every part, `nebula ckpt` dispatches,
#    `man nebula-train` shows the page, and the job scripts' lib.sh finds the binaries
#    through PATH.
# The Spack recipe is checked for Python syntax (Spack itself is not installed here).
cd "$(dirname "$0")/../.." || exit 1
. validation/cli/lib.sh

stage=$tmp/stage
check "make install DESTDIR=stage PREFIX=/opt/nebula" make -s install DESTDIR="$stage" PREFIX=/opt/nebula
root=$stage/opt/nebula
for f in bin/nebula bin/nebula-train bin/nebula-ckpt bin/nebula-chaos lib/libnebula.so.0 lib/libnebula.so \
         lib/pkgconfig/nebula.pc include/nebula/comm/comm.h include/nebula/cpu/blas.h \
         lib/libnebula-nano.a lib/pkgconfig/nebula-nano.pc include/nebula/nano/nano.h bin/nebula-deploy bin/nebula-infer \
         share/nebula/jobscripts/train.sbatch share/nebula/jobscripts/lib.sh share/nebula/configs \
         share/modulefiles/nebula/0.1.0; do
    check "installed: $f" test -e "$root/$f"
done
check "no private header installed (*_impl.h)" bash -c "! find '$root/include' -name '*_impl.h' | grep -q ."
if command -v help2man >/dev/null; then
    check "man page installed: nebula-train.1" test -s "$root/share/man/man1/nebula-train.1"
fi

# A user's program against the staged library: pkgconf's --define-prefix takes the prefix
# from where nebula.pc lies, so the staged tree is used as if it were /opt/nebula.
cat > "$tmp/allreduce.c" <<'EOF'
#include <stdio.h>
#include "base/runtime.h"
#include "comm/comm.h"
int main(int argc, char **argv)
{
    runtime rt;
    runtime_options ro = { .bind = RUNTIME_BIND_NONE };
    if (runtime_init(&rt, &argc, &argv, &ro) != STATUS_OK) return 1;
    comm *c = NULL;
    comm_options co = { .backend = COMM_BACKEND_MPI, .algo = COMM_ALGO_AUTO };
    if (comm_init(&c, &rt, &co) != STATUS_OK) return 1;
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)(i + 1000 * rt.rank);
    if (comm_allreduce(c, x, 1000, REDUCE_DTYPE_F32, REDUCE_OP_SUM, COMM_ALGO_AUTO) != STATUS_OK) return 1;
    int wrong = 0;
    for (int i = 0; i < 1000; i++) wrong += x[i] != (float)(2 * i + 1000); /* (i) + (i + 1000) */
    if (rt.rank == 0) printf("allreduce over %d ranks: %d wrong\n", rt.size, wrong);
    comm_free(c);
    runtime_free(&rt);
    return wrong != 0;
}
EOF
pc() { PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --define-prefix "$@" nebula; }
check "pkg-config --modversion nebula" pc --modversion
# shellcheck disable=SC2046 # pkg-config's flags are word lists
check "a program compiled with pkg-config --cflags --libs nebula" \
    mpicc -std=c11 -o "$tmp/allreduce" "$tmp/allreduce.c" $(pc --cflags) $(pc --libs)
check "it links libnebula.so.0 from the stage" \
    bash -c "LD_LIBRARY_PATH='$root/lib' ldd '$tmp/allreduce' | grep -q '$root/lib/libnebula.so.0'"
expect "2-rank allreduce through libnebula.so" 0 "allreduce over 2 ranks: 0 wrong" -- \
    env LD_LIBRARY_PATH="$root/lib" $MPIRUN -np 2 "$tmp/allreduce"

# The edge runtime alone: a plain cc program against nebula-nano.pc, no MPI linked.
cat > "$tmp/nano.c" <<'EOF'
#include <stdio.h>
#include <nano/nano.h>
int main(int argc, char **argv) {
    nano_model *m;
    char err[256];
    nano_status st = nano_model_load(&m, argc > 1 ? argv[1] : "missing.neb", err, sizeof err);
    printf("isa %s; load: %s\n", nano_isa_name(), st == NANO_OK ? "ok" : err);
    if (st == NANO_OK) nano_model_free(m);
    return st == NANO_E_IO ? 0 : 1;
}
EOF
ncp() { PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --define-prefix "$@" nebula-nano; }
# shellcheck disable=SC2046 # pkg-config's flags are word lists
check "a program compiled with cc and pkg-config --cflags --libs nebula-nano" \
    cc -std=c11 -o "$tmp/nano" "$tmp/nano.c" $(ncp --cflags) $(ncp --libs)
check "it links no MPI, HDF5 or BLAS" bash -c "! ldd '$tmp/nano' | grep -E -q 'libmpi|libhdf5|blas'"
expect "it runs and names a missing model" 0 "cannot open missing.neb" -- "$tmp/nano"

# A real prefix: module load, the umbrella command, man, the job scripts' lib.sh.
prefix=$tmp/prefix
check "make install PREFIX=dir" make -s install PREFIX="$prefix"
if [ -f /usr/share/modules/init/bash ]; then
    mod() {  # mod SCRIPT: run SCRIPT in bash after module load nebula from the prefix
        bash -c ". /usr/share/modules/init/bash && module use '$prefix/share/modulefiles' && module load nebula && $1"
    }
    expect "module load nebula: nebula on PATH" 0 "$prefix/bin/nebula" -- mod 'command -v nebula'
    expect "nebula --version names every part" 0 "nebula-ckpt 0.1.0" -- mod 'nebula --version'
    expect "nebula --version names the libraries" 0 "HDF5" -- mod 'nebula --version'
    expect "nebula ckpt dispatches to nebula-ckpt" 0 "usage: nebula-ckpt" -- mod 'nebula ckpt --help'
    expect "nebula train --bogus: nebula-train's exit 2" 2 "--bogus" -- mod 'nebula train --bogus'
    expect "nebula nosuch: exit 2, named" 2 "no subcommand 'nosuch'" -- mod 'nebula nosuch'
    if command -v help2man >/dev/null && command -v man >/dev/null; then
        expect "man nebula-train shows the page" 0 "NEBULA-TRAIN" -- mod 'MANPAGER=cat man nebula-train | col -b'
    fi
    expect "the job scripts' lib.sh finds the binaries through NEBULA_BIN" 0 "bin=$prefix/bin" -- \
        mod "cd '$tmp' && NEBULA_HOME='$tmp' . \"\$NEBULA_JOBSCRIPTS/lib.sh\" && echo bin=\$NEBULA_BIN"
    expect "without the module, lib.sh finds them on PATH" 0 "bin=$prefix/bin" -- \
        bash -c "cd '$tmp' && PATH='$prefix/bin':\$PATH NEBULA_HOME='$tmp' . '$prefix/share/nebula/jobscripts/lib.sh' && echo bin=\$NEBULA_BIN"
else
    echo "skip - module load (environment-modules not installed: make deps-test)"
fi
check "the Spack recipe is valid Python" $PY -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' packaging/spack/package.py
finish
