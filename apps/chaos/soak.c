/* soak — a long training with every fault kind at seeded random times, as users run it:
 * goodput (useful steps per wall second), the time to recover from each fault, leak
 * slopes (resident memory, open descriptors, disk use of the run directory) and the
 * integrity of every new checkpoint. The 72-hour soak.sbatch runs this same code; only
 * soak.duration differs.
 *
 * Schedule: fault k strikes at a time drawn uniformly from the middle half of the k-th
 * period of soak.fault_every, and each round of soak.faults is a seeded shuffle of the
 * kinds, so every kind comes once per round and fault.seed replays the same plan.
 * Ranks are found and hit on every node through the rank registry (ranks.c).
 *
 * Time to recover: from the fault to the first step beyond the step the run had reached
 * when it struck. Slopes are least-squares lines through the samples (per hour):
 * memory and descriptors per launch (a relaunch starts fresh processes; the first fifth of
 * each launch, at least 3 samples, is warm-up), disk over the whole soak. */
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chaos.h"
#include "base/log.h"
#include "base/path.h"
#include "base/provenance.h"

#define SOAK_MAX_FAULTS 4096

typedef struct sample {
    double t;                  /* seconds since the soak started */
    int launch;
    long step;
    double rss_mb;             /* sum over the ranks, on every node */
    int fds;                   /* sum over the ranks */
    double disk_mb;            /* the run directory's allocated blocks */
    double steps_per_s;        /* since the previous sample of the same launch; NAN if none */
    bool full;                 /* every rank was sampled: sums over fewer are not comparable */
    bool trained;              /* the launch had trained a step: its ranks are past start-up */
} sample;

typedef struct soak_fault {
    double t_plan;             /* seconds after the start */
    const char *kind;
    double t;                  /* when it struck (supervisor clock); 0 before */
    long pre_step;             /* the step reached when it struck */
    int launch;                /* the launch it struck (index) */
    bool injected;             /* evidence: signal delivered, "chaos: injected" logged, bytes flipped */
    double t_recover;          /* first step beyond pre_step afterwards; 0 before */
    long lost;                 /* steps redone */
    char what[160];
} soak_fault;

static double du_bytes;
static int du_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)path; (void)flag; (void)ftw;
    du_bytes += (double)sb->st_blocks * 512.0;
    return 0;
}

static double disk_mb(const char *dir)
{
    du_bytes = 0;
    nftw(dir, du_entry, 16, FTW_PHYS);
    return du_bytes / (1024.0 * 1024.0);
}

static double field_of(const sample *p, int field)
{
    return field == 0 ? p->rss_mb : field == 1 ? (double)p->fds : p->disk_mb;
}

/* Least-squares slope of a field over time, per hour, with an intercept per launch (the
 * pooled "within" estimator): every launch's samples count towards one slope, and a
 * relaunch's fresh processes do not read as a drop. Samples taken while a rank was
 * missing or before the launch trained a step are left out, and the first fifth of each
 * launch (at least 2 samples) as warm-up. per_launch = false: one line through all
 * samples (the run directory outlives the launches). NAN with fewer than 3 samples. */
