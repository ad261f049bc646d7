/* fed_server — the server's rounds (rank 0): sample clients, send the global model,
 * gather the updates (or run secure aggregation's exchanges, fed_secagg_round.c), check
 * them, aggregate, add the DP noise, step the server optimizer, adapt the clip norm,
 * account the privacy spent, evaluate, log, checkpoint; and stop at fed.rounds or at
 * the privacy budget.
 *
 * The one design decision: the round's randomness on the server — which clients are
 * sampled, the central noise, the clip-count noise — is drawn from counter streams
 * keyed by the round (the stream ids FED_STREAM_*, far from any client id), so a
 * resumed round draws exactly what the uninterrupted one drew. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed_impl.h"

/* Sampling: poisson, each client with probability q (its own stream); fixed, a partial
 * Fisher-Yates of all clients. sel gets the clients in ascending order. */
static int fed_sample(const fed_run *f, int64_t round, int32_t *sel)
{
    int n = 0;
    if (f->poisson) {
        for (int c = 0; c < f->nclients; c++) {
            rng r;
            rng_init(&r, f->seed, (uint32_t)c, RNG_PURPOSE_FED, (uint64_t)round | (1ull << 45));
            if (rng_uniform_double(&r) < f->q) sel[n++] = c;
        }
        return n;
    }
    int32_t *all = malloc((size_t)f->nclients * sizeof *all);
    CHECK(all, "out of memory for the sampling's scratch");
    for (int c = 0; c < f->nclients; c++) all[c] = c;
    rng r;
    rng_init(&r, f->seed, FED_STREAM_SAMPLE, RNG_PURPOSE_FED, (uint64_t)round);
    for (int i = 0; i < f->per_round; i++) {
        int j = i + (int)(rng_u64(&r) % (uint64_t)(f->nclients - i));
        int32_t t = all[i];
        all[i] = all[j], all[j] = t;
    }
    bool *pick = calloc((size_t)f->nclients, 1);
    CHECK(pick, "out of memory for the sampling's scratch");
    for (int i = 0; i < f->per_round; i++) pick[all[i]] = true;
    for (int c = 0; c < f->nclients; c++)
        if (pick[c]) sel[n++] = c;
    free(all), free(pick);
    return n;
}

double fed_expected_clients(const fed_run *f)
{
    return f->poisson ? f->q * f->nclients : f->per_round;
}

/* Sends out[r] to every rank and gathers the replies into in[r] (in_len[r] < 0: none).
 * One process alone: the clients' handler answers in place. */
status fed_exchange(fed_run *f, fed_srv *s)
{
    if (f->world == 1) {
        s->in_len[0] = -1;
        if (!s->out_len[0]) return STATUS_OK;
        size_t n = 0;
        TRY(fed_client_round(f, s->out[0], s->out_len[0], &n));
        memcpy(s->in[0], f->msg, n);
        s->in_len[0] = (int64_t)n;
        return STATUS_OK;
    }
    const void **bufs = (const void **)s->ptrs;
    bool *expect = s->expect;
    for (int r = 0; r < f->world; r++) {
        bufs[r] = r > 0 && s->out_len[r] ? s->out[r] : NULL;
        expect[r] = bufs[r] != NULL;
    }
    TRY(comm_star_scatter(&f->star, bufs, s->out_len, FED_TAG_DOWN));
    for (int r = 0; r < f->world; r++) expect[r] = expect[r] && !comm_star_lost(&f->star, r);
    return comm_star_gather(&f->star, (void *const *)s->in, s->cap, expect, s->in_len, FED_TAG_UP);
}

/* A reply's header, checked: the kind and round expected; its entries' count. */
bool fed_reply_ok(const fed_srv *s, int r, uint32_t kind, int64_t round, fed_msg_head *h)
{
    if (s->in_len[r] < (int64_t)sizeof *h) return false;
    memcpy(h, s->in[r], sizeof *h);
    if (h->magic != FED_MAGIC || h->kind != kind || h->round != round || h->count < 0) {
        log_warn("fed: round %lld: rank %d's reply is not a %u message of this round (kind %u, round %lld); ignored",
                 (long long)round, r, kind, h->kind, (long long)h->round);
        return false;
    }
    return true;
}

