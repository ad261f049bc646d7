/* nebula — the umbrella command: `nebula train ...` runs `nebula-train ...`, as git
 * runs git-<sub>; `nebula --version` prints the version of every part and of the
 * libraries this build found; `nebula --help` lists the subcommands it can reach.
 *
 * The one decision: a subcommand is looked up in $NEBULA_BIN first, then beside this
 * executable (an install's bin/ or the build tree's build/bin), then on PATH, and
 * replaces this process (execv): exit codes, signals and the MPI launcher's view of
 * the process are the subcommand's own. */
#include <dnnl.h>
#include <errno.h>
#include <hdf5.h>
#include <hwloc.h>
#include <jansson.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef NEBULA_PAPI
#include <papi.h>
#endif
#ifdef NEBULA_CUDA
#include <cuda_runtime.h>
#endif

#include "base/cli.h"
#include "cpu/blas.h"
#include "cpu/isa.h"

/* The subcommands, in the order --help lists them. */
static const struct {
    const char *name; /* nebula-<name> */
    const char *what; /* one line for --help */
} subcommands[] = {
    { "train", "train a model (data, tensor, pipeline parallel); prepare data; control a run" },
    { "fed", "federated learning: rounds of clients with differential privacy and secure aggregation" },
    { "model", "version control of checkpoints: commit, branch, tag, checkout, diff, rollback, push, pull" },
    { "deploy", "ONNX models and checkpoints to .neb files for the edge: pruned, int8/fp16, arm64" },
    { "infer", "run a .neb model with libnebula-nano: latency, peak memory, top-k, accuracy" },
    { "bench", "model throughput, communication benchmarks, benchmark tables" },
    { "ckpt", "inspect, verify, diff, convert, reshard and upgrade checkpoints" },
    { "chaos", "fault-injection scenarios and soak runs" },
    { "report", "an HTML report of a run directory" },
};
#define NSUB ((int)(sizeof subcommands / sizeof subcommands[0]))

/* The directory of this executable ("" when /proc cannot say). */
static void self_dir(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    out[0] = 0;
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0, snprintf(out, cap, "%s", exe);
}

/* Finds nebula-<sub>: $NEBULA_BIN, this executable's directory, then PATH. Writes the
 * path and returns 1, or 0 when none is executable. */
static int find_sub(const char *sub, char *out, size_t cap)
{
    char dirs[3][PATH_MAX];
    const char *bin = getenv("NEBULA_BIN");
    snprintf(dirs[0], sizeof dirs[0], "%s", bin ? bin : "");
    self_dir(dirs[1], sizeof dirs[1]);
    dirs[2][0] = 0;
    for (int d = 0; d < 2; d++) {
        if (!dirs[d][0]) continue;
        if (snprintf(out, cap, "%s/nebula-%s", dirs[d], sub) < (int)cap && access(out, X_OK) == 0) return 1;
    }
    const char *path = getenv("PATH");
    if (!path) return 0;
    char list[8192];
    snprintf(list, sizeof list, "%s", path);
    for (char *rest = list, *dir; (dir = strsep(&rest, ":")) != NULL;) {
        if (!*dir) dir = ".";
        if (snprintf(out, cap, "%s/nebula-%s", dir, sub) < (int)cap && access(out, X_OK) == 0) return 1;
    }
    return 0;
}

static void print_help(void)
{
    printf("usage: nebula SUBCOMMAND [ARGS...]   runs nebula-SUBCOMMAND ARGS...\n"
           "       nebula --version             versions of every part and library\n"
           "       nebula help SUBCOMMAND       nebula-SUBCOMMAND --help\n\nsubcommands:\n");
    for (int i = 0; i < NSUB; i++) {
        char path[PATH_MAX];
        int found = find_sub(subcommands[i].name, path, sizeof path);
        printf("  %-8s %s%s\n", subcommands[i].name, subcommands[i].what, found ? "" : " (not found)");
    }
    printf("\nSubcommands are found in $NEBULA_BIN, beside this executable, then on PATH.\n");
}

