/* monitor — alert rules over each step's global figures, and the actions they take
 * (docs/monitor.md). Rules: gradient explosion (norm above monitor.explosion),
 * non-finite steps past train.max_skipped_steps (the divergence guard), a loss spike
 * (robust z-score over monitor.window), stagnation of the held-out loss, a throughput
 * drop, a communication stall, memory growth. Actions: log, checkpoint, stop (exit 5,
 * not requeued), lower_lr, rollback (to the last committed checkpoint, skipping the
 * data of the steps it undoes, as PaLM restarted before a spike and skipped the batches
 * around it), disable_dgc.
 *
 * The one design decision: rank 0 decides, every rank acts. The figures a rule reads
 * are global already (the loss, the gradient norm, the held-out loss are reduced by
 * the step and the evaluation) or reduced here (a rank's communication share and
 * memory growth: one small MAX allreduce, only while those rules are on); rank 0
 * evaluates the rules and its action bits travel in the step-end agreement's MAX
 * allreduce (loop.c), so every rank lowers, rolls back or stops at the same step
 * without a collective of its own. The rules' settings are read from the config at
 * every step, so a hot reload of a [monitor] key takes effect at the next one. */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_impl.h"

static const char *const monitor_action_names[] = { "log", "checkpoint", "stop", "lower_lr", "rollback",
                                                    "disable_dgc" };
#define MONITOR_NACTIONS 6
#define MONITOR_ACTION_LIST "log, checkpoint, stop, lower_lr, rollback, disable_dgc"

typedef enum monitor_rule {
    MONITOR_RULE_EXPLOSION = 0,
    MONITOR_RULE_NONFINITE,
    MONITOR_RULE_SPIKE,
    MONITOR_RULE_STAGNATION,
    MONITOR_RULE_THROUGHPUT,
    MONITOR_RULE_COMM_STALL,
    MONITOR_RULE_MEMORY,
    MONITOR_NRULES
} monitor_rule;

/* Each rule's name (in records) and the key of its actions. */
static const struct {
    const char *name, *action_key;
} monitor_rules[MONITOR_NRULES] = {
    { "explosion", "monitor.explosion_action" },     { "nonfinite", "monitor.nonfinite_action" },
    { "spike", "monitor.spike_action" },             { "stagnation", "monitor.stagnation_action" },
    { "throughput", "monitor.throughput_drop_action" },   { "comm_stall", "monitor.comm_stall_action" },
    { "memory", "monitor.memory_growth_action" },
};

_Static_assert(MONITOR_NRULES <= (int)(sizeof ((train_monitor *)0)->fired / sizeof(long)), "fired[] holds every rule");

/* A list like "rollback, lower_lr" as TRAIN_MONITOR_* bits; -1 with why. */
static int monitor_parse_actions(const char *key, const char *text, char *why, size_t len)
{
    int bits = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '+') p++;
        size_t n = strcspn(p, " ,+");
        if (!n) break;
        int a = 0;
        while (a < MONITOR_NACTIONS && (strlen(monitor_action_names[a]) != n || memcmp(p, monitor_action_names[a], n)))
            a++;
        if (a == MONITOR_NACTIONS) {
            snprintf(why, len, "%s = '%s': unknown action '%.*s' (a list of: %s)", key, text, (int)(n < 40 ? n : 40), p,
                     MONITOR_ACTION_LIST);
            return -1;
        }
        bits |= 1 << a;
        p += n;
    }
    if (!bits) {
        snprintf(why, len, "%s is empty: give at least one action (%s)", key, MONITOR_ACTION_LIST);
        return -1;
    }
    return bits;
}

int train_monitor_check(const config *cfg, char *why, size_t len)
{
    for (int k = 0; k < MONITOR_NRULES; k++)
        if (monitor_parse_actions(monitor_rules[k].action_key, config_str(cfg, monitor_rules[k].action_key), why,
                                  len) < 0)
            return -1;
    return 0;
}

static int monitor_actions(const train_run *r, monitor_rule k)
{
    char why[256];
    int bits = monitor_parse_actions(monitor_rules[k].action_key, config_str(r->cfg, monitor_rules[k].action_key),
                                     why, sizeof why);
    return bits < 0 ? TRAIN_MONITOR_LOG : bits;  /* checked at setup and by every reload */
}

