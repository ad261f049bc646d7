/* scenario — one fault scenario: the fault-free reference run, the faulted run with its
 * relaunches, the invariants, the report (Markdown and JSON).
 *
 * A scenario file (chaos/NAME.ini) names one kind of fault, the steps it strikes at and
 * how the job comes back; the supervisor plays the operator: it relaunches on every
 * ending that is not success or a usage error, with the ranks that remain when the
 * fault took some away, until the target step or the deadline. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "chaos.h"
#include "base/log.h"

static uint64_t mix(uint64_t *s) { return chaos_mix(s); }

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* fault.at: "12,31" or "random:K" (K distinct steps after the first checkpoint and
 * before the last step). */
static status plan_steps(chaos_ctx *x, uint64_t *seed)
{
    const config *cfg = x->cfg;
    const char *at = config_str(cfg, "fault.at");
    long steps = config_int(cfg, "scenario.steps"), ck = config_int(cfg, "scenario.ckpt_every");
    long v[CHAOS_MAX_FAULTS];
    int n = 0;
    if (!strncmp(at, "random:", 7)) {
        int k = atoi(at + 7);
        if (k < 1 || k > CHAOS_MAX_FAULTS || steps - 2 <= ck + k) {
            log_error("fault.at = %s: K must be 1..%d and fit between step %ld and %ld", at, CHAOS_MAX_FAULTS, ck + 1,
                      steps - 2);
            return STATUS_INPUT;
        }
        while (n < k) {
            long s = ck + 1 + (long)(mix(seed) % (uint64_t)(steps - 2 - ck));
            bool dup = false;
            for (int i = 0; i < n; i++) dup |= v[i] == s;
            if (!dup) v[n++] = s;
        }
    } else {
        char buf[CONFIG_STR_MAX + 1];
        snprintf(buf, sizeof buf, "%s", at);
        for (char *t = strtok(buf, ", "); t; t = strtok(NULL, ", ")) {
            char *end;
            long s = strtol(t, &end, 10);
            if (*end || s < 1 || s >= steps || n == CHAOS_MAX_FAULTS) {
                log_error("fault.at = %s: '%s' is not a step in 1..%ld (or more than %d steps); write steps "
                          "like 12,31 or random:K", at, t, steps - 1, CHAOS_MAX_FAULTS);
                return STATUS_INPUT;
            }
            v[n++] = s;
        }
    }
    qsort(v, (size_t)n, sizeof v[0], cmp_long);
    for (int i = 0; i < n; i++) {
        memset(&x->faults[i], 0, sizeof x->faults[i]);
        x->faults[i].at_step = v[i];
        x->faults[i].launch = -1;
    }
    x->nfaults = strcmp(config_str(cfg, "fault.kind"), "none") ? n : 0;
    return STATUS_OK;
}

/* fault.ranks: "30%" of the world (rounded, at least 1) or a count. */
static int ranks_to_hit(const config *cfg, int world)
{
    const char *r = config_str(cfg, "fault.ranks");
    double v = atof(r);
    int k = strchr(r, '%') ? (int)lround(v / 100.0 * world) : (int)v;
    return k < 1 ? 1 : k > world ? world : k;
}

static void sh(chaos_ctx *x, const char *const *argv)
{
    char log[2 * CHAOS_PATH_MAX];
    snprintf(log, sizeof log, "%s/supervisor.log", x->out);
    int rc = chaos_run_cmd(argv, log);
    if (rc != 0) log_warn("%s %s exited with %d (see %s)", argv[0], argv[1] ? argv[1] : "", rc, log);
}

static long corrupt_newest(chaos_ctx *x)
{
    return chaos_corrupt_newest(x->run_dir, config_int(x->cfg, "fault.corrupt_bytes"));
}

/* Fills the run directory's file system (the scenario's tmpfs) to the last byte. */
static void fill_disk(chaos_ctx *x)
{
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/filler", x->run_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    static char zeros[65536];
    for (size_t chunk = sizeof zeros; chunk >= 1; chunk /= 2)
        while (write(fd, zeros, chunk) == (ssize_t)chunk) {}
    close(fd);
}

static void free_disk(chaos_ctx *x)
{
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/filler", x->run_dir);
    unlink(path);
}

/* sig to each rank of hit[] (world entries); writes "SIGKILL rank(s) 1,3" into what and
 * names the ranks it could not reach; true when every one was reached. */
