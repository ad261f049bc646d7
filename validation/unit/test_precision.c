/* test_precision — libcore/precision.c: the fp32 <-> bf16 / fp16 conversions and the
 * dynamic loss scaler.
 *
 * Checks: every one of the 2^16 bf16 and fp16 patterns widens exactly and narrows
 * back to itself (NaNs to a quiet NaN of the same sign); bf16 rounding ties and
 * edge cases by hand, and against an independent nearest-even search in double on
 * ~3.4 M systematic and 8 M random floats; fp16 against gcc's _Float16 (libgcc
 * soft-fp, correctly rounded, NaN payload rules included) bit for bit on the same
 * sets; the loss scaler against a hand-derived trajectory, its clamp, and against
 * torch's GradScaler rule reproduced in validation/reference/loss_scaler_ref.py (a
 * missing python3 is a FAIL, never a skip). One line per check, exit 1 on any
 * failure. Run from the repository root. */
#include "nn/device.h"
#include "nn/precision.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_SCRIPT "validation/reference/loss_scaler_ref.py"
#define RANDOM_FLOATS 8000000

static int failures;

__attribute__((format(printf, 2, 3)))
static bool check(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok) failures++;
    return ok;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The float bit patterns both conversion sweeps use: every top half (sign, exponent,
 * 7 mantissa bits) with each bottom half in `lows` (every multiple of 0x1000, where
 * all RNE ties of bf16 and fp16 normals and most fp16 subnormals lie, one below and
 * one above it, and all ones), then RANDOM_FLOATS random patterns. */
static size_t sweep_count(void)
{
    return 65536u * 49u + RANDOM_FLOATS;
}

static uint32_t sweep_at(size_t i, uint64_t *rng)
{
    if (i >= 65536u * 49u) return (uint32_t)(xorshift(rng) >> 32);
    uint32_t top = (uint32_t)(i / 49u) << 16, k = (uint32_t)(i % 49u);
    uint32_t low = k == 48 ? 0xffffu : (k / 3u) * 0x1000u + (k % 3u) - 1u;  /* m-1, m, m+1 */
    return top | (low & 0xffffu);
}

/* ---- precision kinds ------------------------------------------------------------- */

static void test_kinds(void)
{
    bool ok = true;
    for (int k = 0; k <= PRECISION_FP16; k++) {
        precision_kind got;
        ok = ok && precision_kind_parse(precision_kind_name((precision_kind)k), &got, NULL) && (int)got == k;
    }
    check(ok, "precision_kind_name and _parse round-trip fp32, bf16, fp16");
    const char *why = NULL;
    precision_kind got = PRECISION_BF16;
    bool bad = !precision_kind_parse("float16", &got, &why) && got == PRECISION_BF16 && why &&
               strstr(why, "fp32") && strstr(why, "bf16") && strstr(why, "fp16");
    check(bad, "an unknown name is refused with a message naming the valid values (\"%s\")", why ? why : "");
    check(device_auto_precision(DEVICE_KIND_CUDA, 9) == PRECISION_BF16 &&
              device_auto_precision(DEVICE_KIND_CUDA, 8) == PRECISION_BF16 &&
              device_auto_precision(DEVICE_KIND_CUDA, 7) == PRECISION_FP16 &&
              device_auto_precision(DEVICE_KIND_CUDA, 6) == PRECISION_FP32 &&
              device_auto_precision(DEVICE_KIND_CPU, 0) == PRECISION_FP32,
          "device.precision = auto: bf16 on sm_80 and sm_90, fp16 on sm_70 (no bf16 tensor cores), fp32 on sm_60 and CPUs");
    check(precision_kind_bytes(PRECISION_FP32) == 4 && precision_kind_bytes(PRECISION_BF16) == 2 &&
              precision_kind_bytes(PRECISION_FP16) == 2 && strcmp(PRECISION_CHOICES, "fp32|bf16|fp16") == 0,
          "bytes per value 4, 2, 2; PRECISION_CHOICES lists the names");
}

/* ---- bf16 ------------------------------------------------------------------------- */

/* Independent reference: the nearer of the two bf16 neighbours of x, compared in
 * double (exact here: every bf16 and fp32 value is a double, their difference too),
 * the even one on a tie; beyond the largest finite value the upper neighbour is inf,
 * which RNE treats as 2^128 with an even mantissa. */
