/* test_fed_rdp — the RDP accountant of federated training (libcore/fed/rdp.h).
 *
 * Checks what holds without Opacus: the default orders; the closed forms (q = 1:
 * alpha / (2 sigma^2) per round; alpha = 2: log(1 + q^2 (e^(1/sigma^2) - 1))); the integer
 * sums against a plain (not log-space) evaluation; the fractional series against the
 * integer sums at neighbouring orders and against a quadrature of A_alpha's integral;
 * composition adds; epsilon falls with sigma and grows with the rounds; sigma_for and
 * steps_for invert epsilon; the edge cases (q = 0, sigma = 0 or huge or tiny); the
 * ledger's value check. Then a few values printed by Opacus 1.5.2 itself; the full grid
 * against Opacus is validation/cli/test_fed_rdp.sh (validation/reference/fed_rdp_ref.py).
 *
 * The design decision: the same program is the C side of that comparison. With
 *   --rdp      [q sigma alpha]                            one round's RDP at one order
 *   --eps      [q sigma steps [q sigma steps ...] delta]   epsilon and its order
 *   --sigma-for [q steps delta eps]                        fed_rdp_sigma_for's sigma
 *   --steps-for [q sigma delta eps]                        fed_rdp_steps_for's count
 * it answers for the values on its command line, or, with none, for each line of stdin,
 * one line of %.17g numbers per question ("error" when refused), and checks nothing. */
#include "fed/rdp.h"
#include "../check.h"

#include <errno.h>

/* ---- the answering mode ---------------------------------------------------------- */

/* Parses n numbers; false on anything else. */
static bool parse_numbers(char **tok, int n, double *v)
{
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        v[i] = strtod(tok[i], &end);
        if (end == tok[i] || *end || errno) return false;
    }
    return true;
}

/* One question: mode and its words; prints the answer line. False when malformed. */
static bool answer(const char *mode, char **tok, int n)
{
    double v[64];
    if (n > 64 || !parse_numbers(tok, n, v)) return false;
    if (strcmp(mode, "--rdp") == 0) {
        if (n != 3 || !(v[0] >= 0 && v[0] <= 1) || !(v[1] >= 0) || !(v[2] > 1 && v[2] <= 1e6)) return false;
        printf("%.17g\n", fed_rdp_gaussian(v[0], v[1], v[2]));
    } else if (strcmp(mode, "--eps") == 0) {
        if (n < 4 || n % 3 != 1) return false;
        fed_rdp a;
        fed_rdp_init(&a);
        for (int i = 0; i + 1 < n; i += 3) {
            if (!(v[i] >= 0 && v[i] <= 1) || !(v[i + 1] >= 0) || !(v[i + 2] >= 0)) return false;
            fed_rdp_compose(&a, v[i], v[i + 1], (int64_t)v[i + 2]);
        }
        if (!(v[n - 1] > 0 && v[n - 1] < 1)) return false;
        double order, eps = fed_rdp_epsilon(&a, v[n - 1], &order);
        printf("%.17g %.17g\n", eps, order);
    } else if (strcmp(mode, "--sigma-for") == 0) {
        if (n != 4) return false;
        double sigma;
        if (fed_rdp_sigma_for(v[0], (int64_t)v[1], v[2], v[3], &sigma) == STATUS_OK) printf("%.17g\n", sigma);
        else printf("error\n");
    } else if (strcmp(mode, "--steps-for") == 0) {
        if (n != 4) return false;
        int64_t s = fed_rdp_steps_for(v[0], v[1], v[2], v[3]);
        if (s >= 0) printf("%lld\n", (long long)s);
        else printf("error\n");
    } else {
        return false;
    }
    fflush(stdout);
    return true;
}

static int answer_mode(int argc, char **argv)
{
    if (argc > 2) {
        if (answer(argv[1], argv + 2, argc - 2)) return 0;
        fprintf(stderr, "test_fed_rdp: cannot read the question '%s ...'\n", argv[1]);
        return 2;
    }
    char line[4096];
    int bad = 0;
    while (fgets(line, sizeof line, stdin)) {
        char *tok[65], *save = NULL;
        int n = 0;
        for (char *w = strtok_r(line, " \t\r\n", &save); w && n < 65; w = strtok_r(NULL, " \t\r\n", &save))
            tok[n++] = w;
        if (n == 0) continue;
        if (!answer(argv[1], tok, n)) {
            printf("malformed\n");
            bad = 1;
        }
    }
    return bad ? 2 : 0;
}

/* ---- references computed here ------------------------------------------------------ */

static double rel_err(double got, double want)
{
    return got == want ? 0 : fabs(got - want) / fabs(want);
}

/* A log-space sum of alpha + 1 terms of order 1 is off by a few DBL_EPSILON absolute
 * (each log-add rounds once), which the division by alpha - 1 >= 1 does not grow: the
 * RDP of a large sigma (~1e-8) carries that absolute error, not a relative one. The
 * worst |got - want| / (atol + rtol |want|); <= 1 passes. */
#define LOG_SUM_ATOL (64 * DBL_EPSILON)
static double err_ratio(double got, double want, double rtol)
{
    return got == want ? 0 : fabs(got - want) / check_limit(want, LOG_SUM_ATOL, rtol);
}

/* min over the orders of the conversion, written out again (Balle et al. 2020, thm 21). */
static double epsilon_of_rdp(const double *rdp, double delta)
{
    int n;
    const double *ord = fed_rdp_orders(&n);
    double best = INFINITY;
    for (int k = 0; k < n; k++)
        best = fmin(best, rdp[k] - (log(delta) + log(ord[k])) / (ord[k] - 1) + log((ord[k] - 1) / ord[k]));
    return best;
}

/* A_alpha for an integer alpha, summed plainly in double (small alpha, sigma >= 1). */
static double plain_a_int(double q, double sigma, int alpha)
{
    double a = 0, c = 1;
    for (int i = 0; i <= alpha; i++) {
        if (i > 0) c = c * (alpha - i + 1) / i;
        a += c * pow(q, i) * pow(1 - q, alpha - i) * exp((double)(i * i - i) / (2 * sigma * sigma));
    }
    return a;
}

/* A_alpha = E_{z ~ N(0, sigma^2)} [(1 - q + q exp((2z - 1) / (2 sigma^2)))^alpha] by
 * composite Simpson over [-14 sigma, alpha + 14 sigma] (the integrand's mass lies within
 * a few sigma of 0 and of alpha), 200000 intervals: error far below 1e-10 here. */
static double quad_a(double q, double sigma, double alpha)
{
    const int n = 200000;
    double lo = -14 * sigma, hi = alpha + 14 * sigma, h = (hi - lo) / n, s = 0;
    for (int i = 0; i <= n; i++) {
        double z = lo + i * h;
        double f = exp(-z * z / (2 * sigma * sigma)) / (sigma * sqrt(2 * M_PI)) *
                   pow(1 - q + q * exp((2 * z - 1) / (2 * sigma * sigma)), alpha);
        s += f * (i == 0 || i == n ? 1 : i % 2 ? 4 : 2);
    }
    return s * h / 3;
}

/* ---- the checks ---------------------------------------------------------------- */

static void test_orders(test_ctx *t)
{
    int n = 0;
    const double *o = fed_rdp_orders(&n);
    bool asc = true;
    for (int k = 1; k < n; k++) asc = asc && o[k] > o[k - 1];
    check(t, n == FED_RDP_NORDERS && n == 151 && o[0] == 1 + 1 / 10.0 && o[98] == 1 + 99 / 10.0 && o[99] == 12 &&
             o[150] == 63 && asc, "orders: Opacus's 151 default orders 1.1..10.9 then 12..63, ascending (n %d)", n);
    check(t, o[9] == 2.0 && o[19] == 3.0 && o[89] == 10.0,
          "orders: 1 + 10/10.0, 1 + 20/10.0, 1 + 90/10.0 are exactly 2, 3, 10 (the integer sums apply)");
    fed_rdp a;
    memset(&a, 0xa5, sizeof a);
    fed_rdp_init(&a);
    double order = -1;
    bool zero = a.steps == 0 && a.reserved == 0;
    for (int k = 0; k < n; k++) zero = zero && a.rdp[k] == 0;
    check(t, zero && fed_rdp_epsilon(&a, 1e-5, &order) == 0 && order == 0,
          "init: an empty ledger; its epsilon is 0 at order 0 (Opacus's accountant without history)");
}

static void test_closed_forms(test_ctx *t)
{
    int n;
    const double *o = fed_rdp_orders(&n);
    double worst = 0;
    for (double sigma = 0.5; sigma <= 8; sigma *= 2)
        for (int k = 0; k < n; k++) worst = fmax(worst, rel_err(fed_rdp_gaussian(1, sigma, o[k]), o[k] / (2 * sigma * sigma)));
    check(t, worst == 0, "q = 1: alpha / (2 sigma^2) per round at every order, sigma 0.5..8 (worst %.1e)", worst);

    fed_rdp a;
    fed_rdp_init(&a);
    fed_rdp_compose(&a, 1, 2.0, 300);
    double want[FED_RDP_NORDERS];
    worst = 0;
    for (int k = 0; k < n; k++) {
        want[k] = 300 * o[k] / (2 * 4.0);
        worst = fmax(worst, rel_err(a.rdp[k], want[k]));
    }
    double eps = fed_rdp_epsilon(&a, 1e-5, NULL), eps_want = epsilon_of_rdp(want, 1e-5);
    check(t, worst <= 1e-15 && rel_err(eps, eps_want) <= 1e-15 && a.steps == 300,
          "q = 1, sigma 2, 300 rounds: 300 alpha / 8 at every order, epsilon %.6f = the conversion's minimum", eps);

    worst = 0;
    for (double q = 0.001; q < 1; q *= 3)
        for (double sigma = 0.7; sigma <= 10; sigma *= 1.7) {
            double w = log1p(q * q * expm1(1 / (sigma * sigma)));
            worst = fmax(worst, err_ratio(fed_rdp_gaussian(q, sigma, 2), w, 1e-13));
        }
    check(t, worst <= 1, "alpha = 2: log(1 + q^2 (e^(1/sigma^2) - 1)), q 0.001..0.73, sigma 0.7..10, within "
          "64 eps + 1e-13 relative (worst ratio %.2f)", worst);

    worst = 0;
    for (int alpha = 3; alpha <= 12; alpha++)
        for (double q = 0.003; q < 1; q *= 4)
            for (double sigma = 1; sigma <= 6; sigma += 1.25)
                worst = fmax(worst, err_ratio(fed_rdp_gaussian(q, sigma, alpha),
                                              log(plain_a_int(q, sigma, alpha)) / (alpha - 1), 1e-13));
    check(t, worst <= 1, "integer orders 3..12: the log-space sum = log of the plain sum / (alpha - 1), within "
          "64 eps + 1e-13 relative (worst ratio %.2f)", worst);
}

/* The fractional series is a different formula from the integer sum: at alpha = m +- 1e-7
 * it must meet it (RDP is smooth in alpha), and match a quadrature of the integral. */
static void test_fractional(test_ctx *t)
{
    const double qs[] = { 0.001, 0.01, 0.1, 0.5, 0.9 }, sigmas[] = { 0.6, 1, 2.5, 8 };
    const int ms[] = { 2, 3, 5, 10, 20 };
    double worst = 0;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t c = 0; c < 5; c++) {
                double q = qs[a], s = sigmas[b], m = ms[c], r = fed_rdp_gaussian(q, s, m);
                /* the slope d rdp / d alpha is below rdp here, so 1e-7 moves it < 1e-6 relative */
                worst = fmax(worst, rel_err(fed_rdp_gaussian(q, s, m - 1e-7), r));
                worst = fmax(worst, rel_err(fed_rdp_gaussian(q, s, m + 1e-7), r));
            }
    check(t, worst <= 2e-6, "fractional series at m -+ 1e-7 = the integer sum at m = 2..20, q 0.001..0.9, "
          "sigma 0.6..8 (worst %.1e)", worst);

    const struct { double q, sigma, alpha; } cases[] = {
        { 0.1, 1.0, 2.5 }, { 0.01, 1.1, 1.3 }, { 0.3, 2.0, 6.7 }, { 0.05, 0.8, 4.2 }, { 0.7, 3.0, 1.9 },
    };
    worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double want = log(quad_a(cases[i].q, cases[i].sigma, cases[i].alpha)) / (cases[i].alpha - 1);
        worst = fmax(worst, rel_err(fed_rdp_gaussian(cases[i].q, cases[i].sigma, cases[i].alpha), want));
    }
    check(t, worst <= 1e-8, "fractional orders 1.3..6.7: log of a Simpson quadrature of A_alpha's integral / "
          "(alpha - 1) (worst %.1e)", worst);
}

static void test_edges(test_ctx *t)
{
    int n;
    const double *o = fed_rdp_orders(&n);
    bool zero = true, inf = true, finite = true, huge0 = true;
    for (int k = 0; k < n; k++) {
        zero = zero && fed_rdp_gaussian(0, 1, o[k]) == 0 && fed_rdp_gaussian(0, 0, o[k]) == 0;
        inf = inf && fed_rdp_gaussian(0.01, 0, o[k]) == INFINITY && fed_rdp_gaussian(1, 0, o[k]) == INFINITY;
        double tiny = fed_rdp_gaussian(0.01, 1e-200, o[k]), big = fed_rdp_gaussian(0.3, 1e4, o[k]);
        finite = finite && !isnan(tiny) && tiny > 1e6 && big >= 0 && big < 1e-6;
        huge0 = huge0 && fed_rdp_gaussian(0.5, INFINITY, o[k]) == 0 && fed_rdp_gaussian(0.2, 1e200, o[k]) == 0;
    }
    check(t, zero, "q = 0: RDP 0 at every order, whatever sigma (0 included)");
    check(t, inf, "sigma = 0 and q > 0: RDP +inf at every order");
    check(t, finite, "sigma 1e-200 (sigma^2 underflows): a huge or infinite RDP, never NaN; sigma 1e4: in [0, 1e-6)");
    check(t, huge0, "sigma +inf or 1e200 (sigma^2 overflows): RDP 0");
    check(t, fed_rdp_gaussian(0.01, 1, INFINITY) == INFINITY, "order +inf: RDP +inf");

    fed_rdp a;
    fed_rdp_init(&a);
    fed_rdp_compose(&a, 0.01, 0, 10);
    double order = 0, eps = fed_rdp_epsilon(&a, 1e-5, &order);
    check(t, eps == INFINITY && fed_rdp_check(&a, (char[8]){ 0 }, 8) == STATUS_OK,
          "no noise: epsilon +inf (order %g), and the ledger of +inf values is sane", order);
    fed_rdp_init(&a);
    fed_rdp_compose(&a, 0.01, 1, 0);
    check(t, a.steps == 0 && a.rdp[0] == 0 && fed_rdp_epsilon(&a, 1e-5, NULL) == 0, "0 rounds add nothing");
    fed_rdp_compose(&a, 0, 1, 7);
    eps = fed_rdp_epsilon(&a, 1e-5, &order);
    check(t, a.steps == 7 && fabs(eps - (-(log(1e-5) + log(63.0)) / 62 + log(62.0 / 63))) <= 1e-15 && order == 63,
          "q = 0: RDP 0, epsilon = the conversion's own cost at the largest order (%.6f at %g)", eps, order);
}