static double ls_slope(const sample *s, int ns, int field, bool per_launch)
{
    double sxy = 0, sxx = 0;
    int used = 0;
    for (int a = 0; a < ns;) {
        int b = a;
        while (b < ns && (!per_launch || s[b].launch == s[a].launch)) b++;
        int n = 0, skip;
        for (int i = a; i < b; i++) n += !per_launch || (s[i].full && s[i].trained);
        skip = per_launch ? (n / 5 > 2 ? n / 5 : 2) : 0;
        double mt = 0, my = 0;
        int m = 0;
        for (int i = a, k = 0; i < b; i++) {
            if (per_launch && !(s[i].full && s[i].trained)) continue;
            if (k++ < skip) continue;
            mt += s[i].t;
            my += field_of(&s[i], field);
            m++;
        }
        if (m >= 2) {
            mt /= m;
            my /= m;
            for (int i = a, k = 0; i < b; i++) {
                if (per_launch && !(s[i].full && s[i].trained)) continue;
                if (k++ < skip) continue;
                sxy += (s[i].t - mt) * (field_of(&s[i], field) - my);
                sxx += (s[i].t - mt) * (s[i].t - mt);
            }
            used += m;
        }
        a = b;
    }
    return used >= 3 && sxx > 0 ? sxy / sxx * 3600.0 : NAN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_s(const chaos_ctx *x)
{
    return chaos_now() - x->t0;
}

/* The plan: times and kinds, reproducible from the seed. */
static int plan(const config *cfg, double duration, double every, char *kinds_buf, soak_fault *f)
{
    const char *kinds[16];
    int nk = 0;
    for (char *t = strtok(kinds_buf, ", "); t && nk < 16; t = strtok(NULL, ", ")) kinds[nk++] = t;
    uint64_t seed = (uint64_t)config_int(cfg, "fault.seed");
    int n = 0;
    const char *round[16];
    for (int k = 0; n < SOAK_MAX_FAULTS; k++) {
        double t = every * (k + 0.25 + 0.5 * (double)(chaos_mix(&seed) >> 11) / 9007199254740992.0);
        if (t + every / 4 >= duration) break;  /* room to recover before the end */
        if (k % nk == 0) {  /* a new round: Fisher-Yates shuffle of the kinds */
            memcpy(round, kinds, (size_t)nk * sizeof *round);
            for (int i = nk - 1; i > 0; i--) {
                int j = (int)(chaos_mix(&seed) % (uint64_t)(i + 1));
                const char *tmp = round[i]; round[i] = round[j]; round[j] = tmp;
            }
        }
        memset(&f[n], 0, sizeof f[n]);
        f[n].t_plan = t;
        f[n].kind = round[k % nk];
        f[n].launch = -1;
        n++;
    }
    return n;
}

/* Signals every rank (all) or one seeded rank; writes what; true when delivered to all. */
static bool strike(chaos_ctx *x, int world, bool all, int sig, uint64_t *seed, char *what, size_t cap)
{
    static chaos_rank ranks[1024];
    char log[2 * CHAOS_PATH_MAX];
    snprintf(log, sizeof log, "%s/supervisor.log", x->out);
    chaos_ranks(x->run_dir, ranks, 1024);
    int one = (int)(chaos_mix(seed) % (uint64_t)world), sent = 0, want = all ? world : 1;
    for (int r = 0; r < world && r < 1024; r++)
        if ((all || r == one) && chaos_signal_rank(&ranks[r], sig, log)) sent++;
    if (all) snprintf(what, cap, "%s to %d of %d ranks", chaos_signame(sig), sent, world);
    else snprintf(what, cap, "%s rank %d on %s%s", chaos_signame(sig), one, ranks[one].node[0] ? ranks[one].node : "?",
                  sent ? "" : " (not reached)");
    return sent == want;
}

/* An armed io-error / disk-full fault struck the save of step `at` (its launch logged
 * "chaos: injected"), seen at time t. */
static void mark_struck(soak_fault *f, long at, double t)
{
    f->t = t;
    f->pre_step = at;
    f->injected = true;
    snprintf(f->what + strlen(f->what), sizeof f->what - strlen(f->what), "; struck the save of step %ld", at);
}

static void csv_row(FILE *f, const sample *p)
{
    fprintf(f, "%.3f,%d,%ld,%.2f,%d,%.3f,%.3f\n", p->t, p->launch, p->step, p->rss_mb, p->fds, p->disk_mb,
            p->steps_per_s);
}

/* samples.csv is opened once every rank's host is known (its provenance line names them),
 * with the samples taken before; NULL, with a warning, when it cannot be written. It grows
 * while the soak runs (tail -f), so it is not written atomically: whatever stands under
 * its name (an earlier soak's file, a link planted there) is unlinked, never written
 * through, and a fresh file is created (O_EXCL, O_NOFOLLOW). */
static FILE *csv_open(const char *path, const json_t *prov, const sample *s, int ns)
{
    char why[256];
    int fd;
    unlink(path);
    if (path_create_regular(path, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_warn("soak: %s %s; the report still has the figures", path, why);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        log_warn("soak: cannot write %s: %s; the report still has the figures", path, log_errno_str());
        close(fd);
        return NULL;
    }
    (void)provenance_write_csv_line(f, prov);  /* a failing file fails the rows too */
    fprintf(f, "t_s,launch,step,rss_mb,fds,disk_mb,steps_per_s\n");
    for (int i = 0; i < ns; i++) csv_row(f, &s[i]);
    fflush(f);
    return f;
}

/* Ended with its state saved: exit 3, or rank 0's line saying so (a launcher may turn the
 * ranks' 3 into its own code). */
static bool stopped_saved(const chaos_launch *l)
{
    if (l->exit_code == 3) return true;
    FILE *f = fopen(l->log, "r");
    if (!f) return false;
    char line[4096];
    bool yes = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "on request") && strstr(line, "checkpoint committed") && strstr(line, "exit code 3")) yes = true;
    fclose(f);
    return yes;
}

/* Everything the soak's phases share: the plan, the samples, the verifier's progress and
 * the state of the launch being watched. */
typedef struct soak {
    const config *cfg;
    const char *out;
    json_t *prov;
    chaos_ctx *x;
    int world;
    long ck;                   /* scenario.ckpt_every */
    double duration, sample_every, hb_timeout, start_timeout;
    char kinds[CONFIG_STR_MAX + 1];  /* soak.faults, cut up by plan(): the faults' kinds point here */
    soak_fault *fs;
    int nf, fi;                /* planned; struck or armed so far */
    uint64_t seed;             /* the strikes' random ranks */
    sample *s;
    int ns;
    size_t cap;
    int verify_fail, verified;
    long last_verified, corrupted;  /* corrupted: -1 none, -2 pending until the launch ends */
    struct stat corrupt_marker;  /* the damaged step's COMMITTED: a later save replaces it */
    char log[2 * CHAOS_PATH_MAX], csv_path[2 * CHAOS_PATH_MAX], vlog[2 * CHAOS_PATH_MAX], slog[2 * CHAOS_PATH_MAX];
    char fault_env[CONFIG_STR_MAX + 64];
    FILE *csv;
    bool csv_tried;
    int hosts_seen;            /* ranks whose host the provenance names; the others are "unknown" */
    double t_sample, t_hb, loss_until;
    bool stopping, failed;
    const char *arm;           /* the next launch runs the CHAOS build with this fault armed */
    int armed_fault, armed_launch, no_progress;
    long prev_step;            /* the launch's previous sample, for steps_per_s */
    double prev_t;
    char why[256];
} soak;

/* What the soak measured, judged against soak.max_*: the report's content. */
typedef struct soak_result {
    double wall;
    chaos_launch *last;
    long worst_lost, executed, useful;
    int lost_over, injected, recovered;
    bool corrupt_loaded;
    double worst_recover;
    double rss_slope, fd_slope, disk_slope;
    double first, lastq, drop;  /* median steps/s of the first and last third; the drop */
    long final;                /* the newest commit that is not the damaged one */
    int final_rc;              /* nebula-ckpt verify of it */
    double max_rss, max_fd, max_disk, max_drop;
    bool ok_rss, ok_fd, ok_disk, ok_tp, ok_ck, ok_inj, ok_rec, ok_lost, ok_end, pass;
    double goodput;
} soak_result;

static void soak_setup(soak *S, const config *cfg, const char *out, json_t *prov)
{
    S->cfg = cfg;
    S->out = out;
    S->prov = prov;
    S->duration = chaos_duration(config_str(cfg, "soak.duration"));
    double every = chaos_duration(config_str(cfg, "soak.fault_every"));
    S->sample_every = chaos_duration(config_str(cfg, "soak.sample_every"));
    chaos_ctx *x = S->x = calloc(1, sizeof *x);
    S->fs = calloc(SOAK_MAX_FAULTS, sizeof *S->fs);
    CHECK(x && S->fs, "out of memory");
    x->cfg = cfg;
    x->t0 = chaos_now();
    snprintf(x->name, sizeof x->name, "soak");
    snprintf(x->out, sizeof x->out, "%s", out);
    snprintf(x->run_dir, sizeof x->run_dir, "%s/run", out);
    S->world = (int)config_int(cfg, "scenario.ranks");
    S->ck = config_int(cfg, "scenario.ckpt_every");
    S->hb_timeout = config_float(cfg, "scenario.heartbeat_timeout");
    S->start_timeout = config_float(cfg, "soak.start_timeout");
    snprintf(S->kinds, sizeof S->kinds, "%s", config_str(cfg, "soak.faults"));
    S->nf = plan(cfg, S->duration, every, S->kinds, S->fs);
    S->seed = (uint64_t)config_int(cfg, "fault.seed") * 104729u + 1;
    S->cap = (size_t)(S->duration / S->sample_every) + 64;
    S->s = calloc(S->cap, sizeof *S->s);
    CHECK(S->s, "out of memory for the samples");
    S->last_verified = -1;
    S->corrupted = -1;
    printf("soak: %d ranks, %g s, %d faults planned (%s, seed %ld, one per %g s), a sample every %g s\n", S->world,
           S->duration, S->nf, config_str(cfg, "soak.faults"), (long)config_int(cfg, "fault.seed"), every,
           S->sample_every);
    fflush(stdout);
    snprintf(S->csv_path, sizeof S->csv_path, "%s/samples.csv", out);
    snprintf(S->vlog, sizeof S->vlog, "%s/verify.log", out);
    snprintf(S->slog, sizeof S->slog, "%s/supervisor.log", out);
    S->t_sample = x->t0;
    S->armed_fault = S->armed_launch = -1;
}

/* The newest commit, verified once: a failure counts only while the checkpoint is still
 * there (a newer save may have pruned it meanwhile). */
static void soak_verify_newest(soak *S)
{
    chaos_ctx *x = S->x;
    long c = chaos_newest_commit(x->run_dir);
    if (c <= S->last_verified) return;
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, c);
    int rc = chaos_run_cmd((const char *const[]){ x->ckpt_bin, "verify", path, NULL }, S->vlog);
    /* 126 and up is the verifier not running (a rebuild), not a verdict */
    if (rc >= 126 || rc < 0) {
        log_warn("soak: nebula-ckpt verify could not run (exit %d); %s is checked later", rc, path);
        return;
    }
    if (rc != 0 && access(path, F_OK) == 0) {
        S->verify_fail++;
        log_error("soak: %s does not verify (see %s)", path, S->vlog);
    }
    S->verified++;
    S->last_verified = c;
}

/* One sample: memory and descriptors of every rank once the launch trains, the run
 * directory's disk use, the rate since the launch's previous sample; then the verifier. */