static uint16_t bf16_reference(float x)
{
    uint32_t u = bits_of(x);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffffu) == 0) return lo;
    double dx = fabs((double)x), dlo = fabs((double)f32_from_bf16(lo));
    double dhi = (hi & 0x7fffu) == 0x7f80u ? 0x1p128 : fabs((double)f32_from_bf16(hi));
    double a = dx - dlo, b = dhi - dx;
    if (a < b) return lo;
    if (b < a) return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_bf16(void)
{
    size_t widen_bad = 0, round_trip_bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f32_from_bf16((uint16_t)h);
        widen_bad += bits_of(f) != h << 16;
        uint16_t back = bf16_from_f32(f);
        bool is_nan = (h & 0x7fffu) > 0x7f80u;
        if (is_nan) nan_bad += !((back & 0x7fffu) > 0x7f80u && (back & 0x8040u) == ((h & 0x8000u) | 0x40u));
        else round_trip_bad += back != h;
    }
    check(widen_bad == 0, "bf16 -> fp32 is the 16-bit shift for all 65536 patterns (%zu wrong)", widen_bad);
    check(round_trip_bad == 0, "bf16 -> fp32 -> bf16 returns every non-NaN pattern (%zu wrong)", round_trip_bad);
    check(nan_bad == 0, "every bf16 NaN pattern narrows back to a quiet NaN of the same sign (%zu wrong)", nan_bad);

    static const struct { uint32_t in; uint16_t want; const char *what; } cases[] = {
        { 0x3f808000u, 0x3f80u, "1 + 2^-8 (tie) -> 1 (even)" },
        { 0x3f818000u, 0x3f82u, "tie above an odd bf16 -> up to even" },
        { 0x3f808001u, 0x3f81u, "just above a tie -> up" },
        { 0x3f807fffu, 0x3f80u, "just below a tie -> down" },
        { 0xbf808000u, 0xbf80u, "negative tie -> even" },
        { 0x7f7f7fffu, 0x7f7fu, "below max + half ulp -> max finite" },
        { 0x7f7f8000u, 0x7f80u, "max + half ulp (tie, odd max) -> inf" },
        { 0xff7fffffu, 0xff80u, "-max fp32 -> -inf" },
        { 0x7f800000u, 0x7f80u, "inf -> inf" },
        { 0x80000000u, 0x8000u, "-0 -> -0" },
        { 0x00008000u, 0x0000u, "subnormal tie -> 0 (even)" },
        { 0x00018000u, 0x0002u, "subnormal tie above odd -> even" },
        { 0x7f800001u, 0x7fc0u, "signalling NaN with a low payload -> quiet NaN" },
        { 0xffa12345u, 0xffe1u, "negative NaN keeps sign and top payload, gets the quiet bit" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = bf16_from_f32(float_of(cases[i].in));
        check(got == cases[i].want, "bf16 %08x: %s (got %04x, want %04x)", cases[i].in, cases[i].what, got,
              cases[i].want);
    }

    uint64_t rng = 0x62663136u;
    size_t n = sweep_count(), bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = sweep_at(i, &rng);
        if ((u & 0x7fffffffu) > 0x7f800000u) continue;  /* NaNs: checked above */
        uint16_t got = bf16_from_f32(float_of(u)), want = bf16_reference(float_of(u));
        if (got != want && bad++ == 0) first = u;
    }
    check(bad == 0, "bf16_from_f32 equals the nearest-even search on %zu systematic and random floats "
          "(%zu wrong, first %08zx)", n, bad, first);
}

/* ---- fp16 ------------------------------------------------------------------------- */

static uint16_t f16_compiler(float x)
{
    _Float16 h = (_Float16)x;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static float f32_compiler(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

static void test_f16(void)
{
    size_t widen_bad = 0, round_trip_bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f32_from_f16((uint16_t)h);
        widen_bad += bits_of(f) != bits_of(f32_compiler((uint16_t)h));
        uint16_t back = f16_from_f32(f);
        if ((h & 0x7fffu) > 0x7c00u) nan_bad += back != f16_compiler(f) || (back & 0x7fffu) <= 0x7c00u;
        else round_trip_bad += back != h;
    }
    check(widen_bad == 0, "fp16 -> fp32 equals (float)(_Float16) bit for bit on all 65536 patterns (%zu wrong)",
          widen_bad);
    check(round_trip_bad == 0, "fp16 -> fp32 -> fp16 returns every non-NaN pattern, subnormals included (%zu wrong)",
          round_trip_bad);
    check(nan_bad == 0, "fp16 NaNs come back as the compiler's quiet NaNs (%zu wrong)", nan_bad);

    static const struct { uint32_t in; uint16_t want; const char *what; } cases[] = {
        { 0x3f801000u, 0x3c00u, "1 + 2^-11 (tie) -> 1 (even)" },
        { 0x3f803000u, 0x3c02u, "tie above an odd fp16 -> up to even" },
        { 0x477fe000u, 0x7bffu, "65504 (max) -> max" },
        { 0x477fefffu, 0x7bffu, "just below 65520 -> max" },
        { 0x477ff000u, 0x7c00u, "65520 = max + half ulp (tie, odd max) -> inf" },
        { 0xc7800000u, 0xfc00u, "-65536 -> -inf" },
        { 0x38800000u, 0x0400u, "2^-14 -> smallest normal" },
        { 0x387fc000u, 0x03ffu, "2^-14 - 2^-24 -> largest subnormal" },
        { 0x387fe000u, 0x0400u, "2^-14 - 2^-25 (tie, odd) -> smallest normal" },
        { 0x33800000u, 0x0001u, "2^-24 -> smallest subnormal" },
        { 0x33000000u, 0x0000u, "2^-25 (tie) -> 0 (even)" },
        { 0x33000001u, 0x0001u, "just above 2^-25 -> smallest subnormal" },
        { 0x33c00000u, 0x0002u, "1.5 * 2^-24 (tie, odd) -> 2 * 2^-24" },
        { 0x80000001u, 0x8000u, "negative fp32 subnormal -> -0" },
        { 0x7f800001u, 0x7e00u, "signalling NaN with a low payload -> quiet NaN" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = f16_from_f32(float_of(cases[i].in));
        check(got == cases[i].want && got == f16_compiler(float_of(cases[i].in)),
              "fp16 %08x: %s (got %04x, want %04x, _Float16 %04x)", cases[i].in, cases[i].what, got, cases[i].want,
              f16_compiler(float_of(cases[i].in)));
    }

    uint64_t rng = 0x66703136u;
    size_t n = sweep_count(), bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = sweep_at(i, &rng);
        if (f16_from_f32(float_of(u)) != f16_compiler(float_of(u)) && bad++ == 0) first = u;
    }
    check(bad == 0, "f16_from_f32 equals _Float16 bit for bit on %zu systematic and random floats, NaNs included "
          "(%zu wrong, first %08zx)", n, bad, first);
}

/* ---- loss scaler ------------------------------------------------------------------ */

/* Runs flags ("0"/"1" per step) and compares scale and tracker after each step with
 * want_scale/want_tracker; returns the first differing step or -1. */
static int run_scaler(loss_scaler *ls, const char *flags, const float *want_scale, const int *want_tracker,
                      long *skipped)
{
    long skips = 0;
    for (int i = 0; flags[i]; i++) {
        bool skip = loss_scaler_update(ls, flags[i] == '1');
        skips += skip;
        if (skip != (flags[i] == '1') || ls->scale != want_scale[i] || ls->growth_tracker != want_tracker[i])
            return i;
    }
    if (skipped) *skipped = skips;
    return -1;
}

static void test_scaler_by_hand(void)
{
    loss_scaler ls;
    loss_scaler_init(&ls);
    check(ls.scale == 65536.0f && ls.growth_factor == 2.0 && ls.backoff_factor == 0.5 &&
              ls.growth_interval == 2000 && ls.growth_tracker == 0 && ls.min_scale == 1.0f &&
              ls.max_scale == 16777216.0f && loss_scaler_inv_scale(&ls) == 0x1p-16f,
          "defaults: scale 2^16, growth 2, backoff 0.5, interval 2000, clamp [1, 2^24], inv_scale 2^-16");

    /* Interval 3. Derivation: an inf halves and resets; the 3rd clean step in a row
     * doubles and resets; a clean step otherwise counts up. */
    ls.growth_interval = 3;
    static const char flags[] = "1001000101111000";
    static const float s[] = { 32768, 32768, 32768, 16384, 16384, 16384, 32768, 16384,
                               16384, 8192, 4096, 2048, 1024, 1024, 1024, 2048 };
    static const int tr[] = { 0, 1, 2, 0, 1, 2, 0, 0, 1, 0, 0, 0, 0, 1, 2, 0 };
    long skipped = 0;
    int at = run_scaler(&ls, flags, s, tr, &skipped);
    check(at < 0 && skipped == 7 && ls.skipped == 7,
          "interval 3, flags %s: hand-derived scales and trackers, 7 steps skipped (first difference at step %d)",
          flags, at);

    /* Default interval: 1999 clean steps keep 2^16, the 2000th doubles it. */
    loss_scaler_init(&ls);
    for (int i = 0; i < 1999; i++) loss_scaler_update(&ls, false);
    bool before = ls.scale == 65536.0f && ls.growth_tracker == 1999;
    loss_scaler_update(&ls, false);
    check(before && ls.scale == 131072.0f && ls.growth_tracker == 0,
          "interval 2000: 1999 clean steps keep 2^16 (tracker 1999), the 2000th grows to 2^17");

    /* Clamp: backoff stops at min_scale, growth at max_scale; the tracker still resets. */
    loss_scaler_init(&ls);
    ls.scale = 2.0f;
    for (int i = 0; i < 3; i++) loss_scaler_update(&ls, true);
    bool low = ls.scale == 1.0f && ls.skipped == 3;
    ls.scale = 8388608.0f;  /* 2^23 */
    ls.growth_interval = 1;
    loss_scaler_update(&ls, false);
    bool mid = ls.scale == 16777216.0f;
    loss_scaler_update(&ls, false);
    check(low && mid && ls.scale == 16777216.0f && ls.growth_tracker == 0,
          "clamp: backoff stops at 1, growth stops at 2^24 and still resets the tracker");
}

/* Against torch's rule (no clamp: min 0, max inf) on a pseudo-random sequence with a
 * small interval, so growths, backoffs and interrupted runs all occur, and a growth
 * past FLT_MAX that torch refuses. */
static void test_scaler_vs_torch(const char *init, double growth, double backoff, int interval, const char *flags,
                                 const char *what)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "python3 %s %s %.17g %.17g %d %s", REF_SCRIPT, init, growth, backoff, interval, flags);
    FILE *p = popen(cmd, "r");
    if (!check(p != NULL, "%s: python3 %s runs", what, REF_SCRIPT)) return;
    loss_scaler ls;
    loss_scaler_init(&ls);
    ls.scale = (float)strtod(init, NULL);
    ls.growth_factor = growth;
    ls.backoff_factor = backoff;
    ls.growth_interval = interval;
    ls.min_scale = 0.0f;
    ls.max_scale = INFINITY;
    int steps = 0, first_bad = -1;
    double ref;
    int tracker;
    while (flags[steps] && fscanf(p, "%lg %d", &ref, &tracker) == 2) {
        loss_scaler_update(&ls, flags[steps] == '1');
        if (first_bad < 0 && ((double)ls.scale != (double)(float)ref || ls.growth_tracker != tracker))
            first_bad = steps;
        steps++;
    }
    int rc = pclose(p);
    check(rc == 0 && steps == (int)strlen(flags) && first_bad < 0,
          "%s: %d steps equal torch GradScaler's rule (%s; first difference at %d)", what, steps, REF_SCRIPT,
          first_bad);
}

