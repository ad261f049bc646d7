# Nebula — one entry point: deps, all, test, check, demo, bench.
#
#   make deps      install every missing Debian package (as root), or say what is missing;
#                  make deps-test: only what the tests need (never needed to build)
#   make           build libcore, kernels and every executable into build/
#   make test      the quick tier: unit, MPI, reference-vs-PyTorch, emulated GPU kernels,
#                  fuzz replays and CLI errors (lines tagged `tier=quick` in
#                  validation/tests.list); last line "N passed, N failed, N skipped"
#   make check     build and run every test of validation/tests.list but the long tier
#                  (≤ 30 min on 2 cores), then check that no test wrote into the source
#                  tree (tree/unchanged); same last line
#   make check-long the long runs (`# tier=long`: DGC-Pro convergence, soaks), each with a
#                  short sibling in `make check`; jobscripts/validate.sbatch runs them too
#   make check-gpu the GPU tests (validation/gpu/tests.list) and the GPU benchmark table
#   make demo      run the main job on an embedded default
#   make bench     the communication benchmark table (docs/benchmarks.md)
#   make fuzz      fuzz the hostile-input readers and parsers, FUZZ_SECONDS (600) per target (needs clang)
#   make chaos     build/chaos/bin/nebula-train with the checkpoint fault points (-DCHAOS); part of `make`
#
# A test that cannot run here (not root, no GPU) exits 77 and is counted as skipped, never
# as passed; the runner's exit status is non-zero only when a test failed.
# USE_CUDA=auto|0|1 (auto: build kernels/cuda when nvcc is present), VERBOSE=1 for full commands.

USE_CUDA ?= auto
VERBOSE  ?= 0
NP       ?= 4

include mk/detect.mk

CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fopenmp -MMD -MP -Ilibcore -Ikernels -I$(B)
# Position-independent code, so the same objects make libnebula.so (make install);
# no semantic interposition, so calls inside the library stay direct and inlinable.
CFLAGS  += -fPIC -fno-semantic-interposition
# No a * b + c contracted into an FMA (GCC's ISO-mode default, not clang's): the kernels'
# builds per vector level then give element-wise results bit for bit alike.
CFLAGS  += -ffp-contract=off
# The libraries mk/detect.mk found: parallel HDF5 (checkpoints, image sets), the CBLAS
# (with OpenBLAS, Debian's OpenMP build, which shares the kernels' OpenMP thread pool
# instead of running its own threads beside spinning OpenMP ones), oneDNN, PAPI (the
# profiler's counters, optional), inih, jansson, hwloc, ISA-L and zlib (checksums).
CFLAGS  += $(DEP_CFLAGS)
LDLIBS  := $(DEP_LIBS)
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
LIBCORE_SRC := $(shell find libcore -name "*.c" | sort)
KCPU_SRC    := $(wildcard kernels/cpu/*.c)
KCUDA_SRC   := $(wildcard kernels/cuda/*.cu)
# Kernels whose vectorised loops are built once more per x86 vector level, AVX2 and
# AVX-512 (kernels/cpu/isa_variant.h); isa_active() picks the build at run time.
KCPU_MULTI  := act16 attention gelu layernorm matmul xent
# The target: the compiler's (mpicc may not be installed yet when make reads this: the
# machine's then); the define tells the sources whether the variants exist.
ifneq ($(filter x86_64%,$(or $(shell $(CC) -dumpmachine 2>/dev/null),$(shell uname -m))),)
  KCPU_VAR_OBJ := $(foreach l,avx2 avx512,$(patsubst %,$(B)/obj/kernels/cpu/%.$(l).o,$(KCPU_MULTI)))
  CFLAGS += -DNEBULA_ISA_VARIANTS=1
endif
ISA_CFLAGS_avx2   := -mavx2 -mfma
ISA_CFLAGS_avx512 := -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512dq -mprefer-vector-width=512
# apps/nebula is the umbrella command `nebula` (mk/install.mk), not a nebula-<app>.
# apps/infer is nebula-infer, linked with libnebula-nano alone (below), not with libcore.
APPS        := $(filter-out nebula infer,$(patsubst apps/%/,%,$(sort $(dir $(wildcard apps/*/*.c)))))
BINS        := $(addprefix $(B)/bin/nebula-,$(APPS)) $(B)/bin/nebula-infer
TEST_SRC    := $(wildcard validation/unit/test_*.c validation/mpi/test_*.c validation/reference/test_*.c validation/deploy/test_*.c)
TESTS       := $(patsubst validation/%.c,$(B)/test/%,$(TEST_SRC))
# The GPU tests (validation/gpu): built with the CUDA kernels, run by `make check-gpu`.
GPU_TEST_SRC := $(wildcard validation/gpu/test_*.c)

