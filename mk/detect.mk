# detect.mk — where the libraries are: pkg-config first, the MPI and HDF5 compiler
# wrappers next, Debian's paths last; every answer overridable on the command line.
#
#   make HDF5_DIR=/opt/hdf5-1.14-ompi       a parallel HDF5 prefix (include/, lib/)
#   make BLAS=openblas|blis|mkl|flexiblas    the CBLAS to link (default openblas); BLAS_DIR=prefix
#   make ONEDNN_DIR=/opt/onednn              oneDNN prefix (include/oneapi/dnnl, lib/)
#   make CUDA_HOME=/usr/local/cuda-12.4 CUDA_ARCHS="80 90"
#   make MPICC=/opt/ompi/bin/mpicc           the MPI compiler wrapper (OpenMPI or MPICH)
#   make PAPI=0                              build the profiler without hardware counters
#
# The one decision: nothing here asks the package manager. A library counts as found
# when pkg-config knows it or the override names it; tools/deps.sh then compiles and
# links a probe with exactly these flags, so a login node with modules instead of
# Debian packages builds as long as the libraries are there, and a missing one is
# named with the variable that points at it. Directories outside the linker's default
# path get an rpath, so the binaries run without LD_LIBRARY_PATH.

PKG_CONFIG ?= pkg-config
MPICC      ?= mpicc
CC         := $(MPICC)
pc_has   = $(shell $(PKG_CONFIG) --exists $(1) 2>/dev/null && echo $(1))
pc_cflags = $(shell $(PKG_CONFIG) --cflags $(1) 2>/dev/null)
pc_libs  = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)
# -Wl,-rpath for every -L directory of a flag list.
rpaths   = $(foreach d,$(patsubst -L%,%,$(filter -L%,$(1))),-Wl,-rpath,$(d))
# The MPI wrapper's own flags (OpenMPI: --showme; MPICH: -show), for the report and
# for pkg-config files whose users do not compile with the wrapper.
MPI_SHOW := $(or $(shell $(MPICC) --showme 2>/dev/null),$(shell $(MPICC) -show 2>/dev/null))

# ---- parallel HDF5 --------------------------------------------------------------
ifdef HDF5_DIR
  HDF5_CFLAGS := -I$(HDF5_DIR)/include
  HDF5_LIBS   := -L$(HDF5_DIR)/lib -lhdf5
else
  HDF5_PC := $(firstword $(call pc_has,hdf5-openmpi) $(call pc_has,hdf5-mpi) $(call pc_has,hdf5-mpich) \
                         $(call pc_has,hdf5_parallel) $(call pc_has,hdf5))
  ifneq ($(HDF5_PC),)
    HDF5_CFLAGS := $(filter -I%,$(call pc_cflags,$(HDF5_PC)))
    HDF5_LIBS   := $(filter -L%,$(call pc_libs,$(HDF5_PC))) -lhdf5
  else
    # h5pcc -show: "mpicc -I/x/include -L/x/lib /x/lib/libhdf5.a ..." (its include and lib dirs)
    H5PCC_SHOW  := $(shell h5pcc -show 2>/dev/null)
    HDF5_CFLAGS := $(filter -I%,$(H5PCC_SHOW))
    HDF5_LIBS   := $(filter -L%,$(H5PCC_SHOW)) -lhdf5
  endif
endif

# ---- BLAS (CBLAS interface) -----------------------------------------------------
BLAS ?= openblas
ifeq ($(BLAS),openblas)
  BLAS_PC := $(firstword $(call pc_has,openblas) $(call pc_has,openblas64))
  BLAS_DEFINE := -DNEBULA_BLAS_OPENBLAS=1
else ifeq ($(BLAS),blis)
  BLAS_PC := $(call pc_has,blis)
  BLAS_DEFINE := -DNEBULA_BLAS_BLIS=1
  BLAS_FALLBACK := -lblis
else ifeq ($(BLAS),mkl)
  BLAS_PC := $(firstword $(call pc_has,mkl-dynamic-lp64-gomp) $(call pc_has,mkl-sdl))
  BLAS_DEFINE := -DNEBULA_BLAS_MKL=1
  BLAS_FALLBACK := -lmkl_rt
else ifeq ($(BLAS),flexiblas)
  BLAS_PC := $(call pc_has,flexiblas)
  BLAS_DEFINE := -DNEBULA_BLAS_FLEXIBLAS=1
  BLAS_FALLBACK := -lflexiblas
else
  $(error BLAS=$(BLAS) is not one of openblas, blis, mkl, flexiblas)
endif
# Without a .pc file: BLAS_DIR (its include/ and, for BLIS and FlexiBLAS, the
# include/blis or include/flexiblas below it), else Debian's OpenMP build of the
# library where it exists (/usr/include/<triplet>/<lib>-openmp), else the defaults.
TRIPLET  := $(shell $(MPICC) -dumpmachine 2>/dev/null)
BLAS_SUB := $(if $(filter blis flexiblas,$(BLAS)),/$(BLAS))
BLAS_DEB := $(wildcard /usr/lib/$(TRIPLET)/$(BLAS)-openmp)
ifdef BLAS_DIR
  BLAS_CFLAGS := -I$(BLAS_DIR)/include$(BLAS_SUB) -I$(BLAS_DIR)/include
  BLAS_LIBS   := -L$(BLAS_DIR)/lib $(or $(BLAS_FALLBACK),-lopenblas)