static bool hit_ranks(chaos_ctx *x, const int *hit, int world, int sig, char *what, size_t cap)
{
    static chaos_rank ranks[1024];
    char log[2 * CHAOS_PATH_MAX], ok[160] = "", missed[160] = "";
    snprintf(log, sizeof log, "%s/supervisor.log", x->out);
    chaos_ranks(x->run_dir, ranks, 1024);
    int nok = 0, nmiss = 0;
    for (int r = 0; r < world && r < 1024; r++) {
        if (!hit[r]) continue;
        bool sent = chaos_signal_rank(&ranks[r], sig, log);
        char *buf = sent ? ok : missed;
        snprintf(buf + strlen(buf), 160 - strlen(buf), "%s%d", (sent ? nok++ : nmiss++) ? "," : "", r);
    }
    snprintf(what, cap, "%s rank%s %s", chaos_signame(sig), nok > 1 ? "s" : "", nok ? ok : "none");
    if (nmiss)
        snprintf(what + strlen(what), cap - strlen(what), " (not reached: rank%s %s)", nmiss > 1 ? "s" : "", missed);
    return nok > 0 && nmiss == 0;
}

/* Bytes available to an unprivileged writer on the run directory's file system. */
static long long free_bytes(const char *dir)
{
    struct statvfs v;
    return statvfs(dir, &v) == 0 ? (long long)v.f_bavail * (long long)v.f_frsize : -1;
}

/* Injects fault f into the running launch l; f->injected only on evidence. */
static void inject(chaos_ctx *x, chaos_fault *f, chaos_launch *l, long step, int *to_remove)
{
    const config *cfg = x->cfg;
    const char *kind = config_str(cfg, "fault.kind");
    f->step = step;
    f->t_inject = chaos_now();
    f->launch = x->nlaunches - 1;
    f->done = true;
    int hit[1024] = { 0 };
    if (!strcmp(kind, "kill") || !strcmp(kind, "ckpt-corrupt")) {
        /* ckpt-corrupt: the job dies (every rank), the operator finds it and the newest
         * checkpoint is damaged before the relaunch (injected once that is done) */
        int k = !strcmp(kind, "kill") ? ranks_to_hit(cfg, l->world) : l->world;
        uint64_t seed = (uint64_t)config_int(cfg, "fault.seed") * 7919u + (uint64_t)step;
        for (int n = 0; n < k;) {
            int r = (int)(mix(&seed) % (uint64_t)l->world);
            if (!hit[r]) { hit[r] = 1; n++; }
        }
        bool all = hit_ranks(x, hit, l->world, SIGKILL, f->what, sizeof f->what);
        f->injected = all && !strcmp(kind, "kill");
        f->ranks_hit = k;
        if (!strcmp(config_str(cfg, "fault.relaunch"), "remaining")) *to_remove += k;
    } else if (!strcmp(kind, "freeze")) {
        /* a rank that stops answering without dying (a hung driver, a swapped-out node):
         * OpenMPI waits forever; only the heartbeat tells */
        int k = ranks_to_hit(cfg, l->world);
        for (int r = l->world - k; r < l->world; r++) hit[r] = 1;
        f->injected = hit_ranks(x, hit, l->world, SIGSTOP, f->what, sizeof f->what);
        f->ranks_hit = k;
    } else if (!strcmp(kind, "preempt")) {
        /* the i-th fault step sends the i-th signal of fault.signals (or the only one) to
         * every rank, as Slurm's --signal (no B:) and its time limit do; the words were
         * checked up front (check.c) */
        char list[CONFIG_STR_MAX + 1], *words[CHAOS_MAX_FAULTS];
        snprintf(list, sizeof list, "%s", config_str(cfg, "fault.signals"));
        int nw = 0, idx = (int)(f - x->faults);
        for (char *t = strtok(list, ", "); t && nw < CHAOS_MAX_FAULTS; t = strtok(NULL, ", ")) words[nw++] = t;
        int sig = chaos_preempt_signal(words[idx < nw ? idx : nw - 1]);
        for (int r = 0; r < l->world && r < 1024; r++) hit[r] = 1;
        f->injected = hit_ranks(x, hit, l->world, sig, f->what, sizeof f->what);
    } else if (!strcmp(kind, "packet-loss")) {
        char pct[32], log[2 * CHAOS_PATH_MAX];
        snprintf(pct, sizeof pct, "%g", config_float(cfg, "fault.loss_pct"));
        snprintf(log, sizeof log, "%s/supervisor.log", x->out);
        int rc = chaos_run_cmd((const char *const[]){ "tools/netns-cluster", "loss", pct, NULL }, log);
        f->injected = rc == 0;
        snprintf(f->what, sizeof f->what, "%s%% packet loss between nodes for %g s%s", pct,
                 config_float(cfg, "fault.loss_seconds"), rc ? " (tools/netns-cluster loss FAILED)" : "");
    } else if (!strcmp(kind, "disk-full")) {
        fill_disk(x);
        long long left = free_bytes(x->run_dir);
        f->injected = left == 0;
        snprintf(f->what, sizeof f->what, "run directory's file system filled (%lld bytes left)", left);
    } else if (!strcmp(kind, "io-error")) {
        /* the CHAOS build injects it; the evidence is its "chaos: injected" line (io_evidence) */
        snprintf(f->what, sizeof f->what, "%s armed for the checkpoint of step %ld (no \"chaos: injected\" line yet)",
                 config_str(cfg, "fault.io"), f->at_step);
    }
    log_info("step %ld: %s", step, f->what);
}