/* The round messages: to each rank its sampled clients and the global model. */
static void fed_round_messages(fed_run *f, fed_srv *s, int64_t round, const fed_msg_round *tmpl)
{
    const float *gp = model_buffers(&f->ev)->params, *gs = model_state(&f->ev);
    for (int r = 0; r < f->world; r++) {
        s->out_len[r] = 0;
        if (f->world > 1 && r == 0) continue;
        fed_msg_round rm = *tmpl;
        rm.h.count = 0;
        int32_t *ids = (int32_t *)(s->out[r] + sizeof rm);
        for (int i = 0; i < s->nsel; i++)
            if (fed_client_rank(f, s->sel[i]) == r) ids[rm.h.count++] = s->sel[i];
        uint8_t *g = s->out[r] + sizeof rm + 4 * (size_t)rm.h.count;
        memcpy(g, gp, f->np * sizeof(float));
        if (f->ns) memcpy(g + f->np * sizeof(float), gs, f->ns * sizeof(float));
        memcpy(s->out[r], &rm, sizeof rm);
        s->out_len[r] = sizeof rm + 4 * (size_t)rm.h.count + 4 * f->d;
    }
    (void)round;
}

/* Plain aggregation: every reply's updates checked one by one; the accepted ones
 * aggregated into f->agg. */
static void fed_plain_collect(fed_run *f, fed_srv *s, int64_t round, fed_round_stats *rs)
{
    double limit = f->dp ? f->led.clip.C * (1 + 1e-6) + 1e-30 : f->max_norm;
    int k = 0;
    for (int r = 0; r < f->world; r++) {
        fed_msg_head h;
        if (!fed_reply_ok(s, r, FED_MSG_UPDATES, round, &h)) continue;
        size_t at = sizeof h, len = (size_t)s->in_len[r];
        for (int e = 0; e < h.count; e++) {
            fed_msg_client mc;
            if (at + sizeof mc > len) break;
            memcpy(&mc, s->in[r] + at, sizeof mc);
            at += sizeof mc;
            size_t bytes = mc.ok ? mc.n * sizeof(float) : 0;
            if (mc.ok && (mc.n > (len - at) / sizeof(float))) {
                log_warn("fed: round %lld: rank %d's reply is cut short in client %d's update; the rest is ignored",
                         (long long)round, r, mc.id);
                break;
            }
            int i = fed_sel_index(s, mc.id);
            if (i < 0 || fed_client_rank(f, mc.id) != r || s->got[i]) {
                log_warn("fed: round %lld: rank %d sent an update for client %d, which it was not asked for; refused",
                         (long long)round, r, mc.id);
                at += bytes;
                continue;
            }
            s->got[i] = true;
            if (!mc.ok) {
                rs->dropped++;  /* the client failed */
                at += bytes;
                continue;
            }
            const float *u = (const float *)(s->in[r] + at);
            at += bytes;
            double norm = NAN;
            fed_reject why = fed_update_check(u, mc.n, f->d, mc.round, round, limit, &norm);
            if (why == FED_REJECT_NONE && !(isfinite(mc.weight) && mc.weight > 0)) why = FED_REJECT_NONFINITE;
            if (why != FED_REJECT_NONE) {
                log_warn("fed: round %lld: client %d's update refused: %s (%llu floats for %zu, round %lld, norm %.4g, "
                         "limit %.4g)", (long long)round, mc.id, fed_reject_name(why), (unsigned long long)mc.n, f->d,
                         (long long)mc.round, norm, limit);
                rs->refused++;
                continue;
            }
            s->upd[k] = u, s->w[k] = mc.weight;
            rs->loss += mc.loss * mc.weight, rs->wsum += mc.weight;
            rs->bits += mc.bit;
            k++;
        }
    }
    rs->aggregated = k;
    for (int i = 0; i < s->nsel; i++) rs->dropped += !s->got[i];
    if (k == 0) return;
    if (f->robust) {
        int trim = f->robust_median ? (k - 1) / 2 : (int)floor(f->trim * k);
        if (f->robust_median) fed_agg_median(f->agg, s->upd, k, f->d, s->scratch);
        else fed_agg_trimmed_mean(f->agg, s->upd, k, f->d, trim, s->scratch);
    } else if (f->dp) {
        fed_agg_sum(f->agg, s->upd, NULL, k, f->d);  /* divided by the expected count after the noise */
    } else {
        fed_agg_mean(f->agg, s->upd, s->w, k, f->d);
    }
}

