#!/usr/bin/env bash
# The build on a host that is not Debian-as-root, simulated on this one: a copy of the
# tree owned by an unprivileged user, built by that user with dpkg, dpkg-query and
# apt-get hidden from PATH, so tools/deps.sh can only find the libraries the way it
# would on RHEL or a login node with modules: pkg-config and compile-and-link probes.
#  - the dependency probe passes and the build proceeds: the objects that include each
#    library's headers (HDF5, BLAS, oneDNN, hwloc, inih, jansson, ISA-L, PAPI) are
#    compiled again, nebula-ckpt and a unit test are linked, and both run as the user;
#  - a library that cannot be found (HDF5_DIR pointing nowhere) stops the build with
#    exit 2 naming HDF5 and the variable, and installs nothing.
# The rest of the objects come from this tree's build (same flags), which keeps the test
# to about a minute instead of a full build's ten.
cd "$(dirname "$0")/../.." || exit 1
. validation/cli/lib.sh

[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to create the unprivileged user's copy"; exit 77; }
user=nobody
id "$user" >/dev/null 2>&1 || { echo "SKIP: no user '$user' to build as"; exit 77; }
[ -f build/lib/libcore.a ] || { echo "FAIL - build the tree first (make)"; exit 1; }

# The tree as git sees it (with sources' times kept, so the copied objects are up to
# date) plus the objects and libraries of this build, owned by the user.
src=$tmp/src
mkdir -p "$src"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$src"
mkdir -p "$src/build"
cp -a build/obj build/lib "$src/build/"
rm -f "$src"/build/lib/*.a "$src"/build/lib/libnebula.so*  # relinked from the objects, old and new
for o in libcore/ckpt/ckpt_file libcore/base/config libcore/base/runtime libcore/base/provenance \
         kernels/cpu/matmul kernels/cpu/blas kernels/cpu/dnn libcore/train/observe/profile_papi libcore/train/train; do
    rm -f "$src/build/obj/$o.o"
done
chown -R "$user" "$tmp"
chmod 755 "$tmp"

# PATH without the package manager: every other command of the usual directories.
bin=$tmp/bin
mkdir -p "$bin"
for d in /usr/local/bin /usr/bin /bin /usr/sbin /sbin; do
    for f in "$d"/*; do
        n=${f##*/}
        case $n in dpkg|dpkg-*|apt|apt-*|aptitude) continue ;; esac
        [ -e "$bin/$n" ] || ln -s "$f" "$bin/$n"
    done
done
check "dpkg-query and apt-get are hidden from the user's PATH" \
    bash -c "PATH='$bin'; ! command -v dpkg-query && ! command -v apt-get"

as_user() {  # as_user SCRIPT: run SCRIPT in the copy as the user, with the reduced PATH
    setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups \
        env -i HOME="$tmp" TMPDIR="$tmp" PATH="$bin" LANG=C.UTF-8 bash -c "cd '$src' && $1"
}
expect "make as $user without dpkg: the probes find every library" 0 "✓ HDF5" -- \
    as_user 'make deps-report'
expect "make build/bin/nebula-ckpt as $user without dpkg" 0 "LINK    build/bin/nebula-ckpt" -- \
    as_user 'make -j2 build/bin/nebula-ckpt build/test/unit/test_config'
check "the objects that include each library were compiled again" \
    test -f "$src/build/obj/libcore/ckpt/ckpt_file.o" -a -f "$src/build/obj/kernels/cpu/dnn.o" \
         -a -f "$src/build/obj/kernels/cpu/blas.o" -a -f "$src/build/obj/libcore/base/runtime.o"
expect "the user's nebula-ckpt runs" 0 "nebula-ckpt 0.1.0" -- as_user 'build/bin/nebula-ckpt --version'
expect "the user's unit test passes" 0 "" -- as_user 'build/test/unit/test_config'
rm -f "$src/build/deps.mk"
expect "a library that is not there: exit 2, named with its variable" 2 "HDF5_DIR=prefix" -- \
    as_user 'make HDF5_DIR=/nonexistent build/bin/nebula-ckpt'
check "and nothing was installed or built after it" test ! -e "$src/build/deps.mk"
finish
