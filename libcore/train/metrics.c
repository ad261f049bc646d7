/* metrics — what the run reports: one plain line per log interval on rank 0's stdout
 * and one JSON record per line in RUN_DIR/metrics.jsonl (kinds train, eval,
 * dgc_layers, summary), each flushed so a crash loses no line. The keys are fixed
 * (README, "nebula-train"): scripts and tests parse them. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train_impl.h"

double train_units(const train_run *r, const char **unit)
{
    bool images = r->spec.family == MODEL_FAMILY_RESNET;
    if (unit) *unit = images ? "img/s" : "tok/s";
    return images ? r->tb.global_batch : (double)r->tb.global_batch * r->T;
}

/* One record of metrics.jsonl (rank 0), flushed so a crash loses no line; takes j. */
void train_metrics_write(train_run *r, void *record)
{
    json_t *j = record;
    json_dumpf(j, r->metrics, JSON_COMPACT);
    fputc('\n', r->metrics);
    fflush(r->metrics);
    json_decref(j);
}

/* Rank 0, at a log interval. */
void train_log_step(train_run *r, const train_step_stats *ss, double units, const char *unit)
{
    if (r->rt->rank != 0) return;
    double eta = (r->steps - r->step) * ss->step_ms / 1e3;
    /* One plain line per interval, ETA included: under mpirun every rank's stdout is
     * a pseudo-terminal, so a terminal cannot be told from a batch log here. */
    printf("step=%ld loss=%.6f lr=%.4e gnorm=%.4f %s=%.1f step_ms=%.1f comm_wait_ms=%.2f eta=%.0fs", r->step,
           ss->loss, ss->lr, ss->gnorm, unit, units / (ss->step_ms / 1e3), ss->step_ms, ss->comm_wait_ms, eta);
    const dgc_stats *ds = &r->dstats;
    if (r->dgc && dgc_active(r->dgc))
        printf(" dgc_density=%.4g dgc_sent_kB=%.1f dgc_ratio=%.1f residual=%.4g select_ms=%.2f exchange_ms=%.2f"
               " zero_skipped=%zu", ds->density, ds->bytes_sent / 1e3,
               ds->bytes_sent ? (double)ds->dense_bytes / ds->bytes_sent : 0.0, ds->residual_norm,
               ds->select_s * 1e3, ds->exchange_s * 1e3, ds->zero_skipped);
    printf("\n");
    fflush(stdout);
    json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "kind", "train", "step",
                          (json_int_t)r->step, "loss", ss->loss, "lr", ss->lr, "gnorm", ss->gnorm, unit,
                          units / (ss->step_ms / 1e3), "step_ms", ss->step_ms, "comm_wait_ms", ss->comm_wait_ms);
    if (r->dgc && dgc_active(r->dgc))
        json_object_update_new(j, json_pack("{s:f, s:I, s:I, s:f, s:f, s:f, s:f}", "dgc_density", ds->density,
                                            "dgc_bytes_sent", (json_int_t)ds->bytes_sent, "dgc_bytes_recv",
                                            (json_int_t)ds->bytes_recv, "dgc_residual_norm", ds->residual_norm,
                                            "dgc_select_ms", ds->select_s * 1e3, "dgc_encode_ms",
                                            ds->encode_s * 1e3, "dgc_exchange_ms", ds->exchange_s * 1e3));
    if (r->dgc && dgc_active(r->dgc))  /* Pro 3: rank 0's slice */
        json_object_update_new(j, json_pack("{s:I, s:f, s:f}", "dgc_zero_skipped", (json_int_t)ds->zero_skipped,
                                            "dgc_zero_precision", ds->zero_predicted ?
                                                (double)ds->zero_hit / ds->zero_predicted : 1.0,
                                            "dgc_zero_recall", ds->zero_true ?
                                                (double)ds->zero_hit / ds->zero_true : 1.0));
    train_metrics_write(r, j);
}

/* DGC-Pro's choice per tensor (collective): rank 0 writes every tensor's density,
 * concentration and dense flag to metrics.jsonl ("dgc_layers") and prints a summary. */
status train_log_dgc_layers(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    int n = pt->count;
    float *dens = calloc((size_t)n, sizeof(float)), *conc = calloc((size_t)n, sizeof(float));
    uint8_t *dense = calloc((size_t)n, 1);
    CHECK(dens && conc && dense, "out of memory");
    status st = dgc_layer_table(r->dgc, dens, conc, dense, r->step);
    if (st == STATUS_OK && r->rt->rank == 0) {
        json_t *layers = json_array();
        int nd = 0;
        float lo = INFINITY, hi = 0;
        for (int e = 0; e < n; e++) {
            json_array_append_new(layers, json_pack("{s:s, s:f, s:f, s:b}", "name", pt->entries[e].name, "density",
                                                    (double)dens[e], "concentration", (double)conc[e], "dense",
                                                    (int)dense[e]));
            if (dense[e]) nd++;
            else lo = fminf(lo, dens[e]), hi = fmaxf(hi, dens[e]);
        }
        printf("dgc layers: %d compressed (density %.3g .. %.3g), %d dense\n", n - nd, nd < n ? lo : 0.0f,
               nd < n ? hi : 0.0f, nd);
        train_metrics_write(r, json_pack("{s:s, s:I, s:o}", "kind", "dgc_layers", "step", (json_int_t)r->step,
                                         "layers", layers));
    }
    free(dens), free(conc), free(dense);
    return st;
}
