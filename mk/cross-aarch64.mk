# cross-aarch64.mk — the aarch64 (Grace, GH200) cross build of kernels, libcore and the
# unit tests, into build/aarch64/. Included at the end of the Makefile; its own variables
# (XA_*) and rules, so the native build is untouched.
#
#   make aarch64        libcore, kernels/cpu and validation/unit's programs for aarch64
#   tools/cross-aarch64.sh test   the same, then every unit test under qemu-aarch64
#
# The one design decision: compile against a Debian arm64 sysroot with GCC's --sysroot
# (tools/cross-aarch64.sh deps fills build/aarch64/sysroot from Debian's arm64 packages),
# the same libraries and paths as on a Debian arm64 node. The target is baseline
# ARMv8-A: NEON is part of it, so one binary runs on every aarch64 login or compute node;
# the NEON loops need no run-time dispatch.

XA_B      := $(B)/aarch64
XA_SR     := $(XA_B)/sysroot
XA_ML     := $(XA_SR)/usr/lib/aarch64-linux-gnu
XA_CC     ?= $(if $(shell command -v ccache 2>/dev/null),ccache )aarch64-linux-gnu-gcc
# The native flags without the host's include paths (mk/detect.mk's DEP_CFLAGS), the x86
# vector-level variants and CUDA; the sysroot's OpenBLAS and PAPI instead.
XA_CFLAGS := $(filter-out -I/% -I$(B) -DNEBULA_ISA_VARIANTS=% -DNEBULA_CUDA=% $(DEP_CFLAGS),$(CFLAGS)) -I$(XA_B) \
             -DNEBULA_BLAS_OPENBLAS=1 -DNEBULA_PAPI=1 \
             --sysroot=$(XA_SR) -I$(XA_ML)/openmpi/include -I$(XA_SR)/usr/include/aarch64-linux-gnu/openblas-openmp \
             -I$(XA_SR)/usr/include/hdf5/openmpi
# Run paths are the node's paths (qemu-aarch64 -L maps them into the sysroot).
XA_RPATH  := /usr/lib/aarch64-linux-gnu
XA_LDLIBS := -linih -ljansson -lhwloc -ldnnl -L$(XA_ML)/hdf5/openmpi -Wl,-rpath,$(XA_RPATH)/hdf5/openmpi -lhdf5 \
             -lisal -lz -lpcre2-8 -lutf8proc -lpng16 -ljpeg -lsodium -lxxhash -lzstd -L$(XA_ML)/openblas-openmp -Wl,-rpath,$(XA_RPATH)/openblas-openmp -lopenblas -lpapi \
             -L$(XA_ML)/openmpi/lib -lmpi -lm
XA_LDFLAGS := --sysroot=$(XA_SR) -fopenmp
XA_UNIT   := $(patsubst validation/%.c,$(XA_B)/test/%,$(wildcard validation/unit/test_*.c))
XA_LIBS   := $(XA_B)/lib/libcore.a $(XA_B)/lib/libkernels.a

.PHONY: aarch64
aarch64: $(XA_UNIT)

$(XA_B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC A64  $<")
	$(Q)$(XA_CC) $(XA_CFLAGS) -c $< -o $@
$(XA_B)/obj/libcore/base/cli.o: $(XA_B)/version.h

# As the native build's version.h, without its dependency check of the host.
$(XA_B)/version.h: FORCE
	@mkdir -p $(dir $@)
	@v="git-$$(git describe --always --dirty 2>/dev/null || echo unknown)"; \
	 r="$$(git rev-parse --verify -q HEAD 2>/dev/null)" || r=unknown; \
	 text="$$(printf '#define NEBULA_VERSION "%s"\n#define NEBULA_GIT_REVISION "%s"' "$$v" "$${r:-unknown}")"; \
	 if [ "$$(cat $@ 2>/dev/null)" != "$$text" ]; then printf '%s\n' "$$text" > $@; fi

# libcore/deploy (ONNX import, the optimiser) is a host tool: not built for aarch64.
$(XA_B)/lib/libcore.a: $(patsubst %.c,$(XA_B)/obj/%.o,$(filter-out libcore/deploy/%,$(LIBCORE_SRC)))
$(XA_B)/lib/libkernels.a: $(patsubst %.c,$(XA_B)/obj/%.o,$(KCPU_SRC))
$(XA_LIBS):
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  AR A64  $@")
	$(Q)rm -f $@ && aarch64-linux-gnu-ar rcs $@ $^

$(XA_B)/test/%: $(XA_B)/obj/validation/%.o $(XA_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK A64 $@")
	$(Q)$(XA_CC) $(XA_LDFLAGS) -o $@ $< $(XA_LIBS) $(XA_LDLIBS)

-include $(shell find $(XA_B)/obj -name '*.d' 2>/dev/null)

# libnebula-nano and nebula-infer for aarch64: static, so the one file runs on any arm64
# Linux (a phone's or a Raspberry Pi's userland included) with nothing installed.
XA_NANO_LIB := $(XA_B)/lib/libnebula-nano.a
$(XA_NANO_LIB): $(patsubst %.c,$(XA_B)/obj/%.o,$(NANO_SRC))
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  AR A64  $@")
	$(Q)rm -f $@ && aarch64-linux-gnu-ar rcs $@ $^
$(XA_B)/bin/nebula-infer: $(patsubst %.c,$(XA_B)/obj/%.o,$(wildcard apps/infer/*.c)) $(XA_NANO_LIB)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK A64 $@")
	$(Q)$(XA_CC) $(XA_LDFLAGS) -static -o $@ $(filter %.o,$^) $(XA_NANO_LIB) -lm
.PHONY: aarch64-nano
aarch64-nano: $(XA_B)/bin/nebula-infer
aarch64: aarch64-nano