else ifneq ($(BLAS_PC),)
  BLAS_CFLAGS := $(call pc_cflags,$(BLAS_PC))
  BLAS_LIBS   := $(call pc_libs,$(BLAS_PC))
else ifneq ($(BLAS_DEB),)
  BLAS_CFLAGS := -I/usr/include/$(TRIPLET)/$(BLAS)-openmp
  BLAS_LIBS   := -L$(BLAS_DEB) $(or $(BLAS_FALLBACK),-lopenblas)
else
  BLAS_LIBS   := $(or $(BLAS_FALLBACK),-lopenblas)
endif

# ---- oneDNN, PAPI, the small libraries ------------------------------------------
ifdef ONEDNN_DIR
  DNNL_CFLAGS := -I$(ONEDNN_DIR)/include
  DNNL_LIBS   := -L$(ONEDNN_DIR)/lib -ldnnl
else
  DNNL_PC     := $(firstword $(call pc_has,dnnl) $(call pc_has,onednn))
  DNNL_CFLAGS := $(if $(DNNL_PC),$(call pc_cflags,$(DNNL_PC)))
  DNNL_LIBS   := $(if $(DNNL_PC),$(call pc_libs,$(DNNL_PC)),-ldnnl)
endif
PAPI ?= auto
ifeq ($(PAPI),auto)
  PAPI := $(if $(call pc_has,papi),1,$(if $(wildcard /usr/include/papi.h),1,0))
endif
ifeq ($(PAPI),1)
  PAPI_CFLAGS := $(call pc_cflags,papi) -DNEBULA_PAPI=1
  PAPI_LIBS   := $(or $(call pc_libs,papi),-lpapi)
endif
# inih, jansson, hwloc, ISA-L, zlib, PCRE2 (the tokenizers' pre-tokenisation), utf8proc
# (WordPiece's normalisation), libpng and libjpeg (image folders), libsodium (federated
# learning's key agreement and mask streams), libxxhash and libzstd (nebula-model's chunk
# hashes and compression), libprotobuf-c (nebula-deploy's ONNX files): pkg-config's
# flags, else the plain library.
SMALL_LIBS   := inih:-linih jansson:-ljansson hwloc:-lhwloc libisal:-lisal zlib:-lz libpcre2-8:-lpcre2-8 \
                libutf8proc:-lutf8proc libpng:-lpng16 libjpeg:-ljpeg libsodium:-lsodium libxxhash:-lxxhash \
                libzstd:-lzstd libprotobuf-c:-lprotobuf-c
SMALL_CFLAGS := $(foreach p,$(SMALL_LIBS),$(call pc_cflags,$(word 1,$(subst :, ,$(p)))))
SMALL_LDLIBS := $(foreach p,$(SMALL_LIBS),$(or $(call pc_libs,$(word 1,$(subst :, ,$(p)))),$(word 2,$(subst :, ,$(p)))))

# Library headers as system headers: -Werror is for Nebula's code, not for what the
# libraries' headers do (BLIS's cblas.h defines static functions it never calls).
DEP_CFLAGS := $(patsubst -I%,-isystem %,$(HDF5_CFLAGS) $(BLAS_CFLAGS) $(DNNL_CFLAGS) $(PAPI_CFLAGS) $(SMALL_CFLAGS)) \
              $(BLAS_DEFINE)
DEP_LIBS   := $(DNNL_LIBS) $(HDF5_LIBS) $(SMALL_LDLIBS) $(BLAS_LIBS) $(PAPI_LIBS) -lm
DEP_LIBS   += $(call rpaths,$(HDF5_LIBS) $(BLAS_LIBS) $(DNNL_LIBS))

# ---- CUDA -----------------------------------------------------------------------
# nvcc from CUDA_HOME when it is given, else PATH, else /usr/local/cuda. Machine code
# for each of CUDA_ARCHS (default Volta, Turing, Ampere, Hopper: those of them this
# nvcc still compiles for; CUDA 13 dropped Volta) and PTX of the newest, which later
# GPUs JIT-compile.
ifdef CUDA_HOME
  NVCC ?= $(wildcard $(CUDA_HOME)/bin/nvcc)
endif
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# (nvcc names its toolkit itself: a link or wrapper script on PATH leads to the real one)
ifneq ($(NVCC),)
  CUDA_HOME ?= $(realpath $(shell $(NVCC) --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p' | head -1))
endif
ifneq ($(NVCC),)
  CUDA_ARCHS ?= $(filter $(patsubst compute_%,%,$(shell $(NVCC) --list-gpu-arch 2>/dev/null)),70 75 80 90)
endif
CUDA_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
               -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))

# What tools/deps.sh probes and reports.
export NEBULA_PROBE_CC := $(CC)
export NEBULA_PROBE_CFLAGS := $(DEP_CFLAGS)
export NEBULA_PROBE_LIBS := $(DEP_LIBS)
export NEBULA_PROBE_BLAS := $(BLAS)
