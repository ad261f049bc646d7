# Nebula — one entry point: deps, all, check, demo, bench.
#
#   make deps      install every missing Debian package (as root), or say what is missing
#   make           build libcore, kernels and every executable into build/
#   make check     build and run all tests; last line "N passed, N failed"
#   make demo      run the main job on an embedded default
#   make bench     the communication benchmark table of the README
#
# USE_CUDA=auto|0|1 (auto: build kernels/cuda when nvcc is present), VERBOSE=1 for full commands.

USE_CUDA ?= auto
VERBOSE  ?= 0
NP       ?= 4

CC      := mpicc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp -MMD -MP -Ilibcore -Ikernels -I$(B)
# OpenBLAS's OpenMP build shares the kernels' OpenMP thread pool; the default
# pthreads build would run its own threads beside OpenMP threads that are still
# spinning after each parallel region, and the two fight for the cores.
OPENBLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
CFLAGS  += -I/usr/include/x86_64-linux-gnu/openblas-openmp
# Parallel HDF5 (Debian's OpenMPI build) for checkpoints and image sets; zlib's CRC-32 for checksums.
HDF5_DIR := /usr/lib/x86_64-linux-gnu/hdf5/openmpi
CFLAGS  += -I/usr/include/hdf5/openmpi
LDLIBS  := -linih -ljansson -lhwloc -ldnnl -L$(HDF5_DIR) -Wl,-rpath,$(HDF5_DIR) -lhdf5 -lisal -lz \
           -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -lopenblas -lm
LDFLAGS += -fopenmp

ifeq ($(USE_CUDA),auto)
  ifneq ($(NVCC),)
    CUDA_ON := 1
  endif
else ifeq ($(USE_CUDA),1)
  ifeq ($(NVCC),)
    $(error USE_CUDA=1 but nvcc was not found; install the CUDA toolkit or use USE_CUDA=auto)
  endif
  CUDA_ON := 1
endif

ifeq ($(VERBOSE),1)
  Q :=
else
  Q := @
endif

B := build
LIBCORE_SRC := $(wildcard libcore/*.c)
KCPU_SRC    := $(wildcard kernels/cpu/*.c)
KCUDA_SRC   := $(wildcard kernels/cuda/*.cu)
APPS        := $(patsubst apps/%/,%,$(sort $(dir $(wildcard apps/*/*.c))))
BINS        := $(addprefix $(B)/bin/nebula-,$(APPS))
TEST_SRC    := $(wildcard validation/unit/test_*.c validation/mpi/test_*.c validation/reference/test_*.c)
TESTS       := $(patsubst validation/%.c,$(B)/test/%,$(TEST_SRC))

LIBS := $(B)/lib/libcore.a $(B)/lib/libkernels.a
ifdef CUDA_ON
  LIBS   += $(B)/lib/libkernels_cuda.a
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
  CFLAGS += -DNEBULA_CUDA=1
  NVFLAGS := -O2 -std=c++17 -Ikernels -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90 -Xcompiler -Wall,-Wextra,-Werror
endif

DEPS_STAMP := $(B)/.deps-ok

.PHONY: all deps deps-report check demo bench clean FORCE
.DEFAULT_GOAL := all

all: $(DEPS_STAMP) $(BINS) $(TESTS)
	@tools/deps.sh report
	@echo "nebula: built $(words $(BINS)) executable(s), $(words $(TESTS)) test programs; CUDA kernels: $(if $(CUDA_ON),built with $(NVCC),not built)"

# Dependencies are checked once per build tree (and again after `make clean`);
# tools/deps.sh installs what is missing when run as root.
$(DEPS_STAMP): tools/deps.sh
	$(Q)tools/deps.sh ensure
	$(Q)mkdir -p $(B) && touch $@

deps:
	$(Q)tools/deps.sh install

deps-report:
	$(Q)tools/deps.sh report

$(B)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(B)/obj/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVFLAGS) -c $< -o $@

# The version string: regenerated on every make, rewritten only when it changes, so
# a commit rebuilds the one object that prints it and nothing else.
$(B)/version.h: FORCE | $(DEPS_STAMP)
	@v="git-$$(git describe --always --dirty 2>/dev/null || echo unknown)"; \
	 line="#define NEBULA_VERSION \"$$v\""; \
	 if [ "$$(cat $@ 2>/dev/null)" != "$$line" ]; then echo "$$line" > $@; fi
$(B)/obj/libcore/cli.o: $(B)/version.h
FORCE:

$(B)/lib/libcore.a: $(patsubst %.c,$(B)/obj/%.o,$(LIBCORE_SRC))
$(B)/lib/libkernels.a: $(patsubst %.c,$(B)/obj/%.o,$(KCPU_SRC))
$(B)/lib/libkernels_cuda.a: $(patsubst %.cu,$(B)/obj/%.o,$(KCUDA_SRC))
$(B)/lib/%.a:
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

define APP_RULE
$(B)/bin/nebula-$(1): $(patsubst %.c,$(B)/obj/%.o,$(wildcard apps/$(1)/*.c)) $(LIBS)
	@mkdir -p $$(dir $$@)
	@$$(if $$(filter 1,$$(VERBOSE)),,echo "  LINK    $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(LIBS) $$(LDLIBS)
endef
$(foreach a,$(APPS),$(eval $(call APP_RULE,$(a))))

$(B)/test/%: $(B)/obj/validation/%.o $(LIBS)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

check: all
	$(Q)tools/run-tests.sh validation/tests.list

demo: all
	$(Q)tools/demo.sh

bench: all
	$(Q)tools/bench-comm.sh

clean:
	rm -rf $(B)

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
.SECONDARY:
