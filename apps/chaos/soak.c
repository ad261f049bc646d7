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
 * with the samples taken before; NULL, with a warning, when it cannot be written. */
static FILE *csv_open(const char *path, const json_t *prov, const sample *s, int ns)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        log_warn("soak: cannot write %s: %s; the report still has the figures", path, log_errno_str());
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

int chaos_soak(const config *cfg, const char *out, json_t *prov)
{
    double duration = chaos_duration(config_str(cfg, "soak.duration"));
    double every = chaos_duration(config_str(cfg, "soak.fault_every"));
    double sample_every = chaos_duration(config_str(cfg, "soak.sample_every"));
    chaos_ctx *x = calloc(1, sizeof *x);
    soak_fault *fs = calloc(SOAK_MAX_FAULTS, sizeof *fs);
    CHECK(x && fs, "out of memory");
    x->cfg = cfg;
    x->t0 = chaos_now();
    snprintf(x->name, sizeof x->name, "soak");
    snprintf(x->out, sizeof x->out, "%s", out);
    snprintf(x->run_dir, sizeof x->run_dir, "%s/run", out);
    int world = (int)config_int(cfg, "scenario.ranks");
    long ck = config_int(cfg, "scenario.ckpt_every");
    double hb_timeout = config_float(cfg, "scenario.heartbeat_timeout");
    double start_timeout = config_float(cfg, "soak.start_timeout");
    const long steps = 1000000000L;  /* never reached: the soak ends on time */
    char kinds[CONFIG_STR_MAX + 1], fault_env[CONFIG_STR_MAX + 64];
    snprintf(kinds, sizeof kinds, "%s", config_str(cfg, "soak.faults"));
    int nf = plan(cfg, duration, every, kinds, fs), fi = 0;
    uint64_t seed = (uint64_t)config_int(cfg, "fault.seed") * 104729u + 1;
    size_t cap = (size_t)(duration / sample_every) + 64;
    sample *s = calloc(cap, sizeof *s);
    CHECK(s, "out of memory for the samples");
    int ns = 0, verify_fail = 0, verified = 0;
    long last_verified = -1, corrupted = -1;
    struct stat corrupt_marker = { 0 };  /* the damaged step's COMMITTED: a later save replaces it */
    printf("soak: %d ranks, %g s, %d faults planned (%s, seed %ld, one per %g s), a sample every %g s\n", world,
           duration, nf, config_str(cfg, "soak.faults"), (long)config_int(cfg, "fault.seed"), every, sample_every);
    fflush(stdout);

    char log[2 * CHAOS_PATH_MAX], csv_path[2 * CHAOS_PATH_MAX], vlog[2 * CHAOS_PATH_MAX], slog[2 * CHAOS_PATH_MAX];
    snprintf(csv_path, sizeof csv_path, "%s/samples.csv", out);
    snprintf(vlog, sizeof vlog, "%s/verify.log", out);
    snprintf(slog, sizeof slog, "%s/supervisor.log", out);
    FILE *csv = NULL;
    bool csv_tried = false;
    int hosts_seen = 0;  /* ranks whose host the provenance names; the others are "unknown" */
    double t_sample = x->t0, t_hb = 0, loss_until = 0;
    bool stopping = false, failed = false;
    const char *arm = NULL;  /* the next launch runs the CHAOS build with this fault armed */
    int armed_fault = -1, armed_launch = -1, no_progress = 0;
    char why[256] = "";
    static chaos_rank ranks[1024];
    while (!failed && !chaos_interrupted) {
        chaos_launch *l = &x->launches[x->nlaunches];
        snprintf(log, sizeof log, "%s/launch-%d.log", out, x->nlaunches + 1);
        const char *env[2] = { NULL, NULL };
        if (arm) snprintf(x->train_bin, sizeof x->train_bin, "%s", CHAOS_TRAIN_BIN);
        else chaos_bin_path("nebula-train", x->train_bin, sizeof x->train_bin);
        chaos_bin_path("nebula-ckpt", x->ckpt_bin, sizeof x->ckpt_bin);
        if (arm) {
            snprintf(fault_env, sizeof fault_env, "NEBULA_CHAOS_FAULT=%s", arm);
            env[0] = fault_env;
        }
        if (chaos_start(x, x->run_dir, world, log, steps, env, l) != 0) { failed = true; break; }
        int me = x->nlaunches++;
        if (arm) { fs[armed_fault].launch = armed_launch = me; arm = NULL; }
        t_hb = l->t_start;
        long prev_step = -1;
        double prev_t = 0, t_prev_loop = chaos_now();
        for (;;) {
            double now = chaos_now();
            /* time the supervisor itself spent elsewhere (a remote step, a verify) is not
             * time the ranks failed to make progress */
            if (now - t_prev_loop > 1.0) t_hb += now - t_prev_loop;
            t_prev_loop = now;
            if (chaos_interrupted) {
                chaos_stop(l, x->run_dir, chaos_interrupted, CHAOS_STOP_GRACE);
                break;
            }
            long step = chaos_heartbeat(x->run_dir, NULL);
            if (l->resumed_step < 0) l->resumed_step = chaos_log_resumed(l->log);
            if (step > l->last_step) { l->last_step = step; t_hb = now; }
            for (int i = 0; i < fi; i++)  /* recovered: a later step than the fault found */
                if (fs[i].t && !fs[i].t_recover && step > fs[i].pre_step &&
                    (me > fs[i].launch || !strcmp(fs[i].kind, "packet-loss")))
                    fs[i].t_recover = now;
            if (loss_until > 0 && now >= loss_until) {
                chaos_run_cmd((const char *const[]){ "tools/netns-cluster", "loss", "none", NULL }, slog);
                loss_until = 0;
            }
            if (chaos_poll(l)) break;
            if (!stopping && chaos_rank_died(l, x->run_dir)) {
                chaos_kill_ranks(x->run_dir, slog);
                chaos_stop(l, x->run_dir, SIGTERM, 2);
                break;
            }
            /* this launch has trained a step: its ranks are registered and past start-up (the
             * heartbeat may still be the last launch's) */
            bool trained = l->resumed_step >= 0 && step > l->resumed_step;
            /* start-up (a step of the job waiting for the last one's resources, MPI wire-up,
             * the resume) gets soak.start_timeout; then no step for heartbeat_timeout is a hang */
            if (now - t_hb > (trained ? hb_timeout : fmax(hb_timeout, start_timeout))) {
                log_warn("soak: no progress for %.1f s%s: stopping the hung launch", now - t_hb,
                         trained ? "" : " since it started");
                l->hung = true;
                chaos_kill_ranks(x->run_dir, slog);
                chaos_stop(l, x->run_dir, SIGTERM, 2);
                break;
            }
            /* every fault that struck has been recovered from (a fault late in the soak is
             * followed through, within the overrun allowance) */
            bool settled = armed_fault < 0;
            for (int i = 0; i < fi; i++) settled &= fs[i].t_recover > 0 || !fs[i].t;
            if (!stopping && now - x->t0 >= duration && trained &&
                (settled || now - x->t0 > duration + 2 * fmax(hb_timeout, start_timeout))) {
                /* the end: a graceful stop, as a scheduler's time limit would ask for (once
                 * the launch trains: a rank that has not registered cannot be told) */
                char what[160];
                strike(x, world, true, SIGTERM, &seed, what, sizeof what);
                stopping = true;
            }
            if (now >= t_sample && ns < (int)cap && step >= 0) {
                sample *p = &s[ns];
                memset(p, 0, sizeof *p);
                p->t = now - x->t0;
                p->launch = x->nlaunches;
                p->step = step;
                if (trained) {
                    int seen = chaos_ranks(x->run_dir, ranks, 1024);
                    p->full = chaos_usage(ranks, world, &p->rss_mb, &p->fds, slog) == world;
                    if (seen > hosts_seen && hosts_seen < world) {
                        provenance_set_hosts(prov, ranks[0].host, world < 1024 ? world : 1024, sizeof ranks[0]);
                        hosts_seen = seen;
                    }
                }
                p->disk_mb = disk_mb(x->run_dir);
                p->trained = trained;
                p->steps_per_s = prev_step >= 0 && now > prev_t ? (step - prev_step) / (now - prev_t) : NAN;
                prev_step = step;
                prev_t = now;
                ns++;
                if (csv) {
                    csv_row(csv, p);
                    fflush(csv);  /* a 72-hour soak is watched with tail -f */
                } else if (!csv_tried && hosts_seen >= world) {
                    csv = csv_open(csv_path, prov, s, ns);
                    csv_tried = true;
                }
                t_sample += sample_every;
                if (t_sample < now) t_sample = now + sample_every;  /* after a stall: no burst */
                long c = chaos_newest_commit(x->run_dir);
                if (c > last_verified) {
                    char path[2 * CHAOS_PATH_MAX];
                    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, c);
                    int rc = chaos_run_cmd((const char *const[]){ x->ckpt_bin, "verify", path, NULL }, vlog);
                    /* a newer save may have pruned it meanwhile: only a checkpoint still there
                     * counts; 126 and up is the verifier not running (a rebuild), not a verdict */
                    if (rc >= 126 || rc < 0) {
                        log_warn("soak: nebula-ckpt verify could not run (exit %d); %s is checked later", rc, path);
                    } else {
                        if (rc != 0 && access(path, F_OK) == 0) {
                            verify_fail++;
                            log_error("soak: %s does not verify (see %s)", path, vlog);
                        }
                        verified++;
                        last_verified = c;
                    }
                }
            }
            /* the armed launch: its "chaos: injected" line is the fault */
            if (armed_fault >= 0 && armed_launch == me && !fs[armed_fault].t) {
                long at = chaos_log_step(l->log, "chaos: injected ", "(step ", NULL);  /* the save it struck */
                if (at >= 0) mark_struck(&fs[armed_fault], at, now);
            }
            if (!stopping && fi < nf && now - x->t0 >= fs[fi].t_plan && trained && armed_fault < 0) {
                soak_fault *f = &fs[fi];
                const char *k = f->kind;
                f->launch = me;
                f->pre_step = step;
                f->t = now;
                if (!strcmp(k, "kill") || !strcmp(k, "stop"))
                    f->injected = strike(x, world, false, !strcmp(k, "kill") ? SIGKILL : SIGSTOP, &seed, f->what,
                                         sizeof f->what);
                else if (!strcmp(k, "preempt"))
                    f->injected = strike(x, world, true, SIGTERM, &seed, f->what, sizeof f->what);
                else if (!strcmp(k, "ckpt-corrupt")) {
                    /* the job dies; the newest commit is damaged before the relaunch */
                    strike(x, world, true, SIGKILL, &seed, f->what, sizeof f->what);
                    corrupted = -2;  /* pending */
                } else if (!strcmp(k, "packet-loss")) {
                    char pct[32];
                    snprintf(pct, sizeof pct, "%g", config_float(cfg, "fault.loss_pct"));
                    f->injected = chaos_run_cmd((const char *const[]){ "tools/netns-cluster", "loss", pct, NULL },
                                                slog) == 0;
                    snprintf(f->what, sizeof f->what, "%s%% packet loss for %g s", pct,
                             config_float(cfg, "fault.loss_seconds"));
                    loss_until = now + config_float(cfg, "fault.loss_seconds");
                } else {
                    /* io-error, disk-full: a graceful stop, and the relaunch runs the CHAOS
                     * build whose next save fails (fault.io, or ENOSPC at the data write):
                     * the fault counts when that launch logs it */
                    char what[64];
                    const char *rule = !strcmp(k, "io-error") ? config_str(cfg, "fault.io") : "ckpt.write:ENOSPC";
                    if (strike(x, world, true, SIGTERM, &seed, what, sizeof what)) {
                        arm = rule;
                        armed_fault = fi;
                        f->t = 0;
                    }
                    snprintf(f->what, sizeof f->what, "%.60s %s after %s", rule, arm ? "armed" : "NOT armed", what);
                }
                printf("  %.0f s: fault %d (%s) at step %ld: %s\n", now - x->t0, fi + 1, k, step, f->what);
                fflush(stdout);
                fi++;
            }
            usleep(50000);
        }
        if (armed_fault >= 0 && armed_launch == me) {
            soak_fault *f = &fs[armed_fault];
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
            armed_fault = armed_launch = -1;
        }
        if (corrupted == -2) {
            corrupted = chaos_corrupt_newest(x->run_dir, config_int(cfg, "fault.corrupt_bytes"));
            char m[2 * CHAOS_PATH_MAX];
            snprintf(m, sizeof m, "%s/ckpt/step_%08ld/COMMITTED", x->run_dir, corrupted);
            if (corrupted >= 0) stat(m, &corrupt_marker);
            /* damaged on purpose: the relaunch must skip it (checked below), the verifier
             * need not say so */
            if (corrupted > last_verified) last_verified = corrupted;
            soak_fault *f = &fs[fi - 1];
            f->injected = corrupted >= 0 && strstr(f->what, " 0 of ") == NULL;
            snprintf(f->what + strlen(f->what), sizeof f->what - strlen(f->what), "; step %ld corrupted", corrupted);
        }
        if (stopping || chaos_interrupted) break;
        if (now_s(x) > duration + 2 * fmax(hb_timeout, start_timeout)) {
            snprintf(why, sizeof why, "the duration passed and launch %d ended before its graceful stop", x->nlaunches);
            failed = true;
        }
        if (l->exit_code == 2) {
            snprintf(why, sizeof why, "launch %d exited 2 (usage or input error): see %s", x->nlaunches, l->log);
            failed = true;
        }
        /* a launch that never trained is no fault's doing: three in a row end the soak */
        no_progress = l->last_step <= l->resumed_step ? no_progress + 1 : 0;
        if (no_progress == 3) {
            snprintf(why, sizeof why, "3 launches in a row made no step: see %s", l->log);
            failed = true;
        }
        if (x->nlaunches == CHAOS_MAX_LAUNCHES) {
            snprintf(why, sizeof why, "%d launches: raise soak.fault_every", x->nlaunches);
            failed = true;
        }
    }
    if (!csv && !csv_tried) csv = csv_open(csv_path, prov, s, ns);  /* some rank's host never showed */
    if (csv) fclose(csv);
    double wall = chaos_now() - x->t0;
    chaos_launch *last = &x->launches[x->nlaunches ? x->nlaunches - 1 : 0];
    if (chaos_interrupted) snprintf(why, sizeof why, "interrupted by %s", chaos_signame(chaos_interrupted));

    /* per fault: steps redone (the struck launch's last step less the next one's resume) */
    long worst_lost = 0, executed = 0, useful = 0;
    int lost_over = 0;
    bool corrupt_loaded = false;
    for (int i = 0; i < x->nlaunches; i++) {
        chaos_launch *L = &x->launches[i];
        if (L->resumed_step < 0) L->resumed_step = chaos_log_resumed(L->log);
        if (L->last_step > L->resumed_step && L->resumed_step >= 0) executed += L->last_step - L->resumed_step;
        if (L->last_step > useful) useful = L->last_step;
        if (i > 0 && corrupted >= 0 && L->resumed_step == corrupted) corrupt_loaded = true;
    }
    int injected = 0, recovered = 0;
    double worst_recover = 0;
    for (int i = 0; i < fi; i++) {
        soak_fault *f = &fs[i];
        injected += f->injected;
        int L = f->launch;
        if (L >= 0 && L + 1 < x->nlaunches && x->launches[L + 1].resumed_step >= 0)
            f->lost = x->launches[L].last_step - x->launches[L + 1].resumed_step;
        if (f->lost < 0) f->lost = 0;
        long bound = !strcmp(f->kind, "ckpt-corrupt") ? 2 * ck : ck;  /* it falls back one commit by design */
        if (f->lost > worst_lost) worst_lost = f->lost;
        if (f->lost > bound) lost_over++;
        if (f->t_recover) {
            recovered++;
            worst_recover = fmax(worst_recover, f->t_recover - f->t);
        }
    }

    /* slopes */
    double rss_slope = ls_slope(s, ns, 0, true), fd_slope = ls_slope(s, ns, 1, true);
    double disk_slope = ls_slope(s, ns, 2, false);
    double *tp = malloc((size_t)(ns + 1) * sizeof *tp);
    CHECK(tp, "out of memory");
    int nt = 0;
    for (int i = 0; i < ns; i++)
        if (!isnan(s[i].steps_per_s) && s[i].steps_per_s > 0) tp[nt++] = s[i].steps_per_s;
    int third = nt / 3;
    double first = NAN, lastq = NAN;
    if (third >= 2) {
        first = median_of(tp, third);
        lastq = median_of(tp + nt - third, third);
    }
    free(tp);
    /* the newest commit, unless it is the one this soak damaged on purpose (its relaunch
     * skipped it, and no later save has replaced it) */
    long final = chaos_newest_commit(x->run_dir);
    struct stat now_marker;
    char marker[2 * CHAOS_PATH_MAX];
    snprintf(marker, sizeof marker, "%s/ckpt/step_%08ld/COMMITTED", x->run_dir, final);
    if (final >= 0 && final == corrupted && stat(marker, &now_marker) == 0 &&
        now_marker.st_ino == corrupt_marker.st_ino && now_marker.st_mtim.tv_sec == corrupt_marker.st_mtim.tv_sec &&
        now_marker.st_mtim.tv_nsec == corrupt_marker.st_mtim.tv_nsec) {
        long c = -1;
        for (long k = final - 1; k >= 0 && c < 0; k--) {
            char m[2 * CHAOS_PATH_MAX];
            snprintf(m, sizeof m, "%s/ckpt/step_%08ld/COMMITTED", x->run_dir, k);
            if (access(m, F_OK) == 0) c = k;
        }
        final = c;
    }
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, final);
    int final_rc = final >= 0 ? chaos_run_cmd((const char *const[]){ x->ckpt_bin, "verify", path, NULL },
                                              vlog) : -1;
    double drop = isnan(first) ? NAN : 1.0 - lastq / first;
    double max_rss = config_float(cfg, "soak.max_rss_mb_per_h"), max_fd = config_float(cfg, "soak.max_fds_per_h");
    double max_disk = config_float(cfg, "soak.max_disk_mb_per_h"), max_drop = config_float(cfg, "soak.max_throughput_drop");
    bool ok_rss = isfinite(rss_slope) && rss_slope <= max_rss, ok_fd = isfinite(fd_slope) && fd_slope <= max_fd;
    bool ok_disk = isfinite(disk_slope) && disk_slope <= max_disk;
    bool ok_tp = !isnan(drop) && drop <= max_drop, ok_ck = verify_fail == 0 && final_rc == 0 && verified > 0;
    bool ok_inj = injected == fi && fi == nf, ok_rec = recovered == fi && !corrupt_loaded;
    bool ok_lost = lost_over == 0, ok_end = !failed && !chaos_interrupted && stopped_saved(last);
    bool pass = ok_rss && ok_fd && ok_disk && ok_tp && ok_ck && ok_inj && ok_rec && ok_lost && ok_end;
    double goodput = wall > 0 ? useful / wall : 0;

    char md_path[2 * CHAOS_PATH_MAX], js_path[2 * CHAOS_PATH_MAX];
    snprintf(md_path, sizeof md_path, "%s/report.md", out);
    snprintf(js_path, sizeof js_path, "%s/report.json", out);
    FILE *md = fopen(md_path, "w");
    const char *P = "pass", *F = "**FAIL**";
    for (int k = 0; k < 2; k++) {
        FILE *f = k == 0 ? stdout : md;
        if (!f) continue;
        if (chaos_interrupted) fprintf(f, "\n### nebula-chaos soak: INTERRUPTED by %s\n\n", chaos_signame(chaos_interrupted));
        else fprintf(f, "\n### nebula-chaos soak: %s\n\n", pass ? "PASS" : "FAIL");
        fprintf(f, "%d ranks for %.0f s, %d of %d planned faults (%s; seed %ld), %d launches, %d samples "
                   "(samples.csv). Goodput %.3f useful steps/s (%ld steps; %ld executed, %.1f%% useful).\n\n", world,
                wall, fi, nf, config_str(cfg, "soak.faults"), (long)config_int(cfg, "fault.seed"), x->nlaunches, ns,
                goodput, useful, executed, executed ? 100.0 * useful / executed : 0.0);
        if (fi) {
            fprintf(f, "| # | fault | at | step | recovered after | steps lost |\n|---:|---|---:|---:|---:|---:|\n");
            for (int i = 0; i < fi; i++) {
                fprintf(f, "| %d | %s: %s | %.0f s | %ld | ", i + 1, fs[i].kind, fs[i].what,
                        fs[i].t ? fs[i].t - x->t0 : fs[i].t_plan, fs[i].pre_step);
                if (fs[i].t_recover) fprintf(f, "%.2f s", fs[i].t_recover - fs[i].t); else fprintf(f, "—");
                fprintf(f, " | %ld |\n", fs[i].lost);
            }
            fprintf(f, "\n");
        }
        fprintf(f, "| invariant | required | measured | |\n|---|---|---|---|\n");
        fprintf(f, "| every planned fault injected | all, on evidence | %d of %d struck (%d planned) | %s |\n",
                injected, fi, nf, ok_inj ? P : F);
        fprintf(f, "| every fault recovered from | all; none from a corrupt checkpoint | %d of %d (worst %.1f s)%s | %s |\n",
                recovered, fi, worst_recover, corrupt_loaded ? "; the corrupted step was loaded" : "", ok_rec ? P : F);
        fprintf(f, "| resident memory slope within a launch | <= %g MB/h | %.2f MB/h (least squares, intercept per launch) | %s |\n",
                max_rss, rss_slope, ok_rss ? P : F);
        fprintf(f, "| open descriptors slope within a launch | <= %g /h | %.2f /h | %s |\n", max_fd, fd_slope,
                ok_fd ? P : F);
        fprintf(f, "| run directory disk use slope | <= %g MB/h | %.2f MB/h | %s |\n", max_disk, disk_slope,
                ok_disk ? P : F);
        fprintf(f, "| throughput drift (median, last third vs first) | drop <= %.0f%% | %.2f -> %.2f steps/s (%+.1f%%) | "
                   "%s |\n", 100 * max_drop, first, lastq, -100 * drop, ok_tp ? P : F);
        fprintf(f, "| checkpoints verified | all | %d verified, %d failed; final step %ld: %s | %s |\n", verified,
                verify_fail, final, final_rc == 0 ? "ok" : "FAILED", ok_ck ? P : F);
        fprintf(f, "| steps lost per fault | <= %ld (2 intervals after ckpt-corrupt) | at most %ld; %d over | %s |\n", ck,
                worst_lost, lost_over, ok_lost ? P : F);
        fprintf(f, "| graceful end (SIGTERM: checkpoint, exit 3) | exit 3 | exit %d%s%s | %s |\n", last->exit_code,
                why[0] ? ": " : "", why, ok_end ? P : F);
    }
    if (md) fclose(md);
    json_t *jf = json_array();
    for (int i = 0; i < fi; i++)
        json_array_append_new(jf, json_pack("{s:s, s:s, s:b, s:f, s:I, s:f, s:I}", "kind", fs[i].kind, "what",
                                            fs[i].what, "injected", fs[i].injected, "t_s",
                                            fs[i].t ? fs[i].t - x->t0 : -1.0, "step", (json_int_t)fs[i].pre_step,
                                            "recover_s", fs[i].t_recover ? fs[i].t_recover - fs[i].t : -1.0,
                                            "lost_steps", (json_int_t)fs[i].lost));
    json_t *j = json_pack("{s:b, s:s?, s:f, s:i, s:i, s:i, s:i, s:f, s:I, s:I}", "pass", pass && !chaos_interrupted,
                          "interrupted", chaos_interrupted ? chaos_signame(chaos_interrupted) : NULL, "seconds", wall,
                          "faults", fi, "faults_planned", nf, "launches", x->nlaunches, "samples", ns,
                          "goodput_steps_per_s", goodput, "useful_steps", (json_int_t)useful, "executed_steps",
                          (json_int_t)executed);
    json_object_set(j, "provenance", prov);
    json_object_set_new(j, "fault_list", jf);
    json_object_set_new(j, "injected", json_integer(injected));
    json_object_set_new(j, "recovered", json_integer(recovered));
    json_object_set_new(j, "rss_mb_per_h", json_real(isfinite(rss_slope) ? rss_slope : -1.0));
    json_object_set_new(j, "fds_per_h", json_real(isfinite(fd_slope) ? fd_slope : -1.0));
    json_object_set_new(j, "disk_mb_per_h", json_real(isfinite(disk_slope) ? disk_slope : -1.0));
    json_object_set_new(j, "throughput_drop", json_real(isnan(drop) ? -1.0 : drop));
    json_object_set_new(j, "checkpoints_verified", json_integer(verified));
    json_object_set_new(j, "checkpoints_failed", json_integer(verify_fail));
    json_object_set_new(j, "final_step", json_integer(final));
    json_object_set_new(j, "worst_lost_steps", json_integer(worst_lost));
    json_object_set_new(j, "last_exit", json_integer(last->exit_code));
    json_dump_file(j, js_path, JSON_INDENT(2));
    json_decref(j);
    printf("\nreport: %s, %s and %s\n", md_path, js_path, csv_path);
    free(s);
    free(fs);
    free(x);
    return pass ? 0 : 1;
}