/* io-error: the faults the CHAOS build's ranks say they injected in a launch's log
 * ("chaos: injected EIO at ckpt.fsync (step 20, point #3)"), matched to the plan by step. */
static void io_evidence(chaos_ctx *x, int launch)
{
    FILE *f = fopen(x->launches[launch].log, "r");
    if (!f) return;
    char line[4096], err[16], point[64];
    long step;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "chaos: injected ");
        if (!p || sscanf(p, "chaos: injected %15s at %63s (step %ld", err, point, &step) != 3) continue;
        for (int i = 0; i < x->nfaults; i++) {
            chaos_fault *c = &x->faults[i];
            if (c->at_step != step || c->injected) continue;
            c->injected = true;
            c->step = step;
            c->launch = launch;
            if (!c->done) c->t_inject = x->launches[launch].t_end ? x->launches[launch].t_end : chaos_now();
            c->done = true;
            snprintf(c->what, sizeof c->what, "%s at %s of step %ld (rank's log: chaos: injected)", err, point, step);
        }
    }
    fclose(f);
}

int chaos_reference(chaos_ctx *x, const char *run_dir, int world, long steps, double *loss)
{
    char log[2 * CHAOS_PATH_MAX];
    snprintf(log, sizeof log, "%s/reference.log", x->out);
    chaos_launch l;
    if (chaos_start(x, run_dir, world, log, steps, NULL, &l) != 0) return -1;
    double deadline = config_float(x->cfg, "scenario.deadline");
    while (!chaos_poll(&l)) {
        if (chaos_interrupted) {
            chaos_stop(&l, run_dir, chaos_interrupted, CHAOS_STOP_GRACE);
            return -1;
        }
        if (chaos_now() - x->t0 > deadline) {
            chaos_stop(&l, run_dir, SIGTERM, 2);
            log_error("the fault-free reference did not finish within scenario.deadline = %g s", deadline);
            return -1;
        }
        usleep(50000);
    }
    *loss = chaos_log_final_loss(log, NULL);
    if (l.exit_code != 0) log_error("the fault-free reference run failed with exit %d (see %s)", l.exit_code, log);
    return l.exit_code;
}

/* One row of the invariant table. */
typedef struct check_row {
    char name[96], measured[160], required[96];
    bool pass;
} check_row;

static void row(check_row *rows, int *n, bool pass, const char *name, const char *req, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void row(check_row *rows, int *n, bool pass, const char *name, const char *req, const char *fmt, ...)
{
    check_row *r = &rows[(*n)++];
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->required, sizeof r->required, "%s", req);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->measured, sizeof r->measured, fmt, ap);
    va_end(ap);
    r->pass = pass;
}

static bool global_batch_of(const char *log, long *gb)
{
    FILE *f = fopen(log, "r");
    if (!f) return false;
    char line[4096];
    bool ok = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "batch: global %ld", gb) == 1) ok = true;
    fclose(f);
    return ok;
}

static void final_ckpt(const char *run_dir, long steps, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt/step_%08ld", run_dir, steps);
}

/* Everything the scenario's phases share: the reference, the faulted run's progress and
 * the invariant rows. */
typedef struct scen {
    const config *cfg;
    const char *out;
    chaos_ctx *x;
    const char *kind;          /* fault.kind */
    long steps, ck;            /* scenario.steps, scenario.ckpt_every */
    int world;                 /* the next launch's ranks */
    double deadline, hb_timeout;
    char ref_dir[2 * CHAOS_PATH_MAX], ref_log[2 * CHAOS_PATH_MAX], sup_log[2 * CHAOS_PATH_MAX];
    int ref_rc;
    double ref_loss;
    bool use_netns;
    double t_run, t_done, loss_until, t_hb;
    int fi, to_remove;         /* faults acted on; ranks the next relaunch leaves out */
    bool failed, ok;
    char why[256];
    long corrupted;            /* the step ckpt-corrupt damaged, -1 if none */
    char log[2 * CHAOS_PATH_MAX], env_fault[CONFIG_STR_MAX + 64];
    check_row rows[32];
    int nr;
} scen;

/* The context, the fault plan and its checks; 0, or the exit code (2: the plan is not
 * valid). */
static int scen_setup(scen *S, const config *cfg, const char *out)
{
    chaos_ctx *x = S->x = calloc(1, sizeof *x);
    CHECK(x, "out of memory");
    S->cfg = cfg;
    S->out = out;
    x->cfg = cfg;
    x->t0 = chaos_now();
    snprintf(x->name, sizeof x->name, "%s", config_str(cfg, "scenario.name"));
    snprintf(x->out, sizeof x->out, "%s", out);
    snprintf(x->run_dir, sizeof x->run_dir, "%s/run", out);
    chaos_bin_path("nebula-train", x->train_bin, sizeof x->train_bin);
    S->kind = config_str(cfg, "fault.kind");
    S->steps = config_int(cfg, "scenario.steps");
    S->ck = config_int(cfg, "scenario.ckpt_every");
    S->world = (int)config_int(cfg, "scenario.ranks");
    S->deadline = config_float(cfg, "scenario.deadline");
    S->hb_timeout = config_float(cfg, "scenario.heartbeat_timeout");
    uint64_t seed = (uint64_t)config_int(cfg, "fault.seed");
    snprintf(S->ref_dir, sizeof S->ref_dir, "%s/reference", out);
    if (plan_steps(x, &seed) != STATUS_OK) return 2;
    if (!strcmp(S->kind, "io-error") || !strcmp(S->kind, "disk-full")) {
        for (int i = 0; i < x->nfaults; i++)
            if (!strcmp(S->kind, "io-error") && x->faults[i].at_step % S->ck) {
                log_error("fault.at: an io-error strikes a checkpoint, so its steps must be multiples of "
                          "scenario.ckpt_every = %ld, not %ld", S->ck, x->faults[i].at_step);
                return 2;
            }
    }
    printf("scenario %s: %s\n", x->name, config_str(cfg, "scenario.description"));
    printf("  %d ranks (%ld per node), %ld steps, a checkpoint every %ld, heartbeat timeout %g s, deadline %g s\n",
           S->world, (long)config_int(cfg, "scenario.ranks_per_node"), S->steps, S->ck, S->hb_timeout, S->deadline);
    fflush(stdout);
    return 0;
}

/* The fault-free run first (the faulted run is compared with it), in the namespace
 * cluster when the scenario uses one; then disk-full's tmpfs. 0, or the exit code. */
static int scen_reference(scen *S)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    S->ref_loss = NAN;
    S->use_netns = !strcmp(config_str(cfg, "scenario.launcher"), "netns");
    if (S->use_netns) {
        char nodes[16];
        snprintf(nodes, sizeof nodes, "%ld", S->world / config_int(cfg, "scenario.ranks_per_node"));
        sh(x, (const char *const[]){ "tools/netns-cluster", "down", NULL });
        sh(x, (const char *const[]){ "tools/netns-cluster", "up", nodes, NULL });
        x->netns_up = true;
    }
    S->ref_rc = chaos_reference(x, S->ref_dir, S->world, S->steps, &S->ref_loss);
    snprintf(S->ref_log, sizeof S->ref_log, "%s/reference.log", S->out);
    printf("  reference: exit %d, held-out loss %.6f (%.1f s)\n", S->ref_rc, S->ref_loss, chaos_now() - x->t0);
    fflush(stdout);
    if (!strcmp(S->kind, "disk-full")) {
        mkdir(x->run_dir, 0755);
        char opts[64];
        snprintf(opts, sizeof opts, "size=%llu", (unsigned long long)config_size(cfg, "fault.disk_size"));
        if (mount("tmpfs", x->run_dir, "tmpfs", 0, opts) != 0) {
            log_error("cannot mount a tmpfs on %s for disk-full: %s (root only)", x->run_dir, log_errno_str());
            return 1;
        }
        x->tmpfs_mounted = true;
    }
    return 0;
}

/* Watches launch l until it ends or is stopped: the deadline, progress and recoveries,
 * the end of a packet loss, the planned faults, a dead or hung rank. */