LIBS := $(B)/lib/libcore.a $(B)/lib/libkernels.a
# ONNX's messages as C: protoc-c writes $(B)/gen/deploy/onnx.pb-c.[ch] from the subset
# of onnx.proto that libcore/deploy reads and writes; libprotobuf-c (mk/detect.mk) is
# their runtime.
CFLAGS += -I$(B)/gen
# CUDA: machine code for CUDA_ARCHS plus PTX of the newest (mk/detect.mk).
# The toolkit keeps cuBLAS/cuDNN in lib64 and NCCL in lib on some installs: both go on
# the search and run paths. NEBULA_CUDA_LIBS lists the libraries for tools/gpu-check.
ifdef CUDA_ON
  LIBS   += $(B)/lib/libkernels_cuda.a
  LDLIBS += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib \
            -lnccl -lcudnn -lcublasLt -lcublas -lcudart -lstdc++
  CFLAGS += -DNEBULA_CUDA=1 -I$(CUDA_HOME)/include
  NVFLAGS := -O3 -std=c++17 -Ikernels -Ilibcore $(CUDA_GENCODE) --expt-relaxed-constexpr \
             -Xcompiler -Wall,-Wextra,-Werror,-fPIC
  TESTS  += $(patsubst validation/%.c,$(B)/test/%,$(GPU_TEST_SRC))
endif

DEPS_STAMP := $(B)/deps.mk

.PHONY: all deps deps-test deps-report probe-vars test check check-long check-gpu demo bench clean FORCE
.DEFAULT_GOAL := all

all: $(DEPS_STAMP) $(BINS) $(TESTS)
	@tools/deps.sh report
	@echo "nebula: built $(words $(BINS)) executable(s), $(words $(TESTS)) test programs; CUDA kernels: $(if $(CUDA_ON),built with $(NVCC),not built)"

# Dependencies are probed once per build tree (and again after `make clean`, or when
# the probe or the detection changes): tools/deps.sh compiles and links against each
# library with the flags above and, on Debian as root, installs what is missing. The
# stamp is an included makefile, so make reads itself again after remaking it and
# mk/detect.mk sees the libraries that were just installed.
$(DEPS_STAMP): tools/deps.sh mk/detect.mk
	$(Q)tools/deps.sh ensure
	$(Q)mkdir -p $(B) && echo '# the dependencies were found (tools/deps.sh ensure)' > $@
NO_DEPS_GOALS := clean deps deps-test deps-report probe-vars
ifneq ($(or $(if $(MAKECMDGOALS),,all),$(filter-out $(NO_DEPS_GOALS),$(MAKECMDGOALS))),)
  include $(DEPS_STAMP)
endif

deps:
	$(Q)tools/deps.sh install

# The test-time tools only (Python reference stack, Slurm, h5dump, build/venv, ...).
deps-test:
	$(Q)tools/deps.sh install-test

shq = '$(subst ','\'',$(1))'
# The flags tools/deps.sh probes with when it runs outside make.
probe-vars:
	@echo $(foreach v,NEBULA_PROBE_CC NEBULA_PROBE_CFLAGS NEBULA_PROBE_LIBS NEBULA_PROBE_BLAS,"export $(v)=$(call shq,$($(v)));")

deps-report:
	$(Q)tools/deps.sh report

$(B)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(B)/obj/kernels/cpu/%.avx2.o: kernels/cpu/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC AVX2 $<")
	$(Q)$(CC) $(CFLAGS) $(ISA_CFLAGS_avx2) -DISA_VARIANT=avx2 -c $< -o $@