static void soak_sample(soak *S, double now, long step, bool trained)
{
    static chaos_rank ranks[1024];
    chaos_ctx *x = S->x;
    sample *p = &S->s[S->ns];
    memset(p, 0, sizeof *p);
    p->t = now - x->t0;
    p->launch = x->nlaunches;
    p->step = step;
    if (trained) {
        int seen = chaos_ranks(x->run_dir, ranks, 1024);
        p->full = chaos_usage(ranks, S->world, &p->rss_mb, &p->fds, S->slog) == S->world;
        if (seen > S->hosts_seen && S->hosts_seen < S->world) {
            provenance_set_hosts(S->prov, ranks[0].host, S->world < 1024 ? S->world : 1024, sizeof ranks[0]);
            S->hosts_seen = seen;
        }
    }
    p->disk_mb = disk_mb(x->run_dir);
    p->trained = trained;
    p->steps_per_s = S->prev_step >= 0 && now > S->prev_t ? (step - S->prev_step) / (now - S->prev_t) : NAN;
    S->prev_step = step;
    S->prev_t = now;
    S->ns++;
    if (S->csv) {
        csv_row(S->csv, p);
        fflush(S->csv);  /* a 72-hour soak is watched with tail -f */
    } else if (!S->csv_tried && S->hosts_seen >= S->world) {
        S->csv = csv_open(S->csv_path, S->prov, S->s, S->ns);
        S->csv_tried = true;
    }
    S->t_sample += S->sample_every;
    if (S->t_sample < now) S->t_sample = now + S->sample_every;  /* after a stall: no burst */
    soak_verify_newest(S);
}

/* The next planned fault strikes launch `me` at `step`. */
static void soak_strike_next(soak *S, int me, long step, double now)
{
    chaos_ctx *x = S->x;
    const config *cfg = S->cfg;
    soak_fault *f = &S->fs[S->fi];
    const char *k = f->kind;
    f->launch = me;
    f->pre_step = step;
    f->t = now;
    if (!strcmp(k, "kill") || !strcmp(k, "stop"))
        f->injected = strike(x, S->world, false, !strcmp(k, "kill") ? SIGKILL : SIGSTOP, &S->seed, f->what,
                             sizeof f->what);
    else if (!strcmp(k, "preempt"))
        f->injected = strike(x, S->world, true, SIGTERM, &S->seed, f->what, sizeof f->what);
    else if (!strcmp(k, "ckpt-corrupt")) {
        /* the job dies; the newest commit is damaged before the relaunch */
        strike(x, S->world, true, SIGKILL, &S->seed, f->what, sizeof f->what);
        S->corrupted = -2;  /* pending */
    } else if (!strcmp(k, "packet-loss")) {
        char pct[32];
        snprintf(pct, sizeof pct, "%g", config_float(cfg, "fault.loss_pct"));
        f->injected = chaos_run_cmd((const char *const[]){ "tools/netns-cluster", "loss", pct, NULL }, S->slog) == 0;
        snprintf(f->what, sizeof f->what, "%s%% packet loss for %g s", pct, config_float(cfg, "fault.loss_seconds"));
        S->loss_until = now + config_float(cfg, "fault.loss_seconds");
    } else {
        /* io-error, disk-full: a graceful stop, and the relaunch runs the CHAOS
         * build whose next save fails (fault.io, or ENOSPC at the data write):
         * the fault counts when that launch logs it */
        char what[64];
        const char *rule = !strcmp(k, "io-error") ? config_str(cfg, "fault.io") : "ckpt.write:ENOSPC";
        if (strike(x, S->world, true, SIGTERM, &S->seed, what, sizeof what)) {
            S->arm = rule;
            S->armed_fault = S->fi;
            f->t = 0;
        }
        snprintf(f->what, sizeof f->what, "%.60s %s after %s", rule, S->arm ? "armed" : "NOT armed", what);
    }
    printf("  %.0f s: fault %d (%s) at step %ld: %s\n", now - x->t0, S->fi + 1, k, step, f->what);
    fflush(stdout);
    S->fi++;
}

/* Watches launch `me` until it ends or is stopped: recoveries, the end of a packet loss,
 * a dead or hung rank, the graceful end, samples and strikes. */