status train_monitor_setup(train_run *r)
{
    char why[320];
    if (train_monitor_check(r->cfg, why, sizeof why) != 0) {
        log_error0("%s", why);
        return STATUS_INPUT;
    }
    if (config_int(r->cfg, "monitor.stagnation_patience") > 0 && !config_str(r->cfg, "data.val")[0]) {
        log_error0("monitor.stagnation_patience = %" PRId64 " watches the held-out loss, but data.val is empty\n"
                   "HINT: set data.val (and train.eval_interval), or monitor.stagnation_patience = 0",
                   config_int(r->cfg, "monitor.stagnation_patience"));
        return STATUS_INPUT;
    }
    memset(&r->mon, 0, sizeof r->mon);
    r->mon.ck.lr_scale = 1.0;
    r->mon.best_eval = INFINITY;
    r->mon.floor = LONG_MAX;
    return STATUS_OK;
}

static int monitor_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double monitor_median(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    qsort(scratch, (size_t)n, sizeof *scratch, monitor_cmp);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

static void monitor_push(double *ring, int *count, int *at, int window, double v)
{
    if (*count > window) *count = window;  /* a reload shortened the window */
    if (*at >= window) *at = 0;
    ring[(*at)++] = v;
    if (*count < window) (*count)++;
}

/* This rank's resident set in bytes (0 when /proc cannot tell). */
/* Rank 0: one fired rule, its record and line. */
typedef struct monitor_fire {
    int actions;               /* TRAIN_MONITOR_* bits of everything fired */
} monitor_fire;

static void monitor_fire_rule(train_run *r, monitor_fire *f, monitor_rule k, double value, double threshold,
                              const char *what)
{
    int bits = monitor_actions(r, k);
    f->actions |= bits;
    if (k == MONITOR_RULE_EXPLOSION || k == MONITOR_RULE_NONFINITE) f->actions |= TRAIN_MONITOR_SUSPECT;
    if (k == MONITOR_RULE_MEMORY) f->actions |= TRAIN_MONITOR_REBASE_RSS;
    r->mon.fired[k] = r->mon.ticks;
    json_t *acts = json_array();
    char list[128] = "";
    for (int a = 0; a < MONITOR_NACTIONS; a++) {
        if (!(bits & (1 << a))) continue;
        json_array_append_new(acts, json_string(monitor_action_names[a]));
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", monitor_action_names[a]);
    }
    printf("alert step=%ld rule=%s: %s; actions: %s\n", r->step, monitor_rules[k].name, what, list);
    fflush(stdout);
    train_metrics_write(r, json_pack("{s:s, s:I, s:s, s:o, s:o, s:s, s:o}", "kind", "alert", "step",
                                     (json_int_t)r->step, "rule", monitor_rules[k].name, "value",
                                     train_json_num(value), "threshold", train_json_num(threshold), "reason", what,
                                     "actions", acts));
}

/* Whether rule k may fire now (monitor.cooldown since it last did). */
static bool monitor_ready(const train_run *r, monitor_rule k)
{
    long cool = (long)config_int(r->cfg, "monitor.cooldown");
    return !r->mon.fired[k] || r->mon.ticks - r->mon.fired[k] >= cool;
}

/* Rank 0: the rules on the step's global figures. */
static int monitor_decide(train_run *r, const train_step_stats *ss, double units, const double stall[2])
{
    train_monitor *m = &r->mon;
    const config *cfg = r->cfg;
    monitor_fire f = { 0 };
    char what[256];
    int window = (int)config_int(cfg, "monitor.window");
    double scratch[TRAIN_MONITOR_WINDOW_MAX], dev[TRAIN_MONITOR_WINDOW_MAX];
    bool finite = isfinite(ss->loss) && (isfinite(ss->gnorm) || r->dgc);
    if (m->nonfinite_due) {
        m->nonfinite_due = false;
        snprintf(what, sizeof what, "%ld step(s) in a row skipped for a non-finite loss or gradient (more than "
                 "train.max_skipped_steps = %" PRId64 ")", r->skipped_in_a_row, config_int(cfg, "train.max_skipped_steps"));
        monitor_fire_rule(r, &f, MONITOR_RULE_NONFINITE, (double)r->skipped_in_a_row,
                          (double)config_int(cfg, "train.max_skipped_steps"), what);
    }
    double thr = config_float(cfg, "monitor.explosion");
    if (thr > 0 && isfinite(ss->gnorm) && ss->gnorm > thr && monitor_ready(r, MONITOR_RULE_EXPLOSION)) {
        snprintf(what, sizeof what, "gradient norm %.6g above monitor.explosion = %g", ss->gnorm, thr);
        monitor_fire_rule(r, &f, MONITOR_RULE_EXPLOSION, ss->gnorm, thr, what);
    }
    thr = config_float(cfg, "monitor.spike_z");
    if (finite && thr > 0 && m->nloss >= 8) {
        double med = monitor_median(m->loss, m->nloss, scratch);
        for (int i = 0; i < m->nloss; i++) dev[i] = fabs(m->loss[i] - med);
        double mad = monitor_median(dev, m->nloss, scratch);
        /* a flat history (a fixed batch at lr 0) has no spread: changes below 0.1% of
         * the loss are never a spike */
        double scale = fmax(1.4826 * mad, fmax(1e-3 * fabs(med), 1e-12)), z = (ss->loss - med) / scale;
        if (z > thr && monitor_ready(r, MONITOR_RULE_SPIKE)) {
            snprintf(what, sizeof what, "loss %.6g is %.1f robust standard deviations above the median %.6g of the "
                     "last %d steps (monitor.spike_z = %g)", ss->loss, z, med, m->nloss, thr);
            monitor_fire_rule(r, &f, MONITOR_RULE_SPIKE, z, thr, what);
        }
    }
    if (finite) monitor_push(m->loss, &m->nloss, &m->at_loss, window, ss->loss);
    long patience = (long)config_int(cfg, "monitor.stagnation_patience");
    if (m->eval_new) {
        m->eval_new = false;
        if (m->last_eval < m->best_eval - config_float(cfg, "monitor.stagnation_min_delta")) {
            m->best_eval = m->last_eval;
            m->evals_since_best = 0;
        } else if (patience > 0 && ++m->evals_since_best >= patience) {
            snprintf(what, sizeof what, "no held-out loss better than %.6g by monitor.stagnation_min_delta = %g in "
                     "%d evaluations (monitor.stagnation_patience = %ld)", m->best_eval,
                     config_float(cfg, "monitor.stagnation_min_delta"), m->evals_since_best, patience);
            monitor_fire_rule(r, &f, MONITOR_RULE_STAGNATION, m->last_eval, m->best_eval, what);
            m->evals_since_best = 0;
        }
    }
    double rate = ss->step_ms > 0 ? units / (ss->step_ms / 1e3) : 0;
    thr = config_float(cfg, "monitor.throughput_drop");
    if (m->ticks > 2 && rate > 0) {  /* the first steps of a launch warm caches up */
        double med = m->nrate >= 8 ? monitor_median(m->rate, m->nrate, scratch) : 0;
        m->slow_in_a_row = thr > 0 && med > 0 && rate < thr * med ? m->slow_in_a_row + 1 : 0;
        if (m->slow_in_a_row >= 3 && monitor_ready(r, MONITOR_RULE_THROUGHPUT)) {
            const char *unit;
            train_units(r, &unit);
            snprintf(what, sizeof what, "throughput %.4g %s, 3 steps in a row below monitor.throughput_drop = %g of "
                     "the median %.4g %s of the last %d steps", rate, unit, thr, med, unit, m->nrate);
            monitor_fire_rule(r, &f, MONITOR_RULE_THROUGHPUT, rate, thr * med, what);
            m->slow_in_a_row = 0;
        }
        monitor_push(m->rate, &m->nrate, &m->at_rate, window, rate);
    }
    thr = config_float(cfg, "monitor.comm_stall");
    if (thr > 0 && stall[0] > thr && m->ticks > 2 && monitor_ready(r, MONITOR_RULE_COMM_STALL)) {
        snprintf(what, sizeof what, "a rank waited %.0f%% of the step for gradient communication (monitor.comm_stall "
                 "= %g)", 100 * stall[0], thr);
        monitor_fire_rule(r, &f, MONITOR_RULE_COMM_STALL, stall[0], thr, what);
    }
    thr = (double)config_size(cfg, "monitor.memory_growth");
    if (thr > 0 && stall[1] > thr && monitor_ready(r, MONITOR_RULE_MEMORY)) {
        snprintf(what, sizeof what, "a rank's resident set grew by %.1f MiB since the warm-up steps or the last "
                 "memory alert (monitor.memory_growth = %.1f MiB)", stall[1] / 1048576, thr / 1048576);
        monitor_fire_rule(r, &f, MONITOR_RULE_MEMORY, stall[1], thr, what);
    }
    return f.actions;
}

status train_monitor_step(train_run *r, const train_step_stats *ss, double units, int *actions)
{
    train_monitor *m = &r->mon;
    m->ticks++;
    *actions = 0;
    /* the per-rank figures, reduced only while a rule reads them (the config is the same
     * on every rank, so every rank joins or none) */
    double local[2] = { 0, 0 }, stall[2] = { 0, 0 };
    bool comm_rule = config_float(r->cfg, "monitor.comm_stall") > 0;
    bool mem_rule = config_size(r->cfg, "monitor.memory_growth") > 0;
    if (comm_rule || mem_rule) {
        if (comm_rule && ss->step_ms > 0) local[0] = ss->comm_wait_ms / ss->step_ms;
        if (mem_rule) {
            double rss = train_rss();
            if (m->ticks == 3 || m->rss0 == 0) m->rss0 = rss;  /* after the first steps' allocations */
            local[1] = rss - m->rss0;
        }
        comm_ctl ctl = train_ctl(r);
        ctl.name = "world (monitor)";
        TRY(comm_ctl_allreduce(ctl, local, stall, 2, MPI_DOUBLE, MPI_MAX));
    }
    if (r->rt->rank == 0) *actions = monitor_decide(r, ss, units, stall);
    return STATUS_OK;
}

void train_monitor_note_skip(train_run *r)
{
    r->mon.nonfinite_due = true;
}

bool train_monitor_guards_nonfinite(const train_run *r)
{
    return monitor_actions(r, MONITOR_RULE_NONFINITE) & (TRAIN_MONITOR_ROLLBACK | TRAIN_MONITOR_STOP);
}

status train_monitor_act(train_run *r, int actions)
{
    bool rank0 = r->rt->rank == 0;
    if (actions & TRAIN_MONITOR_REBASE_RSS) r->mon.rss0 = train_rss();  /* alert again on further growth only */
    if (actions & TRAIN_MONITOR_LOWER_LR) {
        double f = config_float(r->cfg, "monitor.lr_factor");
        r->mon.ck.lr_scale *= f;
        if (rank0) {
            printf("monitor: learning rate x %g: now %g of the schedule's\n", f, r->mon.ck.lr_scale);
            train_metrics_write(r, json_pack("{s:s, s:I, s:o, s:o}", "kind", "lower_lr", "step", (json_int_t)r->step,
                                             "factor", train_json_num(f), "lr_scale",
                                             train_json_num(r->mon.ck.lr_scale)));
        }
    }
    if ((actions & TRAIN_MONITOR_DISABLE_DGC) && r->dgc && dgc_active(r->dgc)) {
        r->dgc_flush = true;  /* the residuals go out with the next, dense step */
        dgc_set_active(r->dgc, false);
        if (rank0) printf("monitor: DGC-Pro switched off; the next step is dense\n");
    }
    if (actions & TRAIN_MONITOR_ROLLBACK) {
        long limit = (long)config_int(r->cfg, "monitor.max_rollbacks");
        if (r->mon.ck.rollbacks >= limit) {
            char why[256];
            snprintf(why, sizeof why, "an alert asked for a rollback, but the run took %" PRId64 " already "
                     "(monitor.max_rollbacks = %ld)", r->mon.ck.rollbacks, limit);
            return train_diverged(r, r->step, why);
        }
        TRY(train_rollback(r));
    }
    return STATUS_OK;
}