/* The first line `path --version` prints, or why there is none. */
static void sub_version(const char *path, char *out, size_t cap)
{
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    out[0] = 0;
    if (p) {
        if (!fgets(out, (int)cap, p)) out[0] = 0;
        pclose(p);
    }
    out[strcspn(out, "\n")] = 0;
    if (!out[0]) snprintf(out, cap, "(no answer to --version)");
}

static void print_versions(void)
{
    printf("nebula %s\n", cli_version());
    printf("parts:\n");
    for (int i = 0; i < NSUB; i++) {
        char path[PATH_MAX], line[256];
        if (!find_sub(subcommands[i].name, path, sizeof path)) {
            printf("  nebula-%-8s not found\n", subcommands[i].name);
            continue;
        }
        sub_version(path, line, sizeof line);
        printf("  %-15s %s\n", line, path);
    }
    printf("libraries:\n");
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len); /* callable before MPI_Init */
    mpi[strcspn(mpi, "\n,")] = 0;
    printf("  MPI       %s\n", mpi);
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
#ifdef H5_HAVE_PARALLEL
    const char *par = "parallel";
#else
    const char *par = "serial";
#endif
    printf("  HDF5      %u.%u.%u (%s)\n", maj, min, rel, par);
    char blas[256];
    blas_describe(blas, sizeof blas);
    printf("  BLAS      %s\n", blas);
    const dnnl_version_t *dv = dnnl_version();
    printf("  oneDNN    %d.%d.%d\n", dv->major, dv->minor, dv->patch);
    unsigned hv = hwloc_get_api_version();
    printf("  hwloc     %u.%u.%u\n", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
    printf("  jansson   %s\n", jansson_version_str());
#ifdef NEBULA_PAPI
    printf("  PAPI      %d.%d.%d\n", PAPI_VERSION_MAJOR(PAPI_VERSION), PAPI_VERSION_MINOR(PAPI_VERSION),
           PAPI_VERSION_REVISION(PAPI_VERSION));
#else
    printf("  PAPI      not built in\n");
#endif
#ifdef NEBULA_CUDA
    int rtv = 0, drv = 0;
    cudaRuntimeGetVersion(&rtv);
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    printf("  CUDA      runtime %d.%d", rtv / 1000, rtv % 1000 / 10);
    if (drv) printf(", driver %d.%d\n", drv / 1000, drv % 1000 / 10);
    else printf(", no driver\n");
#else
    printf("  CUDA      not built in\n");
#endif
    char isa[256];
    isa_describe(isa, sizeof isa);
    printf("cpu: %s\n", isa);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        print_help();
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        print_versions();
        return 0;
    }
    const char *sub = argv[1];
    char **args = argv + 1;
    char *help_args[3] = { NULL, "--help", NULL };
    if (!strcmp(sub, "help")) {
        if (argc < 3) {
            print_help();
            return 0;
        }
        sub = argv[2];
        args = help_args;
    }
    if (sub[0] == '-' || strchr(sub, '/')) {
        fprintf(stderr, "nebula: '%s' is not a subcommand (nebula --help lists them)\n", sub);
        return 2;
    }
    char path[PATH_MAX];
    if (!find_sub(sub, path, sizeof path)) {
        fprintf(stderr, "nebula: no subcommand '%s': nebula-%s is not in $NEBULA_BIN, beside nebula, or on PATH", sub,
                sub);
        for (int i = 0; i < NSUB; i++)
            if (!strncmp(sub, subcommands[i].name, 2)) fprintf(stderr, " (did you mean '%s'?)", subcommands[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    char prog[64];
    snprintf(prog, sizeof prog, "nebula-%s", sub);
    args[0] = prog; /* the subcommand sees its own name, as when run directly */
    execv(path, args);
    fprintf(stderr, "nebula: cannot run %s: %s\n", path, strerror(errno));
    return 1;
}
