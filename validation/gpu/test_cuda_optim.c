/* test_cuda_optim — kernels/cuda optim, dgc and precision against their libcore
 * references, all bit-exact (the CUDA variants are designed to compute the same
 * floats in the same order; see each header):
 *   - AdamW and SGD (momentum, Nesterov, a plain tensor, no momentum) over a small
 *     param_table for several steps, whole-buffer and ZeRO-style ranges, vs
 *     optim_adamw_step[_ranges] / optim_sgd_step[_ranges]: params, moments and the
 *     untouched padding, byte for byte;
 *   - the clip: cuda_grad_norm_sq's sum vs optim_clip_grad_norm's norm, and the
 *     clipped gradients (cuda_scale) byte for byte;
 *   - DGC: cuda_dgc_select / count_above vs dgc_select (with NaN, inf, ties at the
 *     threshold and a truncating capacity), the sampled threshold vs
 *     dgc_sampled_threshold, gathered values (fp32, fp16) vs dgc_round_value;
 *   - casts: every bf16 and fp16 pattern widened, ~7 M floats narrowed, vs
 *     libcore/precision.c; unscale_check_finite's product and flag.
 * Device outputs sit between canaries where check.h provides them. Without a
 * CUDA device: one SKIP line, exit 77 (skipped). */
#define CHECK_GPU  /* the CUDA checks */
#include "../check.h"

#include "cuda/dgc.h"
#include "nn/optim_cuda.h"
#include "cuda/precision.h"
#include "dgc/dgc.h"
#include "nn/optim.h"
#include "nn/param.h"
#include "nn/precision.h"

#define STEPS 4

static uint64_t seed = 0x6f7074696d637564ull;

static void *dev_alloc(size_t bytes)
{
    void *d;
    int e = cuda_malloc(&d, bytes);
    if (e) gpu_die("cuda_malloc", e);
    return d;
}

static void download(void *host, const void *dev, size_t bytes)
{
    gpu_sync("download");
    int e = cuda_memcpy_d2h(host, dev, bytes);
    if (e) gpu_die("cuda_memcpy_d2h", e);
}

static void upload(void *dev, const void *host, size_t bytes)
{
    int e = cuda_memcpy_h2d(dev, host, bytes);
    if (e) gpu_die("cuda_memcpy_h2d", e);
}

static void report(bool ok, const char *what)
{
    printf("%s %s\n", ok ? "ok   " : "FAIL ", what);
    ok ? gpu_passed++ : gpu_failed++;
}

/* Exact: canaries and values (gpu_check_close with no tolerance), then the bits. */
static void check_exact(const char *what, const float *dev_guarded, const float *ref, size_t n)
{
    gpu_check_close(what, dev_guarded, ref, n, 0.0, 0.0);
    gpu_check_bytes(what, dev_guarded, ref, n * sizeof(float));
}

/* Tensors of mixed sizes and decay flags; the big one spans many blocks. */
static void make_table(param_table *pt)
{
    param_table_init(pt);
    param_add(pt, "wte.weight", -1, true, 2, 50, 37, 0, 0);
    param_add(pt, "h.0.ln_1.weight", 0, false, 1, 7, 0, 0, 0);
    param_add(pt, "h.0.attn.c_attn.weight", 0, true, 2, 7, 21, 0, 0);
    param_add(pt, "h.0.mlp.c_fc.weight", 0, true, 2, 129, 130, 0, 0);
    param_add(pt, "logit_scale", -1, false, 0, 0, 0, 0, 0);
}

/* Random values in every tensor, zero padding (as param_buffers_init leaves it). */
static void fill_tensors(const param_table *pt, float *x, float lo, float hi)
{
    memset(x, 0, pt->total * sizeof(float));
    for (int e = 0; e < pt->count; e++)
        gpu_fill_uniform(x + pt->entries[e].offset, pt->entries[e].count, lo, hi, &seed);
}

/* ZeRO-style ranges: each tensor cut in two (the cut not on a line boundary),
 * moments packed back to back in reverse order of the ranges. */
