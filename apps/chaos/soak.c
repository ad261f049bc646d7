/* soak — a long training with a fault at a fixed period, sampled at another: resident
 * memory and open descriptors of the ranks, steps per second, and the integrity of every
 * new checkpoint. Fails when memory or descriptors grow faster than the stated slopes
 * within one launch, when throughput drifts down by more than the stated fraction, when
 * a checkpoint does not verify, or when a relaunch loses more than a checkpoint interval.
 *
 * Slopes are Theil-Sen estimates (the median of the pairwise slopes): a checkpoint that
 * holds a few descriptors open while one sample is taken, or a page-cache blip, does not
 * move the median, while a steady leak does. Each launch is its own segment (a relaunch
 * starts fresh processes), its first samples left out as warm-up. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"
#include "base/log.h"

typedef struct sample {
    double t;                  /* seconds since the soak started */
    int launch;
    long step;
    double rss_mb;             /* sum over the ranks on this host */
    int fds;                   /* sum over the ranks */
    double steps_per_s;        /* since the previous sample of the same launch; NAN if none */
    bool full;                 /* every rank was found: sums over fewer ranks are not comparable */
} sample;

/* "72h", "90m", "45s", "2d" or plain seconds; -1 when malformed. */
static double parse_duration(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    if (!*end || !strcmp(end, "s")) return v;
    if (!strcmp(end, "m")) return v * 60;
    if (!strcmp(end, "h")) return v * 3600;
    if (!strcmp(end, "d")) return v * 86400;
    return -1;
}

static void proc_usage(pid_t pid, double *rss_mb, int *fds)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            long kb;
            if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) *rss_mb += kb / 1024.0;
        }
        fclose(f);
    }
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') (*fds)++;
        closedir(d);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Theil-Sen slope of y over t (per hour) for samples [a, b); NAN with fewer than 4. */
static double theil_sen(const sample *s, int a, int b, bool fds)
{
    if (b - a < 4) return NAN;
    int stride = (b - a) / 600 + 1;  /* at most ~180k pairs */
    size_t n = 0, cap = (size_t)((b - a) / stride + 1) * (size_t)((b - a) / stride + 1) / 2 + 1;
    double *v = malloc(cap * sizeof *v);
    CHECK(v, "out of memory for the slope");
    for (int i = a; i < b; i += stride)
        for (int j = i + stride; j < b; j += stride) {
            double dt = s[j].t - s[i].t;
            if (dt <= 0 || n == cap) continue;
            double dy = fds ? (double)(s[j].fds - s[i].fds) : s[j].rss_mb - s[i].rss_mb;
            v[n++] = dy / dt * 3600.0;
        }
    qsort(v, n, sizeof *v, cmp_double);
    double m = n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : NAN;
    free(v);
    return m;
}

static double median_of(double *v, int n)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The newest committed step of run_dir, -1 if none. */
static long newest_commit(const char *run_dir)
{
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt", run_dir);
    DIR *d = opendir(path);
    long best = -1;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s;
        char marker[3 * CHAOS_PATH_MAX];
        if (sscanf(e->d_name, "step_%ld", &s) != 1 || s <= best) continue;
        snprintf(marker, sizeof marker, "%s/%s/COMMITTED", path, e->d_name);
        if (access(marker, F_OK) == 0) best = s;
    }
    closedir(d);
    return best;
}