static void scen_watch(scen *S, chaos_launch *l)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    S->t_hb = l->t_start;
    double t_prev = chaos_now(), now;
    long step;
    for (;;) {
        if (!chaos_watch_tick(l, x->run_dir, &t_prev, &S->t_hb, &now, &step)) {
            S->failed = true;
            return;
        }
        if (now - x->t0 > S->deadline) {
            snprintf(S->why, sizeof S->why, "the scenario's deadline of %g s passed", S->deadline);
            chaos_stop(l, x->run_dir, SIGTERM, 2);
            S->failed = true;
            return;
        }
        if (!l->t_first_progress && l->resumed_step >= 0 && l->last_step > l->resumed_step) {
            l->t_first_progress = now;  /* the first step past the resumed one: earlier faults recovered */
            for (int i = 0; i < S->fi; i++)
                if (x->faults[i].launch < x->nlaunches - 1 && !x->faults[i].t_recover) x->faults[i].t_recover = now;
        }
        if (S->loss_until > 0 && now >= S->loss_until) {
            sh(x, (const char *const[]){ "tools/netns-cluster", "loss", "none", NULL });
            log_info("packet loss ended");
            S->loss_until = 0;
        }
        if (S->fi < x->nfaults && step >= x->faults[S->fi].at_step && l->pid > 0) {
            inject(x, &x->faults[S->fi], l, step, &S->to_remove);
            if (!strcmp(S->kind, "packet-loss")) S->loss_until = now + config_float(cfg, "fault.loss_seconds");
            S->fi++;
        }
        if (chaos_poll(l)) return;
        if (chaos_rank_died(l, x->run_dir)) {
            log_info("a rank of launch %d is gone: stopping the others", x->nlaunches);
            chaos_kill_ranks(x->run_dir, S->sup_log);
            chaos_stop(l, x->run_dir, SIGTERM, 2);
            return;
        }
        if (now - S->t_hb > S->hb_timeout) {
            log_warn("no progress for %.1f s (heartbeat at step %ld): the launch is hung; stopping it", now - S->t_hb,
                     l->last_step);
            l->hung = true;
            chaos_kill_ranks(x->run_dir, S->sup_log);
            chaos_stop(l, x->run_dir, SIGTERM, 2);
            return;
        }
        usleep(50000);
    }
}

/* What the operator does between an ending and the relaunch: free the disk, damage the
 * newest checkpoint (ckpt-corrupt), take the world size the run asked for or the ranks
 * that remain. */
static void scen_before_relaunch(scen *S, chaos_launch *l)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    if (!strcmp(S->kind, "disk-full")) free_disk(x);
    if (!strcmp(S->kind, "ckpt-corrupt") && S->fi > 0 && x->faults[S->fi - 1].launch == x->nlaunches - 1) {
        S->corrupted = corrupt_newest(x);
        chaos_fault *c = &x->faults[S->fi - 1];
        c->injected = S->corrupted >= 0 && !strstr(c->what, "not reached");
        if (S->corrupted >= 0)
            snprintf(c->what + strlen(c->what), sizeof c->what - strlen(c->what), ", step %ld corrupted", S->corrupted);
        printf("  corrupted %ld bytes of the newest committed checkpoint, step %ld\n",
               (long)config_int(cfg, "fault.corrupt_bytes"), S->corrupted);
    }
    if (l->exit_code == 4) {  /* nebula-train asked for another world size */
        char rp[2 * CHAOS_PATH_MAX], buf[128];
        snprintf(rp, sizeof rp, "%s/relaunch", x->run_dir);
        FILE *f = fopen(rp, "r");
        int w = 0;
        if (f && fgets(buf, sizeof buf, f)) sscanf(buf, "world=%d", &w);
        if (f) fclose(f);
        if (w > 0) S->world = w;
    }
    if (S->to_remove > 0) {
        S->world = S->world - S->to_remove < 1 ? 1 : S->world - S->to_remove;
        S->to_remove = 0;
    }
}

/* The faulted run: launches, watches and relaunches until success (S->ok), a failure
 * (S->failed, S->why) or an interruption. */