static void test_compose(test_ctx *t)
{
    fed_rdp ab, a, b, whole, parts;
    fed_rdp_init(&ab);
    fed_rdp_init(&a);
    fed_rdp_init(&b);
    fed_rdp_compose(&ab, 0.02, 1.0, 500);
    fed_rdp_compose(&ab, 0.05, 2.0, 300);
    fed_rdp_compose(&a, 0.02, 1.0, 500);
    fed_rdp_compose(&b, 0.05, 2.0, 300);
    bool add = ab.steps == 800;
    for (int k = 0; k < FED_RDP_NORDERS; k++) add = add && ab.rdp[k] == a.rdp[k] + b.rdp[k];
    check(t, add, "composition: (q 0.02, sigma 1, 500) then (0.05, 2, 300) = the sum of the two ledgers, exactly");

    fed_rdp_init(&whole);
    fed_rdp_init(&parts);
    fed_rdp_compose(&whole, 0.01, 1.3, 1000);
    for (int i = 0; i < 10; i++) fed_rdp_compose(&parts, 0.01, 1.3, 100);
    double worst = 0;
    for (int k = 0; k < FED_RDP_NORDERS; k++) worst = fmax(worst, rel_err(parts.rdp[k], whole.rdp[k]));
    check(t, worst <= 1e-14 && parts.steps == 1000, "composition: 10 x 100 rounds = 1000 rounds (worst %.1e)", worst);
}

static double eps_after(double q, double sigma, int64_t steps, double delta)
{
    fed_rdp a;
    fed_rdp_init(&a);
    fed_rdp_compose(&a, q, sigma, steps);
    return fed_rdp_epsilon(&a, delta, NULL);
}

static void test_monotone(test_ctx *t)
{
    bool in_sigma = true, in_steps = true;
    for (double q = 0.001; q <= 1; q *= 10) {
        double prev = INFINITY;
        for (double sigma = 0.5; sigma <= 10; sigma *= 1.15) {
            double e = eps_after(q, sigma, 100, 1e-5);
            in_sigma = in_sigma && e < prev;
            prev = e;
        }
        prev = -INFINITY;
        for (int64_t steps = 1; steps <= 100000; steps *= 3) {
            double e = eps_after(q, 1.2, steps, 1e-5);
            in_steps = in_steps && e > prev;
            prev = e;
        }
    }
    check(t, in_sigma, "epsilon falls strictly as sigma grows 0.5..10 (q 0.001..1, 100 rounds)");
    check(t, in_steps, "epsilon grows strictly with the rounds 1..1e5 (q 0.001..1, sigma 1.2)");
}

static void test_planning(test_ctx *t)
{
    const struct { double q; int64_t steps; double delta, eps; } sc[] = {
        { 0.01, 1000, 1e-5, 1.0 }, { 0.001, 10000, 1e-6, 0.5 }, { 0.1, 100, 1e-5, 8.0 },
        { 1.0, 10, 1e-5, 3.0 },    { 0.05, 1, 1e-5, 0.2 },      { 0.004, 5000, 1e-5, 2.0 },
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        double s = -1;
        status st = fed_rdp_sigma_for(sc[i].q, sc[i].steps, sc[i].delta, sc[i].eps, &s);
        double at = eps_after(sc[i].q, s, sc[i].steps, sc[i].delta);
        double below = eps_after(sc[i].q, s * (1 - 1e-6), sc[i].steps, sc[i].delta);
        check(t, st == STATUS_OK && at <= sc[i].eps && below > sc[i].eps,
              "sigma_for(q %g, %lld rounds, delta %g, eps %g) = %.9g: eps %.12g there, %.12g at sigma (1 - 1e-6)",
              sc[i].q, (long long)sc[i].steps, sc[i].delta, sc[i].eps, s, at, below);
        if (st != STATUS_OK) continue;
        int64_t n = fed_rdp_steps_for(sc[i].q, s, sc[i].delta, sc[i].eps);
        double e_n = eps_after(sc[i].q, s, n, sc[i].delta), e_n1 = eps_after(sc[i].q, s, n + 1, sc[i].delta);
        check(t, n >= sc[i].steps && e_n <= sc[i].eps && e_n1 > sc[i].eps,
              "steps_for(q %g, sigma %.9g, eps %g) = %lld >= %lld: eps %.12g there, %.12g one round later", sc[i].q,
              s, sc[i].eps, (long long)n, (long long)sc[i].steps, e_n, e_n1);
    }
    double s = -1;
    check(t, fed_rdp_sigma_for(0, 100, 1e-5, 2.0, &s) == STATUS_OK && s == 0, "sigma_for at q = 0: no noise (0)");
    check(t, fed_rdp_steps_for(0.01, 1.0, 1e-5, 1e-3) == 0, "steps_for: 0 when one round already exceeds epsilon");
    check(t, fed_rdp_steps_for(0, 1.0, 1e-5, 5.0) == INT64_MAX, "steps_for at q = 0: INT64_MAX (no count exceeds it)");
    check(t, fed_rdp_steps_for(0.01, 0, 1e-5, 5.0) == 0, "steps_for without noise: 0");
    int64_t big = fed_rdp_steps_for(1e-6, 50, 1e-5, 10);
    check(t, big > 1000000000 && eps_after(1e-6, 50, big, 1e-5) <= 10 && eps_after(1e-6, 50, big + 1, 1e-5) > 10,
          "steps_for with a budget of %lld rounds (beyond 2^30)", (long long)big);
}