static int make_ranges(const param_table *pt, optim_range *r, size_t *packed_total)
{
    int n = 0;
    for (int e = 0; e < pt->count; e++) {
        size_t c = pt->entries[e].count, cut = c / 3;
        if (cut) r[n++] = (optim_range){ e, pt->entries[e].offset, cut, 0 };
        r[n++] = (optim_range){ e, pt->entries[e].offset + cut, c - cut, 0 };
    }
    size_t at = 0;
    for (int i = n - 1; i >= 0; i--) r[i].packed = at, at += r[i].count;
    *packed_total = at;
    return n;
}

static void test_adamw(const param_table *pt)
{
    size_t N = pt->total;
    param_buffers pb;
    if (param_buffers_init(&pb, pt, true) != STATUS_OK) gpu_die("param_buffers_init", 1);
    fill_tensors(pt, pb.params, -1.0f, 1.0f);
    fill_tensors(pt, pb.m, -0.1f, 0.1f);
    fill_tensors(pt, pb.v, 0.0f, 0.01f);
    float *dp = gpu_guarded(pb.params, N), *dg = gpu_guarded(NULL, N);
    float *dm = gpu_guarded(pb.m, N), *dv = gpu_guarded(pb.v, N);

    cuda_optim_range *cr = malloc(pt->count * sizeof *cr);
    cuda_optim_plan plan;
    int e = cuda_optim_plan_init(&plan, cr, cuda_optim_ranges_from_table(pt, NULL, cr));
    if (e) gpu_die("cuda_optim_plan_init", e);
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    cuda_adamw_hparams ch = cuda_adamw_hparams_from(&hp);
    for (long t = 1; t <= STEPS; t++) {
        fill_tensors(pt, pb.grads, -0.5f, 0.5f);
        upload(dg, pb.grads, N * sizeof(float));
        double lr = 1e-3 * (double)t;
        optim_adamw_step(pt, &pb, &hp, lr, t);
        cuda_adamw_step(dp, dg, dm, dv, &plan, &ch, lr, t);
    }
    check_exact("adamw 4 steps: params (decay entries only decayed, padding untouched)", dp, pb.params, N);
    check_exact("adamw 4 steps: m", dm, pb.m, N);
    check_exact("adamw 4 steps: v", dv, pb.v, N);
    gpu_check_close("adamw: gradients are read, never written", dg, pb.grads, N, 0.0, 0.0);
    cuda_optim_plan_free(&plan);

    /* The ranges form with packed moments. */
    optim_range r[16];
    size_t P;
    int nr = make_ranges(pt, r, &P);
    float *m = malloc(P * sizeof(float)), *v = malloc(P * sizeof(float));
    gpu_fill_uniform(m, P, -0.1f, 0.1f, &seed);
    gpu_fill_uniform(v, P, 0.0f, 0.01f, &seed);
    float *dpm = gpu_guarded(m, P), *dpv = gpu_guarded(v, P);
    cuda_optim_range cr2[16];
    if ((e = cuda_optim_plan_init(&plan, cr2, cuda_optim_ranges_from_optim(pt, r, nr, NULL, cr2))))
        gpu_die("cuda_optim_plan_init", e);
    for (long t = 1; t <= STEPS; t++) {
        fill_tensors(pt, pb.grads, -0.5f, 0.5f);
        upload(dg, pb.grads, N * sizeof(float));
        optim_adamw_step_ranges(pt, &pb, r, nr, m, v, &hp, 3e-4, t);
        cuda_adamw_step(dp, dg, dpm, dpv, &plan, &ch, 3e-4, t);
    }
    check_exact("adamw over ZeRO ranges: params", dp, pb.params, N);
    check_exact("adamw over ZeRO ranges: packed m", dpm, m, P);
    check_exact("adamw over ZeRO ranges: packed v", dpv, v, P);
    cuda_optim_plan_free(&plan);

    gpu_release(dp, 1), gpu_release(dg, 1), gpu_release(dm, 1), gpu_release(dv, 1);
    gpu_release(dpm, 1), gpu_release(dpv, 1);
    free(m), free(v), free(cr);
    param_buffers_free(&pb);
}

