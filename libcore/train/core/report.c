/* report — core's seams upward and the figures records are made of: the observers
 * of the step (train_observe), the sink of records (train_emit), JSON numbers,
 * throughput units, resident memory, non-finite counts.
 *
 * The one design decision: core and control never name an observer. A record goes to
 * whatever sink train_setup registered (metrics.c, which feeds metrics.jsonl and then
 * TensorBoard), a step's phases to whatever observers observe/ added; without them
 * (nebula-bench's bare train_step) nothing is written and nothing is timed. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

void train_observe(train_run *r, const train_step_observer *o)
{
    if (r->nobservers == TRAIN_OBSERVERS_MAX) die("train_observe", "more observers of the step than TRAIN_OBSERVERS_MAX", "raise it in train.h");
    r->observers[r->nobservers++] = *o;
}

void train_emit(train_run *r, void *j)
{
    if (r->sink.write) r->sink.write(r->sink.ctx, j);
    else json_decref(j);
}

void *train_json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

double train_units(const train_run *r, const char **unit)
{
    bool images = model_spec_images(&r->spec);
    if (unit) *unit = images ? "img/s" : "tok/s";
    return images ? r->tb.global_batch : (double)r->tb.global_batch * r->T;
}

double train_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE);
}

/* Whether x[0..n) is finite: the largest magnitude's bits below the exponent's all-ones
 * (a max reduction over integers, which vectorises; the model's buffers every step). */
static bool train_all_finite(const float *x, size_t n)
{
    uint32_t top = 0;
#pragma omp parallel for simd reduction(max : top) schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bits &= 0x7fffffffu;
        top = bits > top ? bits : top;
    }
    return top < 0x7f800000u;
}

size_t train_count_nonfinite(const float *x, size_t n)
{
    if (train_all_finite(x, n)) return 0;
    size_t bad = 0;  /* the rare case: counted for the message */
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}