static void soak_watch(soak *S, chaos_launch *l, int me)
{
    chaos_ctx *x = S->x;
    soak_fault *fs = S->fs;
    S->t_hb = l->t_start;
    S->prev_step = -1;
    S->prev_t = 0;
    double t_prev = chaos_now(), now;
    long step;
    for (;;) {
        if (!chaos_watch_tick(l, x->run_dir, &t_prev, &S->t_hb, &now, &step)) return;
        for (int i = 0; i < S->fi; i++)  /* recovered: a later step than the fault found */
            if (fs[i].t && !fs[i].t_recover && step > fs[i].pre_step &&
                (me > fs[i].launch || !strcmp(fs[i].kind, "packet-loss")))
                fs[i].t_recover = now;
        if (S->loss_until > 0 && now >= S->loss_until) {
            chaos_run_cmd((const char *const[]){ "tools/netns-cluster", "loss", "none", NULL }, S->slog);
            S->loss_until = 0;
        }
        if (chaos_poll(l)) return;
        if (!S->stopping && chaos_rank_died(l, x->run_dir)) {
            chaos_kill_ranks(x->run_dir, S->slog);
            chaos_stop(l, x->run_dir, SIGTERM, 2);
            return;
        }
        /* this launch has trained a step: its ranks are registered and past start-up (the
         * heartbeat may still be the last launch's) */
        bool trained = l->resumed_step >= 0 && step > l->resumed_step;
        /* start-up (a step of the job waiting for the last one's resources, MPI wire-up,
         * the resume) gets soak.start_timeout; then no step for heartbeat_timeout is a hang */
        if (now - S->t_hb > (trained ? S->hb_timeout : fmax(S->hb_timeout, S->start_timeout))) {
            log_warn("soak: no progress for %.1f s%s: stopping the hung launch", now - S->t_hb,
                     trained ? "" : " since it started");
            l->hung = true;
            chaos_kill_ranks(x->run_dir, S->slog);
            chaos_stop(l, x->run_dir, SIGTERM, 2);
            return;
        }
        /* every fault that struck has been recovered from (a fault late in the soak is
         * followed through, within the overrun allowance) */
        bool settled = S->armed_fault < 0;
        for (int i = 0; i < S->fi; i++) settled &= fs[i].t_recover > 0 || !fs[i].t;
        if (!S->stopping && now - x->t0 >= S->duration && trained &&
            (settled || now - x->t0 > S->duration + 2 * fmax(S->hb_timeout, S->start_timeout))) {
            /* the end: a graceful stop, as a scheduler's time limit would ask for (once
             * the launch trains: a rank that has not registered cannot be told) */
            char what[160];
            strike(x, S->world, true, SIGTERM, &S->seed, what, sizeof what);
            S->stopping = true;
        }
        if (now >= S->t_sample && S->ns < (int)S->cap && step >= 0) soak_sample(S, now, step, trained);
        /* the armed launch: its "chaos: injected" line is the fault */
        if (S->armed_fault >= 0 && S->armed_launch == me && !fs[S->armed_fault].t) {
            long at = chaos_log_step(l->log, "chaos: injected ", "(step ", NULL);  /* the save it struck */
            if (at >= 0) mark_struck(&fs[S->armed_fault], at, now);
        }
        if (!S->stopping && S->fi < S->nf && now - x->t0 >= fs[S->fi].t_plan && trained && S->armed_fault < 0)
            soak_strike_next(S, me, step, now);
        usleep(50000);
    }
}

/* After launch `me` ended: the armed fault's verdict, the damage a ckpt-corrupt asked
 * for, and whether the soak can go on (S->failed, S->why). */
static void soak_launch_ended(soak *S, chaos_launch *l, int me)
{
    chaos_ctx *x = S->x;
    if (S->armed_fault >= 0 && S->armed_launch == me) {
        soak_fault *f = &S->fs[S->armed_fault];
        /* the log once more: a launch that struck and ended between two polls (the
         * failed save aborts the job within milliseconds) has the line only now */
        long at = f->t ? -1 : chaos_log_step(l->log, "chaos: injected ", "(step ", NULL);
        if (at >= 0) mark_struck(f, at, l->t_end ? l->t_end : chaos_now());
        if (!f->t) {  /* the launch ended without the fault: it did not strike */
            f->t = l->t_end ? l->t_end : chaos_now();
            f->pre_step = l->last_step;
            snprintf(f->what + strlen(f->what), sizeof f->what - strlen(f->what), "; NOT injected (exit %d)",
                     l->exit_code);
        }
        S->armed_fault = S->armed_launch = -1;
    }
    if (S->corrupted == -2) {
        S->corrupted = chaos_corrupt_newest(x->run_dir, config_int(S->cfg, "fault.corrupt_bytes"));
        char m[2 * CHAOS_PATH_MAX];
        snprintf(m, sizeof m, "%s/ckpt/step_%08ld/COMMITTED", x->run_dir, S->corrupted);
        if (S->corrupted >= 0) stat(m, &S->corrupt_marker);
        /* damaged on purpose: the relaunch must skip it (checked below), the verifier
         * need not say so */
        if (S->corrupted > S->last_verified) S->last_verified = S->corrupted;
        soak_fault *f = &S->fs[S->fi - 1];
        f->injected = S->corrupted >= 0 && strstr(f->what, " 0 of ") == NULL;
        snprintf(f->what + strlen(f->what), sizeof f->what - strlen(f->what), "; step %ld corrupted", S->corrupted);
    }
    if (S->stopping || chaos_interrupted) return;
    if (now_s(x) > S->duration + 2 * fmax(S->hb_timeout, S->start_timeout)) {
        snprintf(S->why, sizeof S->why, "the duration passed and launch %d ended before its graceful stop",
                 x->nlaunches);
        S->failed = true;
    }
    if (l->exit_code == 2) {
        snprintf(S->why, sizeof S->why, "launch %d exited 2 (usage or input error): see %s", x->nlaunches, l->log);
        S->failed = true;
    }
    /* a launch that never trained is no fault's doing: three in a row end the soak */
    S->no_progress = l->last_step <= l->resumed_step ? S->no_progress + 1 : 0;
    if (S->no_progress == 3) {
        snprintf(S->why, sizeof S->why, "3 launches in a row made no step: see %s", l->log);
        S->failed = true;
    }
    if (x->nlaunches == CHAOS_MAX_LAUNCHES) {
        snprintf(S->why, sizeof S->why, "%d launches: raise soak.fault_every", x->nlaunches);
        S->failed = true;
    }
}