static void test_sgd(const param_table *pt, double momentum, bool nesterov, const uint8_t *plain, const char *what)
{
    size_t N = pt->total;
    param_buffers pb;
    if (param_buffers_init(&pb, pt, true) != STATUS_OK) gpu_die("param_buffers_init", 1);
    fill_tensors(pt, pb.params, -1.0f, 1.0f);
    float *dp = gpu_guarded(pb.params, N), *dg = gpu_guarded(NULL, N), *db = gpu_guarded(NULL, N);
    cuda_optim_range *cr = malloc(pt->count * sizeof *cr);
    cuda_optim_plan plan;
    int e = cuda_optim_plan_init(&plan, cr, cuda_optim_ranges_from_table(pt, plain, cr));
    if (e) gpu_die("cuda_optim_plan_init", e);
    sgd_hparams hp = { .momentum = momentum, .nesterov = nesterov, .weight_decay = 5e-4, .plain = plain };
    cuda_sgd_hparams ch = cuda_sgd_hparams_from(&hp);
    for (long t = 1; t <= STEPS; t++) {
        fill_tensors(pt, pb.grads, -0.5f, 0.5f);
        upload(dg, pb.grads, N * sizeof(float));
        optim_sgd_step(pt, &pb, &hp, 0.05, t);
        cuda_sgd_step(dp, dg, momentum ? db : NULL, &plan, &ch, 0.05, t);
    }
    char line[160];
    snprintf(line, sizeof line, "sgd %s, 4 steps: params", what);
    check_exact(line, dp, pb.params, N);
    if (momentum) {
        snprintf(line, sizeof line, "sgd %s, 4 steps: momentum buffer", what);
        check_exact(line, db, pb.m, N);
    }
    cuda_optim_plan_free(&plan);
    gpu_release(dp, 1), gpu_release(dg, 1), gpu_release(db, 1);
    free(cr);
    param_buffers_free(&pb);
}

static void test_clip(void)
{
    const size_t ns[] = { 0, 1, 272, 1000003, 5u << 20 };
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        size_t n = ns[k];
        float *g = malloc((n ? n : 1) * sizeof(float));
        gpu_fill_uniform(g, n, -3.0f, 3.0f, &seed);
        float *dg = gpu_guarded(g, n);
        double *dsum = dev_alloc(sizeof(double)), sum, norm;
        cuda_grad_norm_sq(dg, n, dsum);
        download(&sum, dsum, sizeof sum);
        float coef = optim_clip_grad_norm(g, n, 1.0, &norm);  /* clips g in place */
        double gpu_norm = sqrt(sum);
        char line[160];
        snprintf(line, sizeof line, "grad_norm_sq n=%zu: sqrt equals optim_clip_grad_norm's norm bit for bit (%.17g, %.17g)",
                 n, gpu_norm, norm);
        report(memcmp(&gpu_norm, &norm, sizeof norm) == 0, line);
        double c = 1.0 / (gpu_norm + 1e-6);
        if (isfinite(gpu_norm) && c < 1.0) cuda_scale(dg, n, (float)c);
        snprintf(line, sizeof line, "clip n=%zu by %.9g: gradients as optim_clip_grad_norm leaves them", n, coef);
        if (n) check_exact(line, dg, g, n);
        gpu_release(dg, 1);
        cuda_free(dsum);
        free(g);
    }
}