static void scen_launches(scen *S)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    S->t_run = chaos_now();
    snprintf(S->sup_log, sizeof S->sup_log, "%s/supervisor.log", S->out);
    S->corrupted = -1;
    const char *env[2] = { NULL, NULL };
    for (;;) {
        if (chaos_interrupted) {
            S->failed = true;
            break;
        }
        chaos_launch *l = &x->launches[x->nlaunches];
        snprintf(S->log, sizeof S->log, "%s/launch-%d.log", S->out, x->nlaunches + 1);
        char hb[2 * CHAOS_PATH_MAX];
        snprintf(hb, sizeof hb, "%s/heartbeat", x->run_dir);
        unlink(hb);
        env[0] = NULL;
        chaos_bin_path("nebula-train", x->train_bin, sizeof x->train_bin);
        if (!strcmp(S->kind, "io-error") && x->nlaunches == 0) {
            snprintf(x->train_bin, sizeof x->train_bin, "%s", CHAOS_TRAIN_BIN);
            char list[CONFIG_STR_MAX + 64] = "";
            for (int i = 0; i < x->nfaults; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s@%ld", i ? "," : "",
                         config_str(cfg, "fault.io"), x->faults[i].at_step);
            snprintf(S->env_fault, sizeof S->env_fault, "NEBULA_CHAOS_FAULT=%s", list);
            env[0] = S->env_fault;
        }
        if (chaos_start(x, x->run_dir, S->world, S->log, S->steps, env, l) != 0) { S->failed = true; break; }
        x->nlaunches++;
        printf("  launch %d: %d ranks%s\n", x->nlaunches, S->world, env[0] ? " (CHAOS build, fault armed)" : "");
        fflush(stdout);
        scen_watch(S, l);
        if (l->resumed_step < 0) l->resumed_step = chaos_log_resumed(l->log);
        if (!strcmp(S->kind, "io-error")) io_evidence(x, x->nlaunches - 1);
        long final_step = chaos_heartbeat(x->run_dir, NULL);  /* steps it finished while being stopped */
        if (final_step > l->last_step) l->last_step = final_step;
        for (int i = 0; i < S->fi; i++)
            if (x->faults[i].launch == x->nlaunches - 1 && !x->faults[i].t_detect)
                x->faults[i].t_detect = l->t_end ? l->t_end : chaos_now();
        printf("  launch %d ended: exit %d%s after %.1f s, resumed from step %ld, reached step %ld\n", x->nlaunches,
               l->exit_code, l->hung ? " (hung: stopped by the supervisor)" : "", (l->t_end ? l->t_end : chaos_now()) -
               l->t_start, l->resumed_step, l->last_step);
        fflush(stdout);
        if (S->failed) break;
        if (l->exit_code == 0 && !l->hung) { S->ok = true; break; }
        if (l->exit_code == 2) {
            snprintf(S->why, sizeof S->why, "launch %d exited 2 (usage or input error): see %s", x->nlaunches, l->log);
            S->failed = true;
            break;
        }
        if (x->nlaunches == (int)config_int(cfg, "scenario.max_launches") || x->nlaunches == CHAOS_MAX_LAUNCHES) {
            snprintf(S->why, sizeof S->why, "%d launches did not reach step %ld", x->nlaunches, S->steps);
            S->failed = true;
            break;
        }
        scen_before_relaunch(S, l);
    }
    if (chaos_interrupted)
        snprintf(S->why, sizeof S->why, "interrupted by %s: launch stopped", chaos_signame(chaos_interrupted));
    S->t_done = chaos_now();
}

/* Steps redone per fault: the last step the struck launch reached, less the step the
 * next one resumed from. */
static void scen_lost_steps(scen *S)
{
    chaos_ctx *x = S->x;
    for (int i = 0; i < S->fi; i++) {
        chaos_fault *f = &x->faults[i];
        int L = f->launch;
        /* the last fault injected into a launch is the one that ended it; earlier ones
         * (SIGUSR1, a loss it lived through) let the run go on */
        bool last_in_launch = i + 1 == S->fi || x->faults[i + 1].launch != L;
        bool ended = L + 1 < x->nlaunches && last_in_launch;
        /* the next launch that got as far as loading a checkpoint (one that hung during
         * start-up, still under the fault, resumed nothing) */
        int next = L + 1;
        while (next < x->nlaunches - 1 && x->launches[next].resumed_step < 0) next++;
        f->lost = ended ? x->launches[L].last_step - x->launches[next].resumed_step : 0;
        if (!ended) f->t_detect = f->t_recover = 0;  /* the run went on (USR1, a loss it survived) */
    }
}

/* The final state against the fault-free run's: bit-identical at the same world size,
 * the held-out loss within 1% and the same global batch at another. */
static void scen_check_final(scen *S, const chaos_launch *last)
{
    chaos_ctx *x = S->x;
    int world0 = (int)config_int(S->cfg, "scenario.ranks");
    bool same_world = last->world == world0;
    long lstep = 0;
    double loss = chaos_log_final_loss(last->log, &lstep);
    long gb_ref = 0, gb = 0;
    bool have_gb = global_batch_of(S->ref_log, &gb_ref) && global_batch_of(last->log, &gb);
    char a[3 * CHAOS_PATH_MAX], b[3 * CHAOS_PATH_MAX];
    final_ckpt(x->run_dir, S->steps, a, sizeof a);
    final_ckpt(S->ref_dir, S->steps, b, sizeof b);
    if (S->ok && S->ref_rc == 0 && same_world) {
        char dlog[2 * CHAOS_PATH_MAX];
        snprintf(dlog, sizeof dlog, "%s/diff.log", S->out);
        char ckpt_bin[4096];
        chaos_bin_path("nebula-ckpt", ckpt_bin, sizeof ckpt_bin);
        int d = chaos_run_cmd((const char *const[]){ ckpt_bin, "diff", a, b, NULL }, dlog);
        row(S->rows, &S->nr, d == 0 && loss == S->ref_loss, "final state vs fault-free (same world size)",
            "bit-identical", "nebula-ckpt diff exit %d; held-out loss %.6f vs %.6f", d, loss, S->ref_loss);
    } else {
        double rel = fabs(loss - S->ref_loss) / S->ref_loss;
        row(S->rows, &S->nr, S->ok && S->ref_rc == 0 && rel <= 0.01 && have_gb && gb == gb_ref,
            "held-out loss vs fault-free (world size changed)", "within 1%, same global batch",
            "%.6f vs %.6f (%.3f%%) at %d ranks, global batch %ld vs %ld", loss, S->ref_loss, 100 * rel, last->world, gb,
            gb_ref);
    }
}