$(B)/obj/kernels/cpu/%.avx512.o: kernels/cpu/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC AVX512 $<")
	$(Q)$(CC) $(CFLAGS) $(ISA_CFLAGS_avx512) -DISA_VARIANT=avx512 -c $< -o $@

$(B)/obj/%.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVFLAGS) -c $< -o $@

# The version string and the commit (provenance's git_revision; "unknown" outside a git
# checkout): regenerated on every make, rewritten only when they change, so a commit
# rebuilds the one object that prints them and nothing else.
$(B)/version.h: FORCE | $(DEPS_STAMP)
	@v="git-$$(git describe --always --dirty 2>/dev/null || echo unknown)"; \
	 r="$$(git rev-parse --verify -q HEAD 2>/dev/null)" || r=unknown; \
	 text="$$(printf '#define NEBULA_VERSION "%s"\n#define NEBULA_GIT_REVISION "%s"' "$$v" "$${r:-unknown}")"; \
	 if [ "$$(cat $@ 2>/dev/null)" != "$$text" ]; then printf '%s\n' "$$text" > $@; fi
$(B)/obj/libcore/base/cli.o: $(B)/version.h
FORCE:

$(B)/lib/libcore.a: $(patsubst %.c,$(B)/obj/%.o,$(LIBCORE_SRC)) $(B)/obj/gen/deploy/onnx.pb-c.o
$(B)/lib/libkernels.a: $(patsubst %.c,$(B)/obj/%.o,$(KCPU_SRC)) $(KCPU_VAR_OBJ)
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

# The quick tier (`# tier=quick` in validation/tests.list): 53 tests, measured at 3 min 36 s
# end to end with the build up to date, on the 2-core machine while other builds ran (its
# sum alone is about 2.5 min; reference/resnet-vs-pytorch is a fifth of it). Budget: 5 min.
test: all
	$(Q)tools/deps.sh ensure-test
	$(Q)tools/run-tests.sh --tier quick --check-tree validation/tests.list

check: all
	$(Q)tools/deps.sh ensure-test
	$(Q)tools/run-tests.sh --check-tree validation/tests.list

check-long: all
	$(Q)tools/deps.sh ensure-test
	$(Q)tools/run-tests.sh --tier long validation/tests.list

# The GPU tests and benchmark (validation/gpu/tests.list); without CUDA kernels or a
# CUDA device it says so and is skipped (exit 77), which is no failure of the target.
check-gpu: all
	$(Q)tools/check-gpu.sh || [ $$? -eq 77 ]

demo: all
	$(Q)tools/demo.sh

bench: all
	$(Q)tools/bench-comm.sh

# Fuzzing of the hostile-input readers (validation/fuzz): the safetensors and llm.c
# model readers, the config parser, the elastic control-file parser, the image-set
# reader (HDF5 and CIFAR-10 data files), the tokenizer files (tokenizer.json,
# vocab.json + merges.txt, vocab.txt), the model repository's manifests, commits and
# object files (libcore/model), the edge engine's .neb loader (neb_format.c and the graph,
# shape and plan checks behind it, then a run of what it accepts) and the ONNX importer
# (libcore/deploy/deploy_onnx*.c over protobuf-c, then the fold/fuse passes, the plan and
# a run). `make fuzz` builds each
# libFuzzer harness with clang, ASan and UBSan and runs it FUZZ_SECONDS on its seed
# corpus, one target after the other; new inputs go to build/fuzz/corpus_<target>,
# crashing ones to build/fuzz/crashes/ (save them under validation/fuzz/regress/).
# `make fuzz-merge` folds the new inputs into the seed corpus, minimised. `make`
# builds the same harnesses with $(CC) and the sanitizers around a plain main()
# (validation/fuzz/replay.c) so `make check` replays corpus and regressions
# without clang. Needs clang, its libFuzzer runtime and OpenMP (tools/deps.sh).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 600
FUZZ_TARGETS := safetensors llmc config control images tokenizer model neb onnx
# The model repository's readers (repo_manifest.c, repo_commit.c, repo_object.c) come
# with the files of their module they call and what those call in turn: the checkpoint
# catalog behind repo_scan_open (HDF5), the checkpoint code under it, the control
# collectives (MPI), the watchdog and the version string. Every harness links them (the
# list is shared); only fuzz_model calls them.
FUZZ_MODEL_SRC := libcore/model/repo_manifest.c libcore/model/repo_commit.c libcore/model/repo_object.c \
                  libcore/model/repo_store.c libcore/model/repo_refs.c libcore/model/repo_work.c \
                  libcore/ckpt/tool/ckpt_inspect.c libcore/ckpt/ckpt.c libcore/ckpt/ckpt_dir.c libcore/ckpt/ckpt_file.c \
                  libcore/ckpt/ckpt_read.c libcore/ckpt/ckpt_dtype.c libcore/comm/ctl.c libcore/base/fault.c \
                  libcore/base/watchdog.c libcore/base/cli.c