/* Launches, watches and relaunches until the soak ends (gracefully, on failure or when
 * interrupted). */
static void soak_launches(soak *S)
{
    chaos_ctx *x = S->x;
    const long steps = 1000000000L;  /* never reached: the soak ends on time */
    while (!S->failed && !chaos_interrupted) {
        chaos_launch *l = &x->launches[x->nlaunches];
        snprintf(S->log, sizeof S->log, "%s/launch-%d.log", S->out, x->nlaunches + 1);
        const char *env[2] = { NULL, NULL };
        if (S->arm) snprintf(x->train_bin, sizeof x->train_bin, "%s", CHAOS_TRAIN_BIN);
        else chaos_bin_path("nebula-train", x->train_bin, sizeof x->train_bin);
        chaos_bin_path("nebula-ckpt", x->ckpt_bin, sizeof x->ckpt_bin);
        if (S->arm) {
            snprintf(S->fault_env, sizeof S->fault_env, "NEBULA_CHAOS_FAULT=%s", S->arm);
            env[0] = S->fault_env;
        }
        if (chaos_start(x, x->run_dir, S->world, S->log, steps, env, l) != 0) { S->failed = true; break; }
        int me = x->nlaunches++;
        if (S->arm) { S->fs[S->armed_fault].launch = S->armed_launch = me; S->arm = NULL; }
        soak_watch(S, l, me);
        soak_launch_ended(S, l, me);
        if (S->stopping || chaos_interrupted) break;
    }
}

/* Per fault: steps redone (the struck launch's last step less the next one's resume),
 * injected and recovered; per launch: steps executed and the furthest step. */
static void soak_tally(soak *S, soak_result *r)
{
    chaos_ctx *x = S->x;
    for (int i = 0; i < x->nlaunches; i++) {
        chaos_launch *L = &x->launches[i];
        if (L->resumed_step < 0) L->resumed_step = chaos_log_resumed(L->log);
        if (L->last_step > L->resumed_step && L->resumed_step >= 0) r->executed += L->last_step - L->resumed_step;
        if (L->last_step > r->useful) r->useful = L->last_step;
        if (i > 0 && S->corrupted >= 0 && L->resumed_step == S->corrupted) r->corrupt_loaded = true;
    }
    for (int i = 0; i < S->fi; i++) {
        soak_fault *f = &S->fs[i];
        r->injected += f->injected;
        int L = f->launch;
        if (L >= 0 && L + 1 < x->nlaunches && x->launches[L + 1].resumed_step >= 0)
            f->lost = x->launches[L].last_step - x->launches[L + 1].resumed_step;
        if (f->lost < 0) f->lost = 0;
        long bound = !strcmp(f->kind, "ckpt-corrupt") ? 2 * S->ck : S->ck;  /* it falls back one commit by design */
        if (f->lost > r->worst_lost) r->worst_lost = f->lost;
        if (f->lost > bound) r->lost_over++;
        if (f->t_recover) {
            r->recovered++;
            r->worst_recover = fmax(r->worst_recover, f->t_recover - f->t);
        }
    }
}

/* The newest commit, unless it is the one this soak damaged on purpose (its relaunch
 * skipped it, and no later save has replaced it): then the commit before it. */
static long soak_final_commit(const soak *S)
{
    const char *run_dir = S->x->run_dir;
    long final = chaos_newest_commit(run_dir);
    struct stat now_marker;
    const struct stat *was = &S->corrupt_marker;
    char marker[2 * CHAOS_PATH_MAX];
    snprintf(marker, sizeof marker, "%s/ckpt/step_%08ld/COMMITTED", run_dir, final);
    if (final >= 0 && final == S->corrupted && stat(marker, &now_marker) == 0 && now_marker.st_ino == was->st_ino &&
        now_marker.st_mtim.tv_sec == was->st_mtim.tv_sec && now_marker.st_mtim.tv_nsec == was->st_mtim.tv_nsec) {
        long c = -1;
        for (long k = final - 1; k >= 0 && c < 0; k--) {
            char m[2 * CHAOS_PATH_MAX];
            snprintf(m, sizeof m, "%s/ckpt/step_%08ld/COMMITTED", run_dir, k);
            if (access(m, F_OK) == 0) c = k;
        }
        final = c;
    }
    return final;
}