/* The invariant rows: target reached, steps lost, no corrupt checkpoint loaded, every
 * fault injected, the final state, the deadline. */
static void scen_invariants(scen *S)
{
    const config *cfg = S->cfg;
    chaos_ctx *x = S->x;
    long ck = S->ck;
    chaos_launch *last = &x->launches[x->nlaunches ? x->nlaunches - 1 : 0];
    row(S->rows, &S->nr, S->ok && last->last_step == S->steps, "reached the target step", "= target", "%ld of %ld%s%s",
        last->last_step, S->steps, S->why[0] ? ": " : "", S->why);
    long worst = 0;
    for (int i = 0; i < S->fi; i++) worst = x->faults[i].lost > worst ? x->faults[i].lost : worst;
    long bound = ck * config_int(cfg, "scenario.max_lost_intervals");
    char req[64];
    snprintf(req, sizeof req, "<= %ld (%ld interval%s)", bound, bound / ck, bound / ck > 1 ? "s" : "");
    row(S->rows, &S->nr, worst <= bound, "steps lost per fault", req, "at most %ld (interval %ld)", worst, ck);
    bool clean = true;
    for (int i = 1; i < x->nlaunches; i++)
        if (S->corrupted >= 0 && x->launches[i].resumed_step == S->corrupted) clean = false;
    char resumed[256] = "";
    for (int i = 1; i < x->nlaunches; i++)
        if (x->launches[i].resumed_step >= 0)
            snprintf(resumed + strlen(resumed), sizeof resumed - strlen(resumed), "%s%ld", resumed[0] ? ", " : "",
                     x->launches[i].resumed_step);
    if (S->corrupted >= 0)
        row(S->rows, &S->nr, clean, "no torn or corrupt checkpoint loaded", "never", "step %ld corrupted; relaunches "
            "resumed from %s", S->corrupted, resumed);
    else
        row(S->rows, &S->nr, clean, "no torn or corrupt checkpoint loaded", "never", "relaunches resumed from %s "
            "(each checksum-verified on load)", resumed[0] ? resumed : "-");
    /* evidence, never the plan: a fault counts when kill(2) reached every rank it named,
     * the rank logged "chaos: injected", the disk was full, the checkpoint was damaged */
    int injected = 0;
    for (int i = 0; i < x->nfaults; i++) injected += x->faults[i].injected;
    row(S->rows, &S->nr, injected == x->nfaults, "every planned fault injected", "all, on evidence",
        "%d of %d (%d acted on)", injected, x->nfaults, S->fi);
    scen_check_final(S, last);
    double detect = 0, recover = 0;
    for (int i = 0; i < S->fi; i++) {
        if (x->faults[i].t_detect) detect = fmax(detect, x->faults[i].t_detect - x->faults[i].t_inject);
        if (x->faults[i].t_recover) recover = fmax(recover, x->faults[i].t_recover - x->faults[i].t_inject);
    }
    row(S->rows, &S->nr, S->t_done - x->t0 <= S->deadline, "ended within the deadline", "<= deadline",
        "%.1f s of %g s (faulted run %.1f s); worst detection %.1f s, worst recovery %.1f s", S->t_done - x->t0,
        S->deadline, S->t_done - S->t_run, detect, recover);
}

/* Nothing left behind: the tmpfs unmounted, the namespaces down, no rank process. */
static void scen_clean_up(scen *S)
{
    chaos_ctx *x = S->x;
    if (x->tmpfs_mounted) {
        /* keep the final checkpoint for the report's readers: the tmpfs goes, so copy nothing; the diff ran */
        if (umount2(x->run_dir, MNT_DETACH) == 0) x->tmpfs_mounted = false;
    }
    if (S->use_netns) {
        sh(x, (const char *const[]){ "tools/netns-cluster", "down", NULL });
        x->netns_up = false;
    }
    pid_t pids[1024];
    int left = chaos_rank_pids(x->run_dir, pids, 1024) + chaos_rank_pids(S->ref_dir, pids, 1024);
    row(S->rows, &S->nr, left == 0 && !x->tmpfs_mounted && !x->netns_up, "nothing left behind",
        "no rank, namespace or mount", "%d rank processes%s%s", left, x->tmpfs_mounted ? ", tmpfs still mounted" : "",
        x->netns_up ? ", namespaces up" : "");
}