int chaos_soak(const config *cfg, const char *out)
{
    double duration = parse_duration(config_str(cfg, "soak.duration"));
    double every = parse_duration(config_str(cfg, "soak.fault_every"));
    double sample_every = parse_duration(config_str(cfg, "soak.sample_every"));
    if (duration <= 0 || every <= 0 || sample_every <= 0) {
        log_error("soak.duration, soak.fault_every and soak.sample_every take a number with s, m, h or d "
                  "(for example 72h, 2h, 60s); got '%s', '%s', '%s'", config_str(cfg, "soak.duration"),
                  config_str(cfg, "soak.fault_every"), config_str(cfg, "soak.sample_every"));
        return 2;
    }
    chaos_ctx *x = calloc(1, sizeof *x);
    CHECK(x, "out of memory");
    x->cfg = cfg;
    x->t0 = chaos_now();
    snprintf(x->name, sizeof x->name, "soak");
    snprintf(x->out, sizeof x->out, "%s", out);
    snprintf(x->run_dir, sizeof x->run_dir, "%s/run", out);
    snprintf(x->train_bin, sizeof x->train_bin, "build/bin/nebula-train");
    int world = (int)config_int(cfg, "scenario.ranks");
    long ck = config_int(cfg, "scenario.ckpt_every");
    double hb_timeout = config_float(cfg, "scenario.heartbeat_timeout");
    const long steps = 1000000000L;  /* never reached: the soak ends on time */
    char faults[CONFIG_STR_MAX + 1];
    snprintf(faults, sizeof faults, "%s", config_str(cfg, "soak.faults"));
    const char *kinds[16];
    int nkinds = 0;
    for (char *t = strtok(faults, ", "); t && nkinds < 16; t = strtok(NULL, ", ")) {
        if (strcmp(t, "kill") && strcmp(t, "preempt")) {
            log_error("soak.faults: '%s' is not a soak fault; valid: kill, preempt (comma-separated, in turn)", t);
            free(x);
            return 2;
        }
        kinds[nkinds++] = t;
    }
    size_t cap = (size_t)(duration / sample_every) + 64;
    sample *s = calloc(cap, sizeof *s);
    CHECK(s, "out of memory for the samples");
    int ns = 0, nfault = 0, verify_fail = 0, verified = 0;
    long last_verified = -1, worst_lost = 0;
    printf("soak: %d ranks, %g s, a fault every %g s (%s), a sample every %g s\n", world, duration, every,
           config_str(cfg, "soak.faults"), sample_every);
    fflush(stdout);

    char log[2 * CHAOS_PATH_MAX], csv_path[2 * CHAOS_PATH_MAX], vlog[2 * CHAOS_PATH_MAX];
    snprintf(csv_path, sizeof csv_path, "%s/samples.csv", out);
    snprintf(vlog, sizeof vlog, "%s/verify.log", out);
    FILE *csv = fopen(csv_path, "w");
    if (csv) fprintf(csv, "t_s,launch,step,rss_mb,fds,steps_per_s\n");
    double t_fault = x->t0 + every, t_sample = x->t0, t_hb = 0;
    bool stopping = false, failed = false;
    char why[256] = "";
    while (!failed) {
        chaos_launch *l = &x->launches[x->nlaunches];
        snprintf(log, sizeof log, "%s/launch-%d.log", out, x->nlaunches + 1);
        if (chaos_start(x, x->run_dir, world, log, steps, NULL, l) != 0) { failed = true; break; }
        x->nlaunches++;
        t_hb = l->t_start;
        long prev_step = -1;
        double prev_t = 0;
        for (;;) {
            double now = chaos_now();
            long step = chaos_heartbeat(x->run_dir, NULL);
            if (l->resumed_step < 0) l->resumed_step = chaos_log_resumed(l->log);
            if (step > l->last_step) { l->last_step = step; t_hb = now; }
            if (chaos_poll(l)) break;
            if (!stopping && chaos_rank_died(l, x->run_dir)) {
                chaos_stop(l, x->run_dir, 2);
                break;
            }
            if (now - t_hb > hb_timeout) {
                log_warn("soak: no progress for %.1f s: stopping the hung launch", now - t_hb);
                l->hung = true;
                chaos_stop(l, x->run_dir, 2);
                break;
            }
            if (!stopping && now - x->t0 >= duration) {
                /* the end: a graceful stop, as a scheduler's time limit would ask for */
                pid_t pids[1024];
                chaos_rank_pids(x->run_dir, pids, 1024);
                for (int r = 0; r < 1024; r++)
                    if (pids[r]) kill(pids[r], SIGTERM);
                stopping = true;
            }
            if (now >= t_sample && ns < (int)cap && step >= 0) {
                pid_t pids[1024];
                int found = chaos_rank_pids(x->run_dir, pids, 1024);
                sample *p = &s[ns];
                memset(p, 0, sizeof *p);
                p->t = now - x->t0;
                p->launch = x->nlaunches;
                p->step = step;
                for (int r = 0; r < 1024 && found; r++)
                    if (pids[r]) proc_usage(pids[r], &p->rss_mb, &p->fds);
                p->full = found == world;
                p->steps_per_s = prev_step >= 0 && now > prev_t ? (step - prev_step) / (now - prev_t) : NAN;
                prev_step = step;
                prev_t = now;
                if (csv) fprintf(csv, "%.3f,%d,%ld,%.2f,%d,%.3f\n", p->t, p->launch, p->step, p->rss_mb, p->fds,
                                 p->steps_per_s);
                ns++;
                t_sample += sample_every;
                long c = newest_commit(x->run_dir);
                if (c > last_verified) {
                    char path[2 * CHAOS_PATH_MAX];
                    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, c);
                    int rc = chaos_run_cmd((const char *const[]){ "build/bin/nebula-ckpt", "verify", path, NULL }, vlog);
                    /* a newer save may have pruned it meanwhile: only a checkpoint still there counts */
                    if (rc != 0 && access(path, F_OK) == 0) {
                        verify_fail++;
                        log_error("soak: %s does not verify (see %s)", path, vlog);
                    }
                    verified++;
                    last_verified = c;
                }
            }
            if (!stopping && now >= t_fault && step > 0) {
                const char *k = kinds[nfault % nkinds];
                pid_t pids[1024];
                chaos_rank_pids(x->run_dir, pids, 1024);
                if (!strcmp(k, "kill")) {
                    int r = (int)((unsigned)nfault * 2654435761u % (unsigned)world);
                    if (pids[r]) kill(pids[r], SIGKILL);
                    printf("  %.0f s: fault %d: SIGKILL rank %d at step %ld\n", now - x->t0, nfault + 1, r, step);
                } else {
                    for (int r = 0; r < 1024; r++)
                        if (pids[r]) kill(pids[r], SIGTERM);
                    printf("  %.0f s: fault %d: SIGTERM (preemption) to every rank at step %ld\n", now - x->t0,
                           nfault + 1, step);
                }
                fflush(stdout);
                nfault++;
                t_fault += every;
            }
            usleep(50000);
        }
        if (stopping) break;
        if (l->exit_code == 2) {
            snprintf(why, sizeof why, "launch %d exited 2 (usage or input error): see %s", x->nlaunches, l->log);
            failed = true;
        }
        if (x->nlaunches == CHAOS_MAX_LAUNCHES) {
            snprintf(why, sizeof why, "%d launches: raise soak.fault_every", x->nlaunches);
            failed = true;
        }
    }
    /* steps redone by each relaunch */
    for (int i = 1; i < x->nlaunches; i++) {
        long resumed = chaos_log_resumed(x->launches[i].log);
        long lost = resumed >= 0 ? x->launches[i - 1].last_step - resumed : 0;
        if (lost > worst_lost) worst_lost = lost;
    }
    if (csv) fclose(csv);
    chaos_launch *last = &x->launches[x->nlaunches - 1];
    long final = newest_commit(x->run_dir);
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld", x->run_dir, final);
    int final_rc = final >= 0 ? chaos_run_cmd((const char *const[]){ "build/bin/nebula-ckpt", "verify", path, NULL },
                                              vlog) : -1;

    /* slopes per launch, after warm-up (the first 3 samples of each) */
    double rss_slope = -INFINITY, fd_slope = -INFINITY;
    sample *seg = malloc((size_t)(ns + 1) * sizeof *seg);
    CHECK(seg, "out of memory");
    for (int a = 0; a < ns;) {
        int b = a;
        while (b < ns && s[b].launch == s[a].launch) b++;
        /* the launch's samples with every rank present, less the first 3 or fifth (warm-up) */
        int n = 0;
        for (int i = a; i < b; i++)
            if (s[i].full) seg[n++] = s[i];
        int skip = n / 5 > 3 ? n / 5 : 3;
        double r = theil_sen(seg, skip, n, false), f = theil_sen(seg, skip, n, true);
        if (!isnan(r)) rss_slope = fmax(rss_slope, r);
        if (!isnan(f)) fd_slope = fmax(fd_slope, f);
        a = b;
    }
    free(seg);
    double *tp = malloc((size_t)(ns + 1) * sizeof *tp);
    CHECK(tp, "out of memory");
    int nt = 0;
    for (int i = 0; i < ns; i++)
        if (!isnan(s[i].steps_per_s) && s[i].steps_per_s > 0) tp[nt++] = s[i].steps_per_s;
    int third = nt / 3;
    double first = NAN, lastq = NAN;
    if (third >= 2) {
        double *tmp = malloc((size_t)nt * sizeof *tmp);
        CHECK(tmp, "out of memory");
        memcpy(tmp, tp, (size_t)third * sizeof *tmp);
        first = median_of(tmp, third);
        memcpy(tmp, tp + nt - third, (size_t)third * sizeof *tmp);
        lastq = median_of(tmp, third);
        free(tmp);
    }
    free(tp);
    double drop = isnan(first) ? NAN : 1.0 - lastq / first;
    double max_rss = config_float(cfg, "soak.max_rss_mb_per_h"), max_fd = config_float(cfg, "soak.max_fds_per_h");
    double max_drop = config_float(cfg, "soak.max_throughput_drop");
    bool ok_rss = isfinite(rss_slope) && rss_slope <= max_rss, ok_fd = isfinite(fd_slope) && fd_slope <= max_fd;
    bool ok_tp = !isnan(drop) && drop <= max_drop, ok_ck = verify_fail == 0 && final_rc == 0 && verified > 0;
    bool ok_lost = worst_lost <= ck, ok_end = !failed && last->exit_code == 3;
    bool pass = ok_rss && ok_fd && ok_tp && ok_ck && ok_lost && ok_end;
    char md_path[2 * CHAOS_PATH_MAX], js_path[2 * CHAOS_PATH_MAX];
    snprintf(md_path, sizeof md_path, "%s/report.md", out);
    snprintf(js_path, sizeof js_path, "%s/report.json", out);
    FILE *md = fopen(md_path, "w");
    for (int k = 0; k < 2; k++) {
        FILE *f = k == 0 ? stdout : md;
        if (!f) continue;
        fprintf(f, "\n### nebula-chaos soak: %s\n\n", pass ? "PASS" : "FAIL");
        fprintf(f, "%d ranks for %.0f s, %d faults (%s, in turn, every %g s), %d launches, %d samples "
                   "(samples.csv).\n\n", world, chaos_now() - x->t0, nfault, config_str(cfg, "soak.faults"), every,
                x->nlaunches, ns);
        fprintf(f, "| invariant | required | measured | |\n|---|---|---|---|\n");
        fprintf(f, "| resident memory growth within a launch | <= %g MB/h | %.2f MB/h (Theil-Sen, worst launch) | %s |\n",
                max_rss, rss_slope, ok_rss ? "pass" : "**FAIL**");
        fprintf(f, "| open descriptors growth within a launch | <= %g /h | %.2f /h | %s |\n", max_fd, fd_slope,
                ok_fd ? "pass" : "**FAIL**");
        fprintf(f, "| throughput drift (median, last third vs first) | drop <= %.0f%% | %.2f -> %.2f steps/s (%+.1f%%) | "
                   "%s |\n", 100 * max_drop, first, lastq, -100 * drop, ok_tp ? "pass" : "**FAIL**");
        fprintf(f, "| checkpoints verified | all | %d verified, %d failed; final step %ld: %s | %s |\n", verified,
                verify_fail, final, final_rc == 0 ? "ok" : "FAILED", ok_ck ? "pass" : "**FAIL**");
        fprintf(f, "| steps lost per fault | <= %ld | at most %ld | %s |\n", ck, worst_lost, ok_lost ? "pass" : "**FAIL**");
        fprintf(f, "| graceful end (SIGTERM: checkpoint, exit 3) | exit 3 | exit %d%s%s | %s |\n", last->exit_code,
                why[0] ? ": " : "", why, ok_end ? "pass" : "**FAIL**");
    }
    if (md) fclose(md);
    json_t *j = json_pack("{s:b, s:f, s:i, s:i, s:i, s:f, s:f, s:f, s:i, s:i, s:I, s:I, s:i}", "pass", pass,
                          "seconds", chaos_now() - x->t0, "faults", nfault, "launches", x->nlaunches, "samples", ns,
                          "rss_mb_per_h", isfinite(rss_slope) ? rss_slope : -1.0, "fds_per_h",
                          isfinite(fd_slope) ? fd_slope : -1.0, "throughput_drop", isnan(drop) ? -1.0 : drop,
                          "checkpoints_verified", verified, "checkpoints_failed", verify_fail, "final_step",
                          (json_int_t)final, "worst_lost_steps", (json_int_t)worst_lost, "last_exit", last->exit_code);
    json_dump_file(j, js_path, JSON_INDENT(2));
    json_decref(j);
    printf("\nreport: %s, %s and %s\n", md_path, js_path, csv_path);
    free(s);
    free(x);
    return pass ? 0 : 1;
}