static void test_refusals(test_ctx *t)
{
    double s = 7;
    capture_begin(t);
    status st = fed_rdp_sigma_for(0.5, 100000, 1e-6, 0.01, &s);
    const char *msg = capture_end(t, true);
    check(t, st == STATUS_INPUT && s == 7 && strstr(msg, "0.01") && strstr(msg, "100000") && strstr(msg, "1e-06") &&
             strstr(msg, "10000"), "sigma_for: an unreachable budget (eps 0.01 after 100000 rounds at q 0.5) is "
          "STATUS_INPUT, the message names the values and the bound");
    const struct { double q; int64_t steps; double delta, eps; const char *what; } bad[] = {
        { -0.1, 10, 1e-5, 1, "q < 0" }, { 1.5, 10, 1e-5, 1, "q > 1" }, { NAN, 10, 1e-5, 1, "q NaN" },
        { 0.1, 0, 1e-5, 1, "0 rounds" }, { 0.1, 10, 0, 1, "delta 0" }, { 0.1, 10, 1, 1, "delta 1" },
        { 0.1, 10, 1e-5, 0, "eps 0" }, { 0.1, 10, 1e-5, NAN, "eps NaN" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        capture_begin(t);
        st = fed_rdp_sigma_for(bad[i].q, bad[i].steps, bad[i].delta, bad[i].eps, &s);
        int64_t n = fed_rdp_steps_for(bad[i].q, 1.0, bad[i].delta, bad[i].eps);
        msg = capture_end(t, false);
        bool steps_bad = bad[i].steps == 0 ? n >= 0 : n == -1;  /* steps_for takes no count */
        check(t, st == STATUS_INPUT && steps_bad && strstr(msg, "fed_rdp_sigma_for"),
              "out of range (%s): sigma_for STATUS_INPUT, steps_for %lld, logged", bad[i].what, (long long)n);
    }
    capture_begin(t);
    int64_t n = fed_rdp_steps_for(0.1, -1, 1e-5, 1);
    msg = capture_end(t, false);
    check(t, n == -1 && strstr(msg, "sigma = -1"), "steps_for: sigma < 0 is refused (-1), logged with the value");
}

static void test_check(test_ctx *t)
{
    char why[256];
    fed_rdp a;
    fed_rdp_init(&a);
    check(t, fed_rdp_check(&a, why, sizeof why) == STATUS_OK, "check: an empty ledger is sane");
    fed_rdp_compose(&a, 0.01, 1.0, 100);
    check(t, fed_rdp_check(&a, why, sizeof why) == STATUS_OK, "check: a ledger after 100 rounds is sane");
    const struct { int k; double v; int64_t steps; const char *what, *needle; } bad[] = {
        { 5, NAN, 100, "a NaN", "nan" },           { 150, -1e-3, 100, "a negative value", "order 63" },
        { 0, -INFINITY, 100, "-inf", "-inf" },     { 0, 0, -3, "a negative count", "-3 rounds" },
        { 40, 0.5, 0, "a value before any round", "after 0 rounds" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fed_rdp c = a;
        c.rdp[bad[i].k] = bad[i].v;
        c.steps = bad[i].steps;
        if (bad[i].steps == 0) memset(c.rdp, 0, sizeof c.rdp), c.rdp[bad[i].k] = bad[i].v;
        why[0] = '\0';
        status st = fed_rdp_check(&c, why, sizeof why);
        check(t, st == STATUS_CORRUPT && strstr(why, bad[i].needle), "check: %s is STATUS_CORRUPT: %s", bad[i].what, why);
    }
}

/* Printed by Opacus 1.5.2 in build/venv (RDPAccountant with history [(sigma, q, steps)],
 * get_privacy_spent(delta=...); analysis.rdp._compute_rdp(q, sigma, alpha)), repr digits. */
static void test_opacus_values(test_ctx *t)
{
    const struct { double q, sigma; int64_t steps; double delta, eps, order; } acc[] = {
        { 0.01, 1.1, 1000, 1e-5, 1.7117700912203435, 9.6 },
        { 0.001, 0.8, 100, 1e-5, 1.0821004385053803, 8.9 },
        { 0.1, 4.0, 10000, 1e-6, 15.681416845909116, 3.0 },
        { 1.0, 0.5, 1, 1e-5, 10.725509696418232, 3.3 },
    };
    for (size_t i = 0; i < sizeof acc / sizeof acc[0]; i++) {
        fed_rdp a;
        fed_rdp_init(&a);
        fed_rdp_compose(&a, acc[i].q, acc[i].sigma, acc[i].steps);
        double order, eps = fed_rdp_epsilon(&a, acc[i].delta, &order);
        check(t, rel_err(eps, acc[i].eps) <= 1e-10 && order == acc[i].order,
              "Opacus: q %g, sigma %g, %lld rounds, delta %g: eps %.17g (Opacus %.17g), order %g (%g)", acc[i].q,
              acc[i].sigma, (long long)acc[i].steps, acc[i].delta, eps, acc[i].eps, order, acc[i].order);
    }
    fed_rdp a;
    fed_rdp_init(&a);
    fed_rdp_compose(&a, 0.02, 1.0, 500);
    fed_rdp_compose(&a, 0.05, 2.0, 300);
    double order, eps = fed_rdp_epsilon(&a, 1e-5, &order);
    check(t, rel_err(eps, 3.790991285666657) <= 1e-10 && order == 5.6,
          "Opacus: history [(1.0, 0.02, 500), (2.0, 0.05, 300)], delta 1e-5: eps %.17g (Opacus 3.790991285666657), "
          "order %g (5.6)", eps, order);
    const struct { double q, sigma, alpha, rdp; } one[] = {
        { 0.01, 1.1, 2.5, 0.00016207740933199663 }, { 0.01, 1.1, 32, 8.469416433675926 },
        { 0.1, 0.7, 1.3, 0.029301300586098162 },    { 0.5, 2.0, 7.7, 0.39897690889672555 },
        { 0.05, 3.0, 63, 0.47700175073464995 },
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        double r = fed_rdp_gaussian(one[i].q, one[i].sigma, one[i].alpha);
        check(t, rel_err(r, one[i].rdp) <= 1e-10, "Opacus _compute_rdp(q %g, sigma %g, alpha %g) = %.17g (ours %.17g)",
              one[i].q, one[i].sigma, one[i].alpha, one[i].rdp, r);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) return answer_mode(argc, argv);
    test_ctx t = { 0 };
    test_orders(&t);
    test_closed_forms(&t);
    test_fractional(&t);
    test_edges(&t);
    test_compose(&t);
    test_monotone(&t);
    test_planning(&t);
    test_refusals(&t);
    test_check(&t);
    test_opacus_values(&t);
    printf("%s: %d check(s) failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
