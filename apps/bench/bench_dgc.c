/* bench_dgc — nebula-bench dgc: DGC-Pro's threshold selection on one core.
 *
 * A gradient-like vector (a bell-shaped sum of uniforms) of bench.count entries; per
 * round, timed separately: the sampled threshold (dgc.sample_fraction of the entries,
 * quantile 1 - dgc.sparsity), the selection pass (every |x| >= threshold, indices
 * out), both together (what DGC-Pro does per tensor), and the exact k-th largest
 * (quickselect over all |x|, what exact top-k costs). The peer, in the same process
 * and on the same data, is one streaming read of the vector (the sum of |x|): the
 * memory-bandwidth bound any selection pass has. Median of bench.rounds rounds;
 * rates in G entries per second on one core. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dgc/dgc.h"

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

status bench_dgc_run(const config *cfg, const json_t *prov)
{
    size_t n = (size_t)config_int(cfg, "bench.count");
    int rounds = (int)config_int(cfg, "bench.rounds");
    double density = 1.0 - config_float(cfg, "dgc.sparsity"), fraction = config_float(cfg, "dgc.sample_fraction");
    float *x = malloc(n * sizeof *x), *scratch = malloc(n * sizeof *scratch);
    uint32_t *idx = malloc(n * sizeof *idx);
    double *t[5];
    for (int k = 0; k < 5; k++) t[k] = malloc((size_t)rounds * sizeof(double));
    if (!x || !scratch || !idx || !t[4]) {
        log_error("nebula-bench dgc: cannot allocate %zu entries", n);
        return STATUS_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix(i);
        x[i] = (float)((double)(r & 0xffff) + (double)(r >> 16 & 0xffff) + (double)(r >> 32 & 0xffff) +
                       (double)(r >> 48) - 131070.0) * 1e-5f;
    }
    size_t k = (size_t)ceil(density * (double)n), got = 0;
    double sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = omp_get_wtime();
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += fabsf(x[i]);
        double t1 = omp_get_wtime();
        float thr = dgc_sampled_threshold(x, n, density, fraction, (uint64_t)r, scratch);
        double t2 = omp_get_wtime();
        got = dgc_select(x, n, thr, idx, n);
        double t3 = omp_get_wtime();
        float exact = dgc_kth_abs(x, n, k, scratch);
        double t4 = omp_get_wtime();
        sink += s + exact;
        t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2, t[3][r] = t3 - t1, t[4][r] = t4 - t3;
    }
    const char *what[5] = { "stream read (peer: sum of |x|)", "sampled threshold", "selection pass",
                            "threshold + selection (DGC-Pro)", "exact k-th largest (quickselect)" };
    const char *key[5] = { "stream_read", "sampled_threshold", "selection", "threshold_selection", "exact_kth" };
    const char *format = config_str(cfg, "bench.format");
    bool csv = !strcmp(format, "csv"), json = !strcmp(format, "json");
    fprintf(csv || json ? stderr : stdout, "# nebula-bench dgc: %zu entries, density %.4g (k = %zu, last selection "
            "%zu), sample %.3g%%, one core, median of %d rounds\n", n, density, k, got, 100 * fraction, rounds);
    if (csv) {
        (void)provenance_write_csv_line(stdout, prov);  /* stdout failing fails the rows too */
        printf("step,time_ms,G_entries_per_s,vs_read\n");
    }
    else if (json) bench_provenance_row("step", prov);
    else printf("# %-34s %12s %14s %10s\n", "step", "time_ms", "G_entries/s", "vs_read");
    double read = bench_median(t[0], rounds);
    for (int j = 0; j < 5; j++) {
        double m = bench_median(t[j], rounds);
        if (json) {  /* one object per row, each line parseable alone */
            json_t *o = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f}", "step", key[j], "entries", (json_int_t)n,
                                  "density", density, "time_ms", m * 1e3, "G_entries_per_s", (double)n / m / 1e9,
                                  "vs_read", m / read);
            char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
            CHECK(text, "out of memory formatting a JSON row");
            puts(text);
            free(text);
            json_decref(o);
        } else if (csv) {
            printf("%s,%.3f,%.2f,%.2f\n", key[j], m * 1e3, (double)n / m / 1e9, m / read);
        } else {
            printf("  %-34s %12.3f %14.2f %10.2f\n", what[j], m * 1e3, (double)n / m / 1e9, m / read);
        }
    }
    if (sink == 12345.0) fprintf(stderr, "#\n");  /* keeps the timed work observable */
    for (int j = 0; j < 5; j++) free(t[j]);
    free(x), free(scratch), free(idx);
    return STATUS_OK;
}