static void test_dgc(void)
{
    const size_t n = 1000003;  /* not a multiple of the 2048-entry tile */
    float *x = malloc(n * sizeof(float));
    gpu_fill_uniform(x, n, -1.0f, 1.0f, &seed);
    float *scratch = malloc(n * sizeof(float)), *sample = malloc(n * sizeof(float));
    float *dx = gpu_guarded(x, n), *dsample = gpu_guarded(NULL, n);

    /* Sampled thresholds: the device's sample, the host's k-th largest. */
    const double fractions[] = { 0.01, 3e-5, 1.0 }, densities[] = { 0.001, 0.1, 0.9 };
    for (int f = 0; f < 3; f++) {
        size_t m = cuda_dgc_sample_abs(dx, n, fractions[f], 42 + (uint64_t)f, dsample);
        download(sample, dsample, m * sizeof(float));
        for (int d = 0; d < 3; d++) {
            size_t k = (size_t)ceil(densities[d] * (double)m);
            k = k < 1 ? 1 : k > m ? m : k;
            float got = dgc_kth_abs(sample, m, k, scratch);
            float want = dgc_sampled_threshold(x, n, densities[d], fractions[f], 42 + (uint64_t)f, scratch);
            char line[160];
            snprintf(line, sizeof line, "sampled threshold fraction %g density %g (m=%zu): %.9g vs %.9g",
                     fractions[f], densities[d], m, got, want);
            report(memcmp(&got, &want, 4) == 0, line);
        }
    }

    /* Selection: ties at the threshold, inf, NaN, -0 planted. */
    float thr = dgc_sampled_threshold(x, n, 0.01, 0.01, 7, scratch);
    x[0] = thr, x[1] = -thr, x[2] = NAN, x[3] = INFINITY, x[n - 1] = -INFINITY, x[n - 2] = -0.0f;
    x[2047] = thr, x[2048] = -thr, x[4095] = NAN;  /* tile edges */
    upload(dx, x, n * sizeof(float));
    size_t cap = n;
    uint32_t *idx = malloc(cap * sizeof(uint32_t));
    size_t want = dgc_select(x, n, thr, idx, cap);
    uint32_t *didx = dev_alloc(cap * sizeof(uint32_t));
    uint64_t *dcount = dev_alloc(sizeof(uint64_t)), got;
    cuda_dgc_count_above(dx, n, thr, dcount);
    download(&got, dcount, sizeof got);
    report(got == want, "dgc count_above equals dgc_select's count");
    cuda_dgc_select(dx, n, thr, didx, cap, dcount);
    download(&got, dcount, sizeof got);
    report(got == want, "dgc select count equals dgc_select's");
    gpu_check_bytes("dgc select indices equal dgc_select's, ascending", didx, idx, want * sizeof(uint32_t));

    size_t small = want / 3;  /* truncation: the first `small` indices, the full count */
    uint32_t *idx2 = malloc((small + 1) * sizeof(uint32_t));
    dgc_select(x, n, thr, idx2, small);
    cuda_memset(didx, 0xff, cap * sizeof(uint32_t));
    cuda_dgc_select(dx, n, thr, didx, small, dcount);
    download(&got, dcount, sizeof got);
    uint32_t after;
    download(&after, didx + small, sizeof after);
    report(got == want && after == 0xffffffffu, "dgc select with a small capacity counts all, writes none past it");
    gpu_check_bytes("dgc select with a small capacity: the first indices", didx, idx2, small * sizeof(uint32_t));

    /* Gather: fp32 values and fp16-rounded values (NaN is never selected). */
    cuda_dgc_select(dx, n, thr, didx, cap, dcount);
    float *val = malloc(want * sizeof(float));
    float *dval = gpu_guarded(NULL, want);
    for (int fp16 = 0; fp16 <= 1; fp16++) {
        for (size_t j = 0; j < want; j++) val[j] = dgc_round_value(x[idx[j]], fp16 ? DGC_VALUES_FP16 : DGC_VALUES_FP32);
        cuda_dgc_gather_values(dx, didx, dcount, cap, dval, fp16);
        check_exact(fp16 ? "dgc gather, fp16 rounding, equals dgc_round_value" : "dgc gather, fp32", dval, val, want);
    }

    cuda_dgc_count_above(dx, 0, thr, dcount);
    download(&got, dcount, sizeof got);
    report(got == 0, "dgc count over 0 entries is 0");

    gpu_release(dx, 1), gpu_release(dsample, 1), gpu_release(dval, 1);
    cuda_free(didx), cuda_free(dcount);
    free(x), free(scratch), free(sample), free(idx), free(idx2), free(val);
}