# The edge engine: libnebula-nano whole (loader, checks, runtime and kernels) and the ONNX
# importer with the passes nebula-deploy runs after it (deploy_opt.c), over the protobuf-c
# code protoc-c generates (in $(B)/gen, made before any object that includes it).
FUZZ_EDGE_SRC := $(sort $(wildcard libcore/nano/*.c)) libcore/deploy/deploy_onnx.c libcore/deploy/deploy_onnx_ops.c \
                 libcore/deploy/deploy_onnx_fold.c libcore/deploy/deploy_opt.c $(B)/gen/deploy/onnx.pb-c.c
FUZZ_LIBSRC  := libcore/ckpt/tool/safetensors.c libcore/ckpt/tool/llmc.c libcore/nn/param.c libcore/base/path.c \
                libcore/base/log.c libcore/base/config.c libcore/train/control/control.c libcore/base/rng.c \
                libcore/data/data.c libcore/data/data_image.c libcore/data/tokenizer.c libcore/data/tok_files.c \
                libcore/data/tok_bpe.c libcore/data/tok_wordpiece.c $(FUZZ_MODEL_SRC) $(FUZZ_EDGE_SRC)
# HDF5 for the image-set reader and the checkpoint catalog (the system library, not
# instrumented: see docs/testing.md#fuzzing); xxHash, zstd, ISA-L and zlib for the model repository
FUZZ_LIBS    := -linih -ljansson -lpcre2-8 -lutf8proc -lxxhash -lzstd -lisal -lz $(HDF5_LIBS) \
                $(call rpaths,$(HDF5_LIBS)) -lprotobuf-c -lm
FUZZ_OPTS_safetensors := -max_len=4096 -dict=validation/fuzz/safetensors.dict
FUZZ_OPTS_llmc        := -max_len=8192
FUZZ_OPTS_config      := -max_len=4096 -dict=validation/fuzz/config.dict
FUZZ_OPTS_control     := -max_len=1024 -dict=validation/fuzz/control.dict
FUZZ_OPTS_tokenizer   := -max_len=4096 -dict=validation/fuzz/tokenizer.dict
FUZZ_OPTS_model       := -max_len=4096 -dict=validation/fuzz/model.dict
# .neb sections are 64-byte aligned: the seed models are 1.5 to 8 KiB
FUZZ_OPTS_neb         := -max_len=8192 -dict=validation/fuzz/neb.dict
FUZZ_OPTS_onnx        := -max_len=4096 -dict=validation/fuzz/onnx.dict
# HDF5 (the system's, not instrumented) leaks in an H5Fopen that fails on a damaged file,
# asks malloc for what a damaged size field says (NULL, as outside ASan) and crashes on
# some damaged metadata itself: the images run goes on past crashes (-fork), which land in
# build/fuzz/crashes/ for triage (docs/testing.md#fuzzing)
FUZZ_OPTS_images      := -max_len=8192 -detect_leaks=0
FUZZ_ENV_images       := ASAN_OPTIONS=allocator_may_return_null=1
FUZZ_FORK_images      := -fork=1 -ignore_crashes=1 -ignore_ooms=1
# Runs also reward new comparison operands (most of the header's checks are
# comparisons inside jansson, which coverage cannot see); merges keep coverage only,
# so the committed corpus stays small.
FUZZ_RUN_OPTS         := -use_value_profile=1
SAN_FLAGS    := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# Evaluated only when a fuzz rule runs (OpenMPI's wrapper flags, for log.c's mpi.h).
# -Wno-pass-failed: at -O1 clang cannot vectorise every `omp simd` loop of libcore/nano
# and says so, which is no fault of the code.
FUZZ_CFLAGS   = -std=c11 -g -O1 -Wall -Wextra -Werror -Wno-pass-failed -D_GNU_SOURCE -fopenmp -MMD -MP -Ilibcore -Ikernels -I$(B) -I$(B)/gen \
                $(shell $(CC) --showme:compile) $(patsubst -I%,-isystem %,$(HDF5_CFLAGS)) $(SAN_FLAGS)
REPLAY_BINS  := $(addprefix $(B)/test/fuzz/replay_,$(FUZZ_TARGETS))
FUZZ_BINS    := $(addprefix $(B)/fuzz/fuzz_,$(FUZZ_TARGETS))

.PHONY: fuzz fuzz-merge
all: $(REPLAY_BINS)

$(B)/san/libcore/base/cli.o $(B)/fuzz/obj/libcore/base/cli.o: $(B)/version.h
$(B)/san/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC SAN  $<")
	$(Q)$(CC) $(CFLAGS) $(SAN_FLAGS) -c $< -o $@

# The generated protobuf code: the project's flags less -Werror -Wextra (as for
# $(B)/obj/gen/deploy/onnx.pb-c.o); its header made before the objects that include it.
$(B)/san/$(B)/gen/deploy/onnx.pb-c.o: $(B)/gen/deploy/onnx.pb-c.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC SAN  $<")
	$(Q)$(CC) $(filter-out -Werror -Wextra,$(CFLAGS)) $(SAN_FLAGS) -c $< -o $@
$(B)/fuzz/obj/$(B)/gen/deploy/onnx.pb-c.o: $(B)/gen/deploy/onnx.pb-c.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(filter-out -Werror -Wextra,$(FUZZ_CFLAGS)) -fsanitize=fuzzer-no-link -c $< -o $@
$(foreach d,san fuzz/obj,$(patsubst %.c,$(B)/$(d)/%.o,$(filter libcore/deploy/%,$(FUZZ_EDGE_SRC)) \
    validation/fuzz/fuzz_onnx.c)): $(B)/gen/deploy/onnx.pb-c.h

$(B)/test/fuzz/replay_%: $(B)/san/validation/fuzz/fuzz_%.o $(B)/san/validation/fuzz/replay.o \
                         $(patsubst %.c,$(B)/san/%.o,$(FUZZ_LIBSRC))
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) $(SAN_FLAGS) -o $@ $^ $(FUZZ_LIBS)

$(B)/fuzz/obj/validation/fuzz/%.o: validation/fuzz/%.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -c $< -o $@

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(B)/fuzz/fuzz_%: $(B)/fuzz/obj/validation/fuzz/fuzz_%.o $(patsubst %.c,$(B)/fuzz/obj/%.o,$(FUZZ_LIBSRC))
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(FUZZ_CC) -fopenmp $(SAN_FLAGS) -fsanitize=fuzzer -o $@ $^ $(shell $(CC) --showme:link) $(FUZZ_LIBS)

# -close_fd_mask=2: the readers log every refusal to stderr, which would drown
# libFuzzer's own lines (it keeps a copy of stderr for them and for crash reports).
fuzz: $(FUZZ_BINS)
	$(Q)mkdir -p $(B)/fuzz/crashes
	$(Q)$(foreach t,$(FUZZ_TARGETS),mkdir -p $(B)/fuzz/corpus_$(t) && \
	    echo "fuzz: $(t) for $(FUZZ_SECONDS) s" && \
	    $(FUZZ_ENV_$(t)) nice -n 10 $(B)/fuzz/fuzz_$(t) $(FUZZ_OPTS_$(t)) $(FUZZ_FORK_$(t)) $(FUZZ_RUN_OPTS) -max_total_time=$(FUZZ_SECONDS) \
	        -close_fd_mask=2 -print_final_stats=1 -artifact_prefix=$(B)/fuzz/crashes/$(t)- \
	        $(B)/fuzz/corpus_$(t) validation/fuzz/corpus_$(t) &&) true

fuzz-merge: $(FUZZ_BINS)
	$(Q)$(foreach t,$(FUZZ_TARGETS),rm -rf $(B)/fuzz/merged_$(t) && \
	    mkdir -p $(B)/fuzz/merged_$(t) $(B)/fuzz/corpus_$(t) && \
	    $(B)/fuzz/fuzz_$(t) $(FUZZ_OPTS_$(t)) -merge=1 -close_fd_mask=2 $(B)/fuzz/merged_$(t) \
	        validation/fuzz/corpus_$(t) $(B)/fuzz/corpus_$(t) && \
	    rm -f validation/fuzz/corpus_$(t)/* && cp $(B)/fuzz/merged_$(t)/* validation/fuzz/corpus_$(t)/ &&) true

# The CHAOS build (validation/cli/test_ckpt_faults.sh, test_fault_pass.sh, nebula-chaos):
# nebula-train, nebula-ckpt, nebula-report and nebula-model with the fault points that
# NEBULA_CHAOS_FAULT arms (libcore/base/fault.h), libcore and those apps compiled again
# with -DCHAOS into their own objects, so the binaries under build/bin never carry them.
# Part of `all`: one more compile of libcore and four apps, in parallel under make -j.
CHAOS_APPS := train ckpt report model
CHAOS_LIB := $(B)/chaos/lib/libcore.a
.PHONY: chaos
chaos: $(addprefix $(B)/chaos/bin/nebula-,$(CHAOS_APPS))
all: chaos

$(B)/chaos/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC CHAOS $<")
	$(Q)$(CC) $(CFLAGS) -DCHAOS -c $< -o $@
$(B)/chaos/obj/libcore/base/cli.o: $(B)/version.h
$(CHAOS_LIB): $(patsubst %.c,$(B)/chaos/obj/%.o,$(LIBCORE_SRC))
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

define CHAOS_APP_RULE
$(B)/chaos/bin/nebula-$(1): $(patsubst %.c,$(B)/chaos/obj/%.o,$(wildcard apps/$(1)/*.c)) $(CHAOS_LIB) $(filter-out $(B)/lib/libcore.a,$(LIBS))
	@mkdir -p $$(dir $$@)
	@$$(if $$(filter 1,$$(VERBOSE)),,echo "  LINK    $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(CHAOS_LIB) $$(filter-out $(B)/lib/libcore.a,$$(LIBS)) $$(LDLIBS)
endef
$(foreach a,$(CHAOS_APPS),$(eval $(call CHAOS_APP_RULE,$(a))))

clean:
	rm -rf $(B)

# ---- the edge engine (docs/edge.md) --------------------------------------------------
# libnebula-nano: libcore/nano alone, which includes nothing but itself (libc, libm,
# OpenMP), so nebula-infer and users' programs link it without MPI or HDF5, and it
# cross-builds for arm64 (mk/cross-aarch64.mk). Its objects are libcore's too.
NANO_SRC := $(sort $(wildcard libcore/nano/*.c))
NANO_LIB := $(B)/lib/libnebula-nano.a
$(NANO_LIB): $(patsubst %.c,$(B)/obj/%.o,$(NANO_SRC))
$(B)/bin/nebula-infer: $(patsubst %.c,$(B)/obj/%.o,$(wildcard apps/infer/*.c)) $(NANO_LIB)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(NANO_LIB) -lm
all: $(NANO_LIB)

$(B)/gen/deploy/onnx.pb-c.c $(B)/gen/deploy/onnx.pb-c.h &: libcore/deploy/onnx.proto | $(DEPS_STAMP)
	@mkdir -p $(B)/gen/deploy
	@$(if $(filter 1,$(VERBOSE)),,echo "  PROTOC  $<")
	$(Q)protoc-c --proto_path=libcore/deploy --c_out=$(B)/gen/deploy onnx.proto
# Generated code: the project's warnings are for the project's code.
$(B)/obj/gen/deploy/onnx.pb-c.o: $(B)/gen/deploy/onnx.pb-c.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC      $<")
	$(Q)$(CC) $(filter-out -Werror -Wextra,$(CFLAGS)) -c $< -o $@
DEPLOY_SRC := $(wildcard libcore/deploy/*.c)
$(patsubst %.c,$(B)/obj/%.o,$(DEPLOY_SRC)) $(patsubst %.c,$(B)/chaos/obj/%.o,$(DEPLOY_SRC)): $(B)/gen/deploy/onnx.pb-c.h

include mk/install.mk

# NCCL logic on a host fake ----------------------------------------------------
# build/test/fake/test_nccl_fake{,_aware}: libcore/comm/comm_nccl.c (comm's nccl
# backend) and validation/gpu/test_nccl.c, both unchanged, compiled with -DNEBULA_CUDA
# against the fake cuda_runtime.h, nccl.h and mpi-ext.h of validation/gpu/fake (first
# on the include path) and linked with the fake's host implementation: "device" memory
# is malloc'd, streams are deferred queues, NCCL is MPI point-to-point. The rest of
# comm (comm.c, comm_diag.c, bucket.c) calls no CUDA and comes from libcore.a as is.
# A LOGIC test of the nccl backend through comm.h and the bucket manager (chunks,
# leftover, staging, call order, serialised ops, events, deadline and abort), run by
# `make check`; it proves nothing about CUDA or NCCL (make check-gpu does).
# No nvcc needed; never linked with the real CUDA libraries, even where they exist.
# _aware: MPI takes device pointers; the other stages through pinned slots.
FAKE_NCCL_DIR    := validation/gpu/fake
FAKE_NCCL_CFLAGS  = -I$(FAKE_NCCL_DIR) -DNEBULA_CUDA=1 $(CFLAGS)
FAKE_NCCL_LDLIBS  = $(filter-out -lnccl -lcudnn -lcublasLt -lcublas -lcudart,$(LDLIBS))
FAKE_NCCL_OBJ    := $(addprefix $(B)/fake/obj/,libcore/comm/comm_nccl.o libcore/comm/comm_nccl_group.o validation/gpu/test_nccl.o \
                      $(FAKE_NCCL_DIR)/fake_cuda.o $(FAKE_NCCL_DIR)/fake_nccl.o)
FAKE_NCCL_BINS   := $(B)/test/fake/test_nccl_fake $(B)/test/fake/test_nccl_fake_aware
all: $(FAKE_NCCL_BINS)

$(B)/fake/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC FAKE $<")
	$(Q)$(CC) $(FAKE_NCCL_CFLAGS) -c $< -o $@

$(B)/fake/obj/$(FAKE_NCCL_DIR)/fake_mpi_%.o: $(FAKE_NCCL_DIR)/fake_mpi.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CC FAKE $< ($*)")
	$(Q)$(CC) $(FAKE_NCCL_CFLAGS) -DFAKE_MPI_CUDA_AWARE=$(if $(filter aware,$*),1,0) -c $< -o $@

# The fake objects come before libcore.a, so its comm_nccl.o is not pulled in (comm.c's
# comm_nccl_backend_init resolves to the fake build's); the test
# hands the fake GPUs to the runtime (mpi_test_start_gpus).
$(B)/test/fake/test_nccl_fake: $(FAKE_NCCL_OBJ) $(B)/fake/obj/$(FAKE_NCCL_DIR)/fake_mpi_staged.o
$(B)/test/fake/test_nccl_fake_aware: $(FAKE_NCCL_OBJ) $(B)/fake/obj/$(FAKE_NCCL_DIR)/fake_mpi_aware.o
$(FAKE_NCCL_BINS): $(B)/lib/libcore.a $(B)/lib/libkernels.a
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(B)/lib/libcore.a $(B)/lib/libkernels.a $(FAKE_NCCL_LDLIBS)

# The compiler writes the dependency files; make never remakes them. Without this
# rule make's built-in `%: %.o` would try to link fake_mpi_staged.d from a
# fake_mpi_staged.d.o that the fake_mpi_% rule above knows how to compile.
$(B)/fake/%.d: ;
-include $(shell find $(B)/fake -name '*.d' 2>/dev/null)
# ------------------------------------------------------------ end of the NCCL fake

# ---- CUDA kernels on the CPU emulator (validation/gpu/emu) ------------------------
# The GPU tests again, without a GPU or nvcc, so `make check` catches indexing and
# synchronisation regressions in kernels/cuda: tools/cuda-emu-rewrite turns
# kernels/cuda/X.cu into $(B)/emu/X.cpp for validation/gpu/emu/cuda_emu.h (each CUDA
# thread a fiber, blocks in parallel), and the unchanged test programs link those
# objects (device.cu included) instead of libkernels_cuda.a. cuBLAS/cuDNN code
# (matmul.cu, conv2d.cu) cannot run there: library_stubs.cpp stands in for it, and
# test_cuda_cnn skips those checks when gpu_emulated. -ffp-contract=off: every float
# operation rounds once, as the __*_rn intrinsics promise.
EMU_CXX      ?= $(CXX)
EMU_CXXFLAGS := -std=c++17 -O2 -g -pthread -ffp-contract=off -Wall -Wextra -Werror -MMD -MP \
                -Ivalidation/gpu/emu -I. -Ikernels -Ilibcore
EMU_LDLIBS   := $(filter-out -lnccl -lcudnn -lcublasLt -lcublas -lcudart -lstdc++,$(LDLIBS)) -lstdc++ -pthread
EMU_PROGRAMS := test_cuda_device test_cuda_transformer test_cuda_optim test_cuda_cnn
EMU_OBJ_test_cuda_device      :=
EMU_OBJ_test_cuda_transformer := attention embed gelu layernorm residual xent
EMU_OBJ_test_cuda_optim       := optim dgc precision
EMU_OBJ_test_cuda_cnn         := batchnorm pool relu stubs/library_stubs
# The models' GPU path (gpt2.c, bert.c, resnet.c through libcore/nn/device_cuda.c) needs
# libcore built with NEBULA_CUDA, i.e. nvcc present; matmul and the convolution plans
# are the CPU kernels there (library_stubs.cpp).
ifdef CUDA_ON
  EMU_PROGRAMS += test_models_cuda
  EMU_OBJ_test_models_cuda := attention embed gelu layernorm residual xent optim dgc precision batchnorm pool relu \
                              stubs/library_stubs
endif
EMU_TESTS    := $(patsubst %,$(B)/test/emu/%_emu,$(EMU_PROGRAMS))
.PHONY: emu
emu: $(EMU_TESTS)
all: emu

$(B)/emu/%.cpp: kernels/cuda/%.cu tools/cuda-emu-rewrite | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  EMU     $<")
	$(Q)tools/cuda-emu-rewrite $< $@

$(B)/emu/%.o: $(B)/emu/%.cpp $(wildcard validation/gpu/emu/*.h)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CXX     $<")
	$(Q)$(EMU_CXX) $(EMU_CXXFLAGS) -c $< -o $@

$(B)/emu/stubs/%.o: validation/gpu/emu/%.cpp | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(VERBOSE)),,echo "  CXX     $<")
	$(Q)$(EMU_CXX) $(EMU_CXXFLAGS) -c $< -o $@

define EMU_TEST_RULE
$(B)/test/emu/$(1)_emu: $(B)/obj/validation/gpu/$(1).o $(patsubst %,$(B)/emu/%.o,$(EMU_OBJ_$(1)) device) \
                        $(B)/lib/libcore.a $(B)/lib/libkernels.a
	@mkdir -p $$(dir $$@)
	@$$(if $$(filter 1,$$(VERBOSE)),,echo "  LINK    $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $(B)/lib/libcore.a $(B)/lib/libkernels.a $$(EMU_LDLIBS)
endef
$(foreach t,$(EMU_PROGRAMS),$(eval $(call EMU_TEST_RULE,$(t))))
-include $(wildcard $(B)/emu/*.d $(B)/emu/stubs/*.d)
# ---- end of the CPU emulator block ---------------------------------------------

-include $(shell find $(B)/obj $(B)/san $(B)/fuzz $(B)/chaos -name '*.d' 2>/dev/null)
.SECONDARY:
-include mk/cross-aarch64.mk