/* The report as Markdown, to stdout and report.md alike. */
static void scen_write_md(const scen *S, bool pass, FILE *f)
{
    const chaos_ctx *x = S->x;
    if (chaos_interrupted)
        fprintf(f, "\n### nebula-chaos %s: INTERRUPTED by %s\n\n", x->name, chaos_signame(chaos_interrupted));
    else
        fprintf(f, "\n### nebula-chaos %s: %s\n\n", x->name, pass ? "PASS" : "FAIL");
    fprintf(f, "%s. %d launch(es); fault-free reference at %d ranks.\n\n", config_str(S->cfg, "scenario.description"),
            x->nlaunches, (int)config_int(S->cfg, "scenario.ranks"));
    if (S->fi > 0) {
        fprintf(f, "| fault | at step | launch | detected after | recovered after | steps lost |\n");
        fprintf(f, "|---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < S->fi; i++) {
            const chaos_fault *c = &x->faults[i];
            fprintf(f, "| %s | %ld | %d | ", c->what, c->step, c->launch + 1);
            if (c->t_detect) fprintf(f, "%.2f s | ", c->t_detect - c->t_inject); else fprintf(f, "— | ");
            if (c->t_recover) fprintf(f, "%.2f s | ", c->t_recover - c->t_inject); else fprintf(f, "— | ");
            fprintf(f, "%ld |\n", c->lost);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "| invariant | required | measured | |\n|---|---|---|---|\n");
    for (int i = 0; i < S->nr; i++)
        fprintf(f, "| %s | %s | %s | %s |\n", S->rows[i].name, S->rows[i].required, S->rows[i].measured,
                S->rows[i].pass ? "pass" : "**FAIL**");
}

static void scen_write_json(const scen *S, bool pass, const char *js_path)
{
    const chaos_ctx *x = S->x;
    json_t *jf = json_array(), *jc = json_array();
    for (int i = 0; i < S->fi; i++) {
        const chaos_fault *c = &x->faults[i];
        json_array_append_new(jf, json_pack("{s:s, s:b, s:I, s:i, s:f, s:f, s:I}", "fault", c->what, "injected",
                                            c->injected, "step",
                                            (json_int_t)c->step, "launch", c->launch + 1, "detect_s",
                                            c->t_detect ? c->t_detect - c->t_inject : -1.0, "recover_s",
                                            c->t_recover ? c->t_recover - c->t_inject : -1.0, "lost_steps",
                                            (json_int_t)c->lost));
    }
    for (int i = 0; i < S->nr; i++)
        json_array_append_new(jc, json_pack("{s:s, s:s, s:s, s:b}", "invariant", S->rows[i].name, "required",
                                            S->rows[i].required, "measured", S->rows[i].measured, "pass",
                                            S->rows[i].pass));
    json_t *j = json_pack("{s:s, s:b, s:s?, s:i, s:o, s:o}", "scenario", x->name, "pass", pass && !chaos_interrupted,
                          "interrupted", chaos_interrupted ? chaos_signame(chaos_interrupted) : NULL, "launches",
                          x->nlaunches, "faults", jf, "invariants", jc);
    char *text = json_dumps(j, JSON_INDENT(2));
    chaos_write_report(js_path, text);
    free(text);
    json_decref(j);
}

int chaos_run_scenario(const config *cfg, const char *out)
{
    scen *S = calloc(1, sizeof *S);
    CHECK(S, "out of memory");
    int rc = scen_setup(S, cfg, out);
    if (rc == 0) rc = scen_reference(S);
    if (rc != 0) return rc;
    chaos_ctx *x = S->x;
    scen_launches(S);
    scen_lost_steps(S);
    scen_invariants(S);
    scen_clean_up(S);

    bool pass = true;
    for (int i = 0; i < S->nr; i++) pass &= S->rows[i].pass;
    char md_path[2 * CHAOS_PATH_MAX], js_path[2 * CHAOS_PATH_MAX];
    snprintf(md_path, sizeof md_path, "%s/report.md", out);
    snprintf(js_path, sizeof js_path, "%s/report.json", out);
    char *text = NULL;
    size_t len = 0;
    FILE *md = open_memstream(&text, &len);
    if (md) {
        scen_write_md(S, pass, md);
        if (fclose(md) != 0) {
            free(text);
            text = NULL;
        }
    }
    if (text) fputs(text, stdout);
    else scen_write_md(S, pass, stdout);
    chaos_write_report(md_path, text);
    free(text);
    scen_write_json(S, pass, js_path);
    printf("\nreport: %s and %s\n", md_path, js_path);
    free(x);
    free(S);
    return pass ? 0 : 1;
}
