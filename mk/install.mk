# install.mk — the shared library, the umbrella command and `make install`.
#
#   make install PREFIX=/opt/nebula DESTDIR=$PWD/stage
#
#   PREFIX/bin/nebula, nebula-{train,bench,ckpt,chaos,report}
#   PREFIX/lib/libnebula.so.0 (libcore + the CPU kernels, + CUDA kernels when built),
#              libnebula.so, pkgconfig/nebula.pc
#   PREFIX/include/nebula/<module>/*.h   the public headers (no *_impl.h)
#   PREFIX/share/nebula/{configs,jobscripts,chaos}
#   PREFIX/share/man/man1/nebula*.1      generated from --help by help2man
#   PREFIX/share/modulefiles/nebula/VERSION   for `module use PREFIX/share/modulefiles`
#
# The one decision: the executables stay statically linked to libcore (they run from
# the build tree and from any copy of bin/ alike); libnebula.so is for programs of the
# users', built with `pkg-config --cflags --libs nebula`, from the same PIC objects.

PREFIX  ?= /usr/local
DESTDIR ?=
NEBULA_RELEASE := 0.1.0
SOMAJOR := 0
SONAME  := libnebula.so.$(SOMAJOR)

SO_OBJ := $(patsubst %.c,$(B)/obj/%.o,$(LIBCORE_SRC) $(KCPU_SRC)) $(KCPU_VAR_OBJ) $(B)/obj/gen/deploy/onnx.pb-c.o \
          $(if $(CUDA_ON),$(patsubst %.cu,$(B)/obj/%.o,$(KCUDA_SRC)))
$(B)/lib/$(SONAME): $(SO_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/lib/libnebula.so: $(B)/lib/$(SONAME)
	$(Q)ln -sf $(SONAME) $@
all: $(B)/lib/libnebula.so

# The umbrella command: apps/nebula is not a nebula-<app>.
$(B)/bin/nebula: $(B)/obj/apps/nebula/main.o $(LIBS)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)
all: $(B)/bin/nebula

# Headers users include: every module header but the private *_impl.h, in the layout
# the sources include them by ("comm/comm.h", "cpu/blas.h").
PUBLIC_H := $(filter-out %_impl.h,$(shell find libcore -name '*.h' | sort)) \
            $(filter-out %/isa_variant.h,$(wildcard kernels/cpu/*.h kernels/cuda/*.h))
INSTALL_BINS := $(B)/bin/nebula $(BINS)

# The pkg-config file: the flags of the libraries the headers include (MPI, HDF5, jansson,
# oneDNN), and MPI's link flags, so a plain cc works as well as mpicc.
MPI_COMPILE := $(or $(shell $(MPICC) --showme:compile 2>/dev/null),$(filter -I%,$(MPI_SHOW)))
MPI_LINK    := $(or $(shell $(MPICC) --showme:link 2>/dev/null),$(filter -L% -l% -Wl%,$(MPI_SHOW)))
$(B)/nebula.pc: FORCE
	@printf '%s\n' 'prefix=$(PREFIX)' 'exec_prefix=$${prefix}' 'libdir=$${prefix}/lib' \
	    'includedir=$${prefix}/include' '' 'Name: nebula' \
	    'Description: Nebula core library: communication, models, data, DGC-Pro, HDF5 checkpoints, trainer' \
	    'Version: $(NEBULA_RELEASE)' \
	    'Cflags: -I$${includedir}/nebula -fopenmp $(strip $(DEP_CFLAGS) $(MPI_COMPILE))' \
	    'Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lnebula -fopenmp $(strip $(MPI_LINK))' \
	    'Libs.private: $(strip $(LDLIBS))' > $@

# libnebula-nano's own pkg-config file: the edge runtime alone (libc, libm, OpenMP),
# for programs that link no MPI or HDF5 (docs/edge.md).
$(B)/nebula-nano.pc: FORCE
	@printf '%s\n' 'prefix=$(PREFIX)' 'exec_prefix=$${prefix}' 'libdir=$${prefix}/lib' \
	    'includedir=$${prefix}/include' '' 'Name: nebula-nano' \
	    'Description: Nebula edge runtime: loads and runs .neb models (no MPI, no HDF5, no BLAS)' \
	    'Version: $(NEBULA_RELEASE)' \
	    'Cflags: -I$${includedir}/nebula' \
	    'Libs: -L$${libdir} -lnebula-nano -fopenmp -lm' > $@

# nebula.pc and the modulefile name PREFIX: written again on every install.
# The modulefile (Tcl: environment-modules and Lmod both read it).
$(B)/modulefile: packaging/modulefile.in FORCE
	@sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(NEBULA_RELEASE)|g' $< > $@

# Man pages from --help and --version (help2man); without help2man, none, and says so.
MANS := $(patsubst $(B)/bin/%,$(B)/man/%.1,$(INSTALL_BINS))
$(B)/man/%.1: $(B)/bin/%
	@mkdir -p $(dir $@)
	$(Q)help2man --no-info --no-discard-stderr --name="$$($< --help 2>&1 | sed -n '1s/^[^ ]*[:-] *//p' | cut -c1-70)" \
	    --output=$@ $< >/dev/null 2>&1 || { rm -f $@; echo "nebula: help2man failed on $< (man page skipped)" >&2; }

.PHONY: install man
man: $(if $(shell command -v help2man 2>/dev/null),$(MANS))
install: $(INSTALL_BINS) $(B)/lib/libnebula.so $(NANO_LIB) man $(B)/nebula.pc $(B)/nebula-nano.pc $(B)/modulefile
	$(Q)d='$(DESTDIR)$(PREFIX)'; \
	 install -d "$$d/bin" "$$d/lib/pkgconfig" "$$d/share/man/man1" "$$d/share/nebula" \
	     "$$d/share/modulefiles/nebula" && \
	 install -m 755 $(INSTALL_BINS) "$$d/bin/" && \
	 install -m 755 $(B)/lib/$(SONAME) "$$d/lib/" && ln -sf $(SONAME) "$$d/lib/libnebula.so" && \
	 install -m 644 $(B)/nebula.pc $(B)/nebula-nano.pc "$$d/lib/pkgconfig/" && \
	 install -m 644 $(NANO_LIB) "$$d/lib/" && \
	 if [ -x $(B)/aarch64/bin/nebula-infer ]; then \
	     install -D -m 755 $(B)/aarch64/bin/nebula-infer "$$d/share/nebula/aarch64/nebula-infer"; fi && \
	 for h in $(PUBLIC_H); do t="$${h#libcore/}"; t="$${t#kernels/}"; \
	     install -D -m 644 "$$h" "$$d/include/nebula/$$t" || exit 1; done && \
	 cp -R configs jobscripts chaos "$$d/share/nebula/" && \
	 install -m 644 $(B)/modulefile "$$d/share/modulefiles/nebula/$(NEBULA_RELEASE)" && \
	 if ls $(B)/man/*.1 >/dev/null 2>&1; then install -m 644 $(B)/man/*.1 "$$d/share/man/man1/"; \
	 else echo "nebula: no man pages (help2man not found; make deps installs it)"; fi
	@echo "nebula: installed into $(DESTDIR)$(PREFIX) (module use $(PREFIX)/share/modulefiles; module load nebula)"