/* DP: the sum's noise (central), the fixed denominator, the clip norm's adaptation. */
static void fed_dp_finish(fed_run *f, int64_t round, fed_round_stats *rs)
{
    double m = fed_expected_clients(f), C = f->led.clip.C;
    if (f->dp == 1) {
        double sd = f->sigma_update * C;
        fed_noise_add(f->agg, f->d, sd, f->seed, FED_STREAM_NOISE, (uint64_t)round);
    }
    for (size_t i = 0; i < f->d; i++) f->agg[i] = (float)(f->agg[i] / m);
    if (f->adaptive) {
        double b;
        if (f->dp == 1) {
            b = fed_clip_fraction(&f->led.clip, (int64_t)llround(rs->bits), m, f->seed, FED_STREAM_CLIPBITS,
                                  (uint64_t)round);
        } else {
            b = rs->bits / m;  /* the clients' shares already noised the count */
        }
        fed_clip_adapt(&f->led.clip, b);
    }
}

static void fed_server_apply(fed_run *f)
{
    fed_server_step(&f->sopt, model_buffers(&f->ev)->params, f->agg, f->np);
    float *st = model_state(&f->ev);
    for (size_t i = 0; i < f->ns; i++) st[i] += f->agg[f->np + i];
}

/* Whether one more round keeps epsilon within the budget. */
static bool fed_budget_allows(const fed_run *f, double *eps_next)
{
    fed_rdp next = f->led.rdp;
    fed_rdp_compose(&next, f->q, f->led.sigma, 1);
    *eps_next = fed_rdp_epsilon(&next, f->delta, NULL);
    return f->target_eps <= 0 || *eps_next <= f->target_eps;
}

static status fed_one_round(fed_run *f, fed_srv *s, int64_t round)
{
    double t0 = MPI_Wtime();
    if (fed_planted(f, FED_PLANT_KILL, 0, round)) {
        log_warn("fed: the server ends its process at the start of round %lld (fed.plant kill)", (long long)round);
        fflush(stdout), fflush(stderr);
        raise(SIGKILL);
    }
    fed_round_stats rs;
    memset(&rs, 0, sizeof rs);
    s->nsel = fed_sample(f, round, s->sel);
    memset(s->got, 0, (size_t)f->nclients * sizeof *s->got);
    fed_msg_round tmpl;
    memset(&tmpl, 0, sizeof tmpl);
    tmpl.h = (fed_msg_head){ FED_MAGIC, FED_MSG_ROUND, round, 0, 0 };
    tmpl.secagg = f->secagg;
    tmpl.secagg_n = s->nsel;
    tmpl.secagg_t = f->secagg_t > 0 ? f->secagg_t : (s->nsel * 2 + 2) / 3 < 2 ? 2 : (s->nsel * 2 + 2) / 3;
    tmpl.frac_bits = f->frac_bits;
    tmpl.clip = f->dp ? f->led.clip.C : 0;
    tmpl.noise_std = f->dp == 2 ? f->sigma_update * f->led.clip.C / sqrt((double)tmpl.secagg_t) : 0;
    tmpl.bit_noise_std = f->dp == 2 && f->adaptive ? f->led.clip.sigma_b / sqrt((double)tmpl.secagg_t) : 0;
    tmpl.lr = f->lr;
    tmpl.d = f->d;
    fed_round_messages(f, s, round, &tmpl);
    TRY(fed_exchange(f, s));
    memset(f->agg, 0, f->d * sizeof *f->agg);
    if (f->secagg) TRY(fed_secagg_round(f, s, round, tmpl.secagg_t, &rs));
    else fed_plain_collect(f, s, round, &rs);
    if (rs.aggregated > 0 && f->dp) fed_dp_finish(f, round, &rs);
    if (rs.aggregated > 0) fed_server_apply(f);
    else log_warn("fed: round %lld: no update to aggregate (%d sampled); the global model stays", (long long)round,
                  s->nsel);
    if (f->dp) {
        fed_rdp_compose(&f->led.rdp, f->q, f->led.sigma, 1);  /* sampling is what is accounted, not who answered */
        f->led.eps = fed_rdp_epsilon(&f->led.rdp, f->delta, NULL);
    }
    f->led.round = round;
    f->led.sampled += s->nsel, f->led.dropped += rs.dropped, f->led.refused += rs.refused;
    f->led.aggregated += rs.aggregated;
    double el = NAN, ea = NAN;
    bool last = f->led.round == f->rounds;
    if (f->val.n > 0 && (last || (f->eval_every > 0 && f->led.round % f->eval_every == 0))) TRY(fed_evaluate(f, &el, &ea));
    fed_metrics_round(f, s->nsel, rs.dropped, rs.refused, rs.aggregated, rs.wsum > 0 ? rs.loss / rs.wsum : NAN, el, ea,
                      MPI_Wtime() - t0);
    if (f->ckpt && (last || (f->ckpt_every > 0 && f->led.round % f->ckpt_every == 0))) TRY(fed_ckpt_save(f));
    return STATUS_OK;
}