/* Slopes, throughput drift, the final checkpoint's verification, and every invariant. */
static void soak_judge(soak *S, soak_result *r)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    const sample *s = S->s;
    int ns = S->ns;
    r->rss_slope = ls_slope(s, ns, 0, true);
    r->fd_slope = ls_slope(s, ns, 1, true);
    r->disk_slope = ls_slope(s, ns, 2, false);
    double *tp = malloc((size_t)(ns + 1) * sizeof *tp);
    CHECK(tp, "out of memory");
    int nt = 0;
    for (int i = 0; i < ns; i++)
        if (!isnan(s[i].steps_per_s) && s[i].steps_per_s > 0) tp[nt++] = s[i].steps_per_s;
    int third = nt / 3;
    r->first = r->lastq = NAN;
    if (third >= 2) {
        r->first = median_of(tp, third);
        r->lastq = median_of(tp + nt - third, third);
    }
    free(tp);
    r->final = soak_final_commit(S);
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, r->final);
    r->final_rc = r->final >= 0 ? chaos_run_cmd((const char *const[]){ x->ckpt_bin, "verify", path, NULL }, S->vlog)
                                : -1;
    r->drop = isnan(r->first) ? NAN : 1.0 - r->lastq / r->first;
    r->max_rss = config_float(cfg, "soak.max_rss_mb_per_h");
    r->max_fd = config_float(cfg, "soak.max_fds_per_h");
    r->max_disk = config_float(cfg, "soak.max_disk_mb_per_h");
    r->max_drop = config_float(cfg, "soak.max_throughput_drop");
    r->ok_rss = isfinite(r->rss_slope) && r->rss_slope <= r->max_rss;
    r->ok_fd = isfinite(r->fd_slope) && r->fd_slope <= r->max_fd;
    r->ok_disk = isfinite(r->disk_slope) && r->disk_slope <= r->max_disk;
    r->ok_tp = !isnan(r->drop) && r->drop <= r->max_drop;
    r->ok_ck = S->verify_fail == 0 && r->final_rc == 0 && S->verified > 0;
    r->ok_inj = r->injected == S->fi && S->fi == S->nf;
    r->ok_rec = r->recovered == S->fi && !r->corrupt_loaded;
    r->ok_lost = r->lost_over == 0;
    r->ok_end = !S->failed && !chaos_interrupted && stopped_saved(r->last);
    r->pass = r->ok_rss && r->ok_fd && r->ok_disk && r->ok_tp && r->ok_ck && r->ok_inj && r->ok_rec && r->ok_lost &&
              r->ok_end;
    r->goodput = r->wall > 0 ? r->useful / r->wall : 0;
}

