/* gemm_tune — see gemm_tune.h. The file:
 *   {"format": "nebula-gemm-tune", "version": 1, "provenance": {...},
 *    "cpu_model": "AMD EPYC 9B14", "isa": "avx512_bf16", "blas_core": "Cooperlake",
 *    "threads": 2,
 *    "entries": [{"M": 1024, "N": 2304, "K": 768, "ta": false, "tb": true, "path": "onednn",
 *                 "gflops": {"blas": 201.5, "onednn": 210.2}}, ...]} */
#include "gemm_tune.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/path.h"
#include "cpu/blas.h"
#include "cpu/isa.h"

#define GEMM_TUNE_FORMAT "nebula-gemm-tune"
#define GEMM_TUNE_VERSION 1
#define GEMM_TUNE_MAX 64           /* entries: a model runs about a dozen shapes */
#define GEMM_TUNE_MAX_DIM (1 << 24) /* larger than any layer; keeps M*N*K in range */

static int gemm_tune_fill(void *ctx, int fd) { return json_dumpfd(ctx, fd, JSON_INDENT(1)) == 0 ? 0 : -1; }

status gemm_tune_save(const char *path, const gemm_choice *c, const double *gflops, int n, const json_t *provenance)
{
    json_t *root = json_object(), *entries = json_array();
    json_object_set_new(root, "format", json_string(GEMM_TUNE_FORMAT));
    json_object_set_new(root, "version", json_integer(GEMM_TUNE_VERSION));
    if (provenance) json_object_set_new(root, "provenance", json_deep_copy(provenance));
    json_object_set_new(root, "cpu_model", json_string(isa_cpu_model()));
    json_object_set_new(root, "isa", json_string(isa_name(isa_active())));
    json_object_set_new(root, "blas_core", json_string(blas_core() ? blas_core() : ""));
    json_object_set_new(root, "threads", json_integer(omp_get_max_threads()));
    for (int i = 0; i < n; i++) {
        const gemm_shape *s = &c[i].shape;
        json_t *e = json_pack("{s:i, s:i, s:i, s:b, s:b, s:s}", "M", s->M, "N", s->N, "K", s->K, "ta", s->ta, "tb",
                              s->tb, "path", gemm_path_name(c[i].path));
        if (gflops)
            json_object_set_new(e, "gflops", json_pack("{s:f, s:f}", "blas", gflops[2 * i], "onednn", gflops[2 * i + 1]));
        json_array_append_new(entries, e);
    }
    json_object_set_new(root, "entries", entries);
    status st = path_write_atomic(path, "GEMM tuning table", gemm_tune_fill, root);
    json_decref(root);
    return st;
}

/* The string member `key` of o equals `want`; else names both in `why`. */
static bool gemm_tune_same(const json_t *o, const char *key, const char *want, char *why, size_t len)
{
    const char *got = json_string_value(json_object_get(o, key));
    if (got && !strcmp(got, want)) return true;
    snprintf(why, len, "was made with %s '%s', this process runs '%s'", key, got ? got : "(missing)", want);
    return false;
}

static bool gemm_tune_entry(const json_t *e, gemm_choice *c)
{
    json_int_t M, N, K;
    int ta, tb;
    const char *path;
    if (json_unpack((json_t *)e, "{s:I, s:I, s:I, s:b, s:b, s:s}", "M", &M, "N", &N, "K", &K, "ta", &ta, "tb", &tb,
                    "path", &path) != 0)
        return false;
    if (M < 1 || N < 1 || K < 1 || M > GEMM_TUNE_MAX_DIM || N > GEMM_TUNE_MAX_DIM || K > GEMM_TUNE_MAX_DIM) return false;
    memset(c, 0, sizeof *c);
    c->shape.M = (int)M, c->shape.N = (int)N, c->shape.K = (int)K, c->shape.ta = ta, c->shape.tb = tb;
    if (!strcmp(path, "blas")) c->path = GEMM_PATH_BLAS;
    else if (!strcmp(path, "onednn")) c->path = GEMM_PATH_ONEDNN;
    else return false;
    return true;
}

status gemm_tune_load(const char *path)
{
    int fd;
    struct stat sb;
    char why[320];
    /* never blocks: a FIFO or a device is refused, not waited on */
    if (path_open_regular(path, &fd, &sb, (uint64_t)1 << 20, why, sizeof why) != 0) {
        log_error0("device.gemm_tune: the GEMM tuning table %s %s", path, why);
        return STATUS_INPUT;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    int rd = text ? path_read_all_at(fd, text, (size_t)sb.st_size, 0) : -1;
    close(fd);
    if (rd != 0) {
        log_error0("device.gemm_tune: cannot read %s: %s", path, text ? log_errno_str() : "out of memory");
        free(text);
        return STATUS_INPUT;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, (size_t)sb.st_size, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    status st = STATUS_INPUT;
    json_t *entries = root ? json_object_get(root, "entries") : NULL;
    gemm_choice table[GEMM_TUNE_MAX];
    size_t n = entries ? json_array_size(entries) : 0;
    if (!root) {
        snprintf(why, sizeof why, "is not JSON (line %d: %s)", jerr.line, jerr.text);
    } else if (!json_is_string(json_object_get(root, "format")) ||
               strcmp(json_string_value(json_object_get(root, "format")), GEMM_TUNE_FORMAT) != 0 ||
               json_integer_value(json_object_get(root, "version")) != GEMM_TUNE_VERSION) {
        snprintf(why, sizeof why, "is not a GEMM tuning table (format \"%s\", version %d expected)", GEMM_TUNE_FORMAT,
                 GEMM_TUNE_VERSION);
    } else if (!gemm_tune_same(root, "cpu_model", isa_cpu_model(), why, sizeof why) ||
               !gemm_tune_same(root, "isa", isa_name(isa_active()), why, sizeof why) ||
               !gemm_tune_same(root, "blas_core", blas_core() ? blas_core() : "", why, sizeof why)) {
        /* why says which */
    } else if (!json_is_array(entries) || n > GEMM_TUNE_MAX) {
        snprintf(why, sizeof why, "needs \"entries\", an array of at most %d shapes", GEMM_TUNE_MAX);
    } else {
        st = STATUS_OK;
        for (size_t i = 0; i < n && st == STATUS_OK; i++)
            if (!gemm_tune_entry(json_array_get(entries, i), &table[i])) {
                snprintf(why, sizeof why,
                         "entry %zu: expected {\"M\", \"N\", \"K\": 1..%d, \"ta\", \"tb\": true|false, \"path\": "
                         "\"blas\"|\"onednn\"}", i, GEMM_TUNE_MAX_DIM);
                st = STATUS_INPUT;
            }
    }
    json_decref(root);
    if (st != STATUS_OK) {
        log_error0("device.gemm_tune: %s %s\nHINT: make the table on this machine: nebula-bench model --model NAME "
                   "--batch B --seq T --save-tune FILE", path, why);
        return st;
    }
    gemm_set_table(table, (int)n);
    return STATUS_OK;
}
