# Spack recipe for Nebula: copy this directory into a Spack repository
# (`spack repo create`, then packages/nebula/package.py) and `spack install nebula`.
# The build is the project's Makefile with the dependency variables of mk/detect.mk
# pointed at Spack's prefixes; `make install PREFIX=<prefix>` lays out the result.

from spack.package import *


class Nebula(MakefilePackage):
    """Nebula: distributed deep-learning training on Slurm clusters in C11 (MPI,
    parallel HDF5 checkpoints, DGC-Pro gradient compression, hybrid parallelism)."""

    homepage = "https://example.org/nebula"
    git = "https://example.org/nebula.git"

    maintainers("nebula-developers")
    license("UNKNOWN")

    version("main", branch="main")

    variant("cuda", default=False, description="Build the CUDA kernels and NCCL backend")
    variant("papi", default=True, description="Hardware counters in the profiler")
    variant(
        "blas",
        default="openblas",
        values=("openblas", "blis", "mkl", "flexiblas"),
        description="The CBLAS the GEMMs run on",
    )
    variant(
        "cuda_arch",
        default="75,80,90",
        values=lambda v: all(a.isdigit() for a in v.split(",")),
        description="CUDA architectures (sm_XX), comma-separated",
    )

    depends_on("gmake", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("help2man", type="build")
    depends_on("mpi")
    depends_on("hdf5+mpi")
    depends_on("onednn")
    depends_on("hwloc")
    depends_on("jansson")
    depends_on("inih")
    depends_on("isa-l")
    depends_on("zlib-api")
    depends_on("xxhash")  # nebula-model: XXH3-128 object ids
    depends_on("zstd")    # nebula-model: chunk compression
    depends_on("protobuf-c")  # nebula-deploy: ONNX files (protoc-c at build time, libprotobuf-c)
    depends_on("papi", when="+papi")
    depends_on("openblas threads=openmp", when="blas=openblas")
    depends_on("amdblis threads=openmp", when="blas=blis")
    depends_on("intel-oneapi-mkl threads=openmp", when="blas=mkl")
    depends_on("flexiblas", when="blas=flexiblas")
    depends_on("cuda", when="+cuda")
    depends_on("nccl", when="+cuda")
    depends_on("cudnn", when="+cuda")

    def _make_args(self):
        spec = self.spec
        args = [
            "MPICC={0}".format(spec["mpi"].mpicc),
            "HDF5_DIR={0}".format(spec["hdf5"].prefix),
            "ONEDNN_DIR={0}".format(spec["onednn"].prefix),
            "BLAS={0}".format(spec.variants["blas"].value),
            "PAPI={0}".format(1 if "+papi" in spec else 0),
            "USE_CUDA={0}".format(1 if "+cuda" in spec else 0),
        ]
        if "+cuda" in spec:
            archs = spec.variants["cuda_arch"].value.replace(",", " ")
            args += ["CUDA_HOME={0}".format(spec["cuda"].prefix), "CUDA_ARCHS={0}".format(archs)]
        return args

    def build(self, spec, prefix):
        make(*self._make_args(), parallel=True)

    def install(self, spec, prefix):
        make("install", "PREFIX={0}".format(prefix), *self._make_args())

    def setup_run_environment(self, env):
        env.set("NEBULA_BIN", self.prefix.bin)
        env.set("NEBULA_JOBSCRIPTS", join_path(self.prefix.share, "nebula", "jobscripts"))