/* The array casts and the unscale of kernels/cpu/precision.h (the twins of
 * kernels/cuda/precision.h): each element equals the scalar cast, and the unscale
 * multiplies every element and raises the flag only for a non-finite input. */
static void test_arrays(void)
{
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h), *y = malloc(N * sizeof *y);
    float *x = malloc(N * sizeof *x), *f = malloc(N * sizeof *f);
    for (size_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    size_t bad = 0;
    bf16_to_f32(h, f, N);
    for (size_t i = 0; i < N; i++) bad += bits_of(f[i]) != bits_of(f32_from_bf16(h[i]));
    f16_to_f32(h, f, N);
    for (size_t i = 0; i < N; i++) bad += bits_of(f[i]) != bits_of(f32_from_f16(h[i]));
    uint64_t rng = 0x61727261797321u;
    for (size_t i = 0; i < N; i++) x[i] = float_of((uint32_t)xorshift(&rng));
    f32_to_bf16(x, y, N);
    for (size_t i = 0; i < N; i++) bad += y[i] != bf16_from_f32(x[i]);
    f32_to_f16(x, y, N);
    for (size_t i = 0; i < N; i++) bad += y[i] != f16_from_f32(x[i]);
    check(bad == 0, "the array casts equal the scalar casts on all 65536 patterns and 65536 random floats (%zu wrong)",
          bad);

    float g[4] = { 1.5f, -3.0f, 0.25f, 8.0f };
    int flag = 0;
    unscale_check_finite(g, 4, 0.5f, &flag);
    bool clean = flag == 0 && g[0] == 0.75f && g[1] == -1.5f && g[2] == 0.125f && g[3] == 4.0f;
    g[2] = INFINITY;
    unscale_check_finite(g, 4, 0.5f, &flag);
    bool raised = flag == 1 && g[0] == 0.375f;
    unscale_check_finite(g, 2, 0.5f, &flag);
    check(clean && raised && flag == 1, "unscale_check_finite multiplies, raises the flag on inf and never clears it");
    free(h), free(y), free(x), free(f);
}

int main(void)
{
    test_kinds();
    test_bf16();
    test_f16();
    test_arrays();
    test_scaler_by_hand();

    char flags[401];
    uint64_t rng = 0x6c7363616c6572u;
    for (int i = 0; i < 400; i++) flags[i] = (xorshift(&rng) % 10u) < 3u ? '1' : '0';  /* 30% overflow steps */
    flags[400] = '\0';
    test_scaler_vs_torch("65536", 2.0, 0.5, 3, flags, "400 random steps, interval 3");
    test_scaler_vs_torch("3", 1.5, 0.3, 2, flags, "400 random steps, factors 1.5/0.3 rounded in float");
    test_scaler_vs_torch("1.7014118346046923e38", 2.0, 0.5, 1, "00100", "growth past FLT_MAX is refused");

    printf("test_precision: %s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