status fed_server_loop(fed_run *f)
{
    fed_srv s;
    TRY(fed_srv_init(f, &s));
    status st = STATUS_OK;
    while (f->led.round < f->rounds) {
        double eps_next = 0;
        if (f->dp && !fed_budget_allows(f, &eps_next)) {
            f->led.stop = 2;
            if (!f->quiet)
                printf("fed: stopping after round %lld: the privacy budget (epsilon %.4g at delta %.3g) is spent; one more "
                       "round would reach %.4g\n", (long long)f->led.round, f->target_eps, f->delta, eps_next);
            break;
        }
        st = fed_one_round(f, &s, f->led.round + 1);  /* rounds count from 1 */
        if (st != STATUS_OK) break;
    }
    double eps_next = 0;
    if (st == STATUS_OK && f->led.stop == 0 && f->dp && f->target_eps > 0 && !fed_budget_allows(f, &eps_next)) {
        f->led.stop = 2;  /* dp.budget = rounds: the last round the budget allows */
        if (!f->quiet)
            printf("fed: the privacy budget (epsilon %.4g at delta %.3g) is spent: one more round would reach %.4g\n",
                   f->target_eps, f->delta, eps_next);
    }
    if (st == STATUS_OK && f->led.stop == 0) f->led.stop = 1;
    if (st == STATUS_OK && f->ckpt && f->led.stop == 2) st = fed_ckpt_save(f);
    /* the clients stop whatever happened here */
    fed_msg_head h = { FED_MAGIC, FED_MSG_STOP, f->led.round, 0, f->star.nlost };  /* reserved: ranks lost */
    for (int r = 1; r < f->world; r++) {
        memcpy(s.out[r], &h, sizeof h);
        s.out_len[r] = sizeof h;
    }
    if (f->world > 1) {
        const void **bufs = (const void **)s.ptrs;
        for (int r = 0; r < f->world; r++) bufs[r] = r > 0 ? s.out[r] : NULL;
        comm_star_scatter(&f->star, bufs, s.out_len, FED_TAG_DOWN);
    }
    fed_srv_free(&s);
    return st;
}

bool fed_peers_lost(const fed_run *f)
{
    return f->star.nlost > 0 || f->lost_seen;
}

status fed_run_rounds(fed_run *f)
{
    if (f->rank != 0) return fed_client_loop(f);
    return fed_server_loop(f);
}