/* The report as Markdown, to stdout and report.md alike. */
static void soak_write_md(const soak *S, const soak_result *r, FILE *f)
{
    const config *cfg = S->cfg;
    const chaos_ctx *x = S->x;
    const soak_fault *fs = S->fs;
    const char *P = "pass", *F = "**FAIL**";
    if (chaos_interrupted) fprintf(f, "\n### nebula-chaos soak: INTERRUPTED by %s\n\n", chaos_signame(chaos_interrupted));
    else fprintf(f, "\n### nebula-chaos soak: %s\n\n", r->pass ? "PASS" : "FAIL");
    fprintf(f, "%d ranks for %.0f s, %d of %d planned faults (%s; seed %ld), %d launches, %d samples "
               "(samples.csv). Goodput %.3f useful steps/s (%ld steps; %ld executed, %.1f%% useful).\n\n", S->world,
            r->wall, S->fi, S->nf, config_str(cfg, "soak.faults"), (long)config_int(cfg, "fault.seed"), x->nlaunches,
            S->ns, r->goodput, r->useful, r->executed, r->executed ? 100.0 * r->useful / r->executed : 0.0);
    if (S->fi) {
        fprintf(f, "| # | fault | at | step | recovered after | steps lost |\n|---:|---|---:|---:|---:|---:|\n");
        for (int i = 0; i < S->fi; i++) {
            fprintf(f, "| %d | %s: %s | %.0f s | %ld | ", i + 1, fs[i].kind, fs[i].what,
                    fs[i].t ? fs[i].t - x->t0 : fs[i].t_plan, fs[i].pre_step);
            if (fs[i].t_recover) fprintf(f, "%.2f s", fs[i].t_recover - fs[i].t); else fprintf(f, "—");
            fprintf(f, " | %ld |\n", fs[i].lost);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "| invariant | required | measured | |\n|---|---|---|---|\n");
    fprintf(f, "| every planned fault injected | all, on evidence | %d of %d struck (%d planned) | %s |\n",
            r->injected, S->fi, S->nf, r->ok_inj ? P : F);
    fprintf(f, "| every fault recovered from | all; none from a corrupt checkpoint | %d of %d (worst %.1f s)%s | %s |\n",
            r->recovered, S->fi, r->worst_recover, r->corrupt_loaded ? "; the corrupted step was loaded" : "",
            r->ok_rec ? P : F);
    fprintf(f, "| resident memory slope within a launch | <= %g MB/h | %.2f MB/h (least squares, intercept per launch) | %s |\n",
            r->max_rss, r->rss_slope, r->ok_rss ? P : F);
    fprintf(f, "| open descriptors slope within a launch | <= %g /h | %.2f /h | %s |\n", r->max_fd, r->fd_slope,
            r->ok_fd ? P : F);
    fprintf(f, "| run directory disk use slope | <= %g MB/h | %.2f MB/h | %s |\n", r->max_disk, r->disk_slope,
            r->ok_disk ? P : F);
    fprintf(f, "| throughput drift (median, last third vs first) | drop <= %.0f%% | %.2f -> %.2f steps/s (%+.1f%%) | "
               "%s |\n", 100 * r->max_drop, r->first, r->lastq, -100 * r->drop, r->ok_tp ? P : F);
    fprintf(f, "| checkpoints verified | all | %d verified, %d failed; final step %ld: %s | %s |\n", S->verified,
            S->verify_fail, r->final, r->final_rc == 0 ? "ok" : "FAILED", r->ok_ck ? P : F);
    fprintf(f, "| steps lost per fault | <= %ld (2 intervals after ckpt-corrupt) | at most %ld; %d over | %s |\n", S->ck,
            r->worst_lost, r->lost_over, r->ok_lost ? P : F);
    fprintf(f, "| graceful end (SIGTERM: checkpoint, exit 3) | exit 3 | exit %d%s%s | %s |\n", r->last->exit_code,
            S->why[0] ? ": " : "", S->why, r->ok_end ? P : F);
}

static void soak_write_json(const soak *S, const soak_result *r, const char *js_path)
{
    const chaos_ctx *x = S->x;
    const soak_fault *fs = S->fs;
    json_t *jf = json_array();
    for (int i = 0; i < S->fi; i++)
        json_array_append_new(jf, json_pack("{s:s, s:s, s:b, s:f, s:I, s:f, s:I}", "kind", fs[i].kind, "what",
                                            fs[i].what, "injected", fs[i].injected, "t_s",
                                            fs[i].t ? fs[i].t - x->t0 : -1.0, "step", (json_int_t)fs[i].pre_step,
                                            "recover_s", fs[i].t_recover ? fs[i].t_recover - fs[i].t : -1.0,
                                            "lost_steps", (json_int_t)fs[i].lost));
    json_t *j = json_pack("{s:b, s:s?, s:f, s:i, s:i, s:i, s:i, s:f, s:I, s:I}", "pass", r->pass && !chaos_interrupted,
                          "interrupted", chaos_interrupted ? chaos_signame(chaos_interrupted) : NULL, "seconds",
                          r->wall, "faults", S->fi, "faults_planned", S->nf, "launches", x->nlaunches, "samples", S->ns,
                          "goodput_steps_per_s", r->goodput, "useful_steps", (json_int_t)r->useful, "executed_steps",
                          (json_int_t)r->executed);
    json_object_set(j, "provenance", S->prov);
    json_object_set_new(j, "fault_list", jf);
    json_object_set_new(j, "injected", json_integer(r->injected));
    json_object_set_new(j, "recovered", json_integer(r->recovered));
    json_object_set_new(j, "rss_mb_per_h", json_real(isfinite(r->rss_slope) ? r->rss_slope : -1.0));
    json_object_set_new(j, "fds_per_h", json_real(isfinite(r->fd_slope) ? r->fd_slope : -1.0));
    json_object_set_new(j, "disk_mb_per_h", json_real(isfinite(r->disk_slope) ? r->disk_slope : -1.0));
    json_object_set_new(j, "throughput_drop", json_real(isnan(r->drop) ? -1.0 : r->drop));
    json_object_set_new(j, "checkpoints_verified", json_integer(S->verified));
    json_object_set_new(j, "checkpoints_failed", json_integer(S->verify_fail));
    json_object_set_new(j, "final_step", json_integer(r->final));
    json_object_set_new(j, "worst_lost_steps", json_integer(r->worst_lost));
    json_object_set_new(j, "last_exit", json_integer(r->last->exit_code));
    char *text = json_dumps(j, JSON_INDENT(2));
    chaos_write_report(js_path, text);
    free(text);
    json_decref(j);
}

int chaos_soak(const config *cfg, const char *out, json_t *prov)
{
    soak S = { 0 };
    soak_setup(&S, cfg, out, prov);
    soak_launches(&S);
    chaos_ctx *x = S.x;
    if (!S.csv && !S.csv_tried) S.csv = csv_open(S.csv_path, prov, S.s, S.ns);  /* some rank's host never showed */
    if (S.csv) fclose(S.csv);
    soak_result r = { 0 };
    r.wall = chaos_now() - x->t0;
    r.last = &x->launches[x->nlaunches ? x->nlaunches - 1 : 0];
    if (chaos_interrupted) snprintf(S.why, sizeof S.why, "interrupted by %s", chaos_signame(chaos_interrupted));
    soak_tally(&S, &r);
    soak_judge(&S, &r);

    char md_path[2 * CHAOS_PATH_MAX], js_path[2 * CHAOS_PATH_MAX];
    snprintf(md_path, sizeof md_path, "%s/report.md", out);
    snprintf(js_path, sizeof js_path, "%s/report.json", out);
    char *text = NULL;
    size_t len = 0;
    FILE *md = open_memstream(&text, &len);
    if (md) {
        soak_write_md(&S, &r, md);
        if (fclose(md) != 0) {
            free(text);
            text = NULL;
        }
    }
    if (text) fputs(text, stdout);
    else soak_write_md(&S, &r, stdout);
    chaos_write_report(md_path, text);
    free(text);
    soak_write_json(&S, &r, js_path);
    printf("\nreport: %s, %s and %s\n", md_path, js_path, S.csv_path);
    free(S.s);
    free(S.fs);
    free(x);
    return r.pass ? 0 : 1;
}