static void test_casts(void)
{
    /* Widening: every pattern. */
    uint16_t *h = malloc(65536 * sizeof(uint16_t));
    float *want = malloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    uint16_t *dh = gpu_upload(h, 65536 * sizeof(uint16_t));
    float *df = gpu_guarded(NULL, 65536);
    for (uint32_t i = 0; i < 65536; i++) want[i] = f32_from_bf16((uint16_t)i);
    cuda_bf16_to_f32(dh, df, 65536);
    gpu_check_bytes("bf16 -> fp32, all 65536 patterns, equals f32_from_bf16", df, want, 65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++) want[i] = f32_from_f16((uint16_t)i);
    cuda_f16_to_f32(dh, df, 65536);
    gpu_check_bytes("fp16 -> fp32, all 65536 patterns (NaNs included), equals f32_from_f16", df, want,
                    65536 * sizeof(float));

    /* Narrowing: every top half with 49 bottom halves (ties and their neighbours), plus random. */
    const size_t sys = 65536u * 49u, n = sys + 4000000u;
    uint32_t *u = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) {
        if (i < sys) {
            uint32_t k = (uint32_t)(i % 49u);
            uint32_t low = k == 48 ? 0xffffu : ((k / 3u) * 0x1000u + (k % 3u) - 1u) & 0xffffu;
            u[i] = (uint32_t)(i / 49u) << 16 | low;
        } else {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            u[i] = (uint32_t)(seed >> 32);
        }
    }
    uint16_t *ref = malloc(n * sizeof(uint16_t));
    float *dx = gpu_upload(u, n * sizeof(uint32_t));
    uint16_t *dy = dev_alloc(n * sizeof(uint16_t));
    float f;
    for (size_t i = 0; i < n; i++) memcpy(&f, &u[i], 4), ref[i] = bf16_from_f32(f);
    cuda_f32_to_bf16(dx, dy, n);
    gpu_check_bytes("fp32 -> bf16 on 7.2 M systematic and random floats equals bf16_from_f32", dy, ref,
                    n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) memcpy(&f, &u[i], 4), ref[i] = f16_from_f32(f);
    cuda_f32_to_f16(dx, dy, n);
    gpu_check_bytes("fp32 -> fp16 on 7.2 M systematic and random floats equals f16_from_f32", dy, ref,
                    n * sizeof(uint16_t));

    /* Unscale: the product, and the flag only when a non-finite value is present. */
    const size_t m = 100003;
    float *g = malloc(m * sizeof(float)), *gw = malloc(m * sizeof(float));
    gpu_fill_uniform(g, m, -60000.0f, 60000.0f, &seed);
    float *dg = gpu_guarded(g, m);
    int *dflag = dev_alloc(sizeof(int)), flag = -1;
    loss_scaler ls;
    loss_scaler_init(&ls);
    float inv = loss_scaler_inv_scale(&ls);
    cuda_memset(dflag, 0, sizeof(int));
    cuda_unscale_check_finite(dg, m, inv, dflag);
    for (size_t i = 0; i < m; i++) gw[i] = g[i] * inv;
    check_exact("unscale: g * 2^-16, exact", dg, gw, m);
    download(&flag, dflag, sizeof flag);
    report(flag == 0, "unscale: finite gradients leave the flag 0");
    g[m - 1] = INFINITY;
    g[5] = NAN;
    upload(dg, g, m * sizeof(float));
    cuda_unscale_check_finite(dg, m, inv, dflag);
    download(&flag, dflag, sizeof flag);
    report(flag == 1, "unscale: an inf and a NaN set the flag");

    gpu_release(df, 1), gpu_release(dg, 1);
    cuda_free(dh), cuda_free(dx), cuda_free(dy), cuda_free(dflag);
    free(h), free(want), free(u), free(ref), free(g), free(gw);
}

int main(void)
{
    gpu_test_start("test_cuda_optim");
    param_table pt;
    make_table(&pt);
    test_adamw(&pt);
    test_sgd(&pt, 0.9, false, NULL, "momentum 0.9");
    test_sgd(&pt, 0.9, true, NULL, "Nesterov 0.9");
    uint8_t plain[5] = { 0, 0, 1, 0, 1 };
    test_sgd(&pt, 0.9, false, plain, "momentum with plain tensors 2 and 4");
    test_sgd(&pt, 0.0, false, NULL, "without momentum");
    test_clip();
    test_dgc();
    test_casts();
    param_table_free(&pt);
    return gpu_test_end("test_cuda_optim");
}
