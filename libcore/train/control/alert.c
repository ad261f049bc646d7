/* alert — the alert rules over each step's global figures (the [monitor] keys), and the
 * actions they take (docs/monitor.md). Rules: gradient explosion (norm above monitor.explosion),
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

#include "rules.h"

/* The rules' state (r->alert; the checkpointed part is r->alert_ck): windows of the
 * step's global figures, and the rules' own state. Every rank keeps it, so every rank could decide; rank 0 does. */
struct train_alert {
    double loss[TRAIN_ALERT_WINDOW_MAX]; /* ring: the losses of the last applied steps */
    double rate[TRAIN_ALERT_WINDOW_MAX]; /* ring: the throughput of the last steps (units/s) */
    int nloss, nrate;          /* entries held (at most monitor.window) */
    int at_loss, at_rate;      /* next slot to write */
    int slow_in_a_row;         /* steps in a row below monitor.throughput_drop x the median */
    double best_eval;          /* the best held-out loss so far (INFINITY before the first) */
    int evals_since_best;      /* evaluations since it improved by more than monitor.stagnation_min_delta */
    double rss0;               /* this rank's resident set (bytes) after the warm-up steps or the last memory alert */
    long fired[8];             /* the tick each rule last fired, for monitor.cooldown (0: never) */
    bool nonfinite_due;        /* train_skip: more than train.max_skipped_steps skipped in a row */
    long floor;                /* a rollback goes to a checkpoint older than this step (LONG_MAX: any) */
};

static const char *const alert_action_names[] = { "log", "checkpoint", "stop", "lower_lr", "rollback",
                                                    "disable_dgc" };
#define ALERT_NACTIONS 6
#define ALERT_ACTION_LIST "log, checkpoint, stop, lower_lr, rollback, disable_dgc"

typedef enum alert_rule {
    ALERT_RULE_EXPLOSION = 0,
    ALERT_RULE_NONFINITE,
    ALERT_RULE_SPIKE,
    ALERT_RULE_STAGNATION,
    ALERT_RULE_THROUGHPUT,
    ALERT_RULE_COMM_STALL,
    ALERT_RULE_MEMORY,
    ALERT_NRULES
} alert_rule;

/* Each rule's name (in records) and the key of its actions. */
static const struct {
    const char *name, *action_key;
} alert_rules[ALERT_NRULES] = {
    { "explosion", "monitor.explosion_action" },     { "nonfinite", "monitor.nonfinite_action" },
    { "spike", "monitor.spike_action" },             { "stagnation", "monitor.stagnation_action" },
    { "throughput", "monitor.throughput_drop_action" },   { "comm_stall", "monitor.comm_stall_action" },
    { "memory", "monitor.memory_growth_action" },
};

_Static_assert(ALERT_NRULES <= (int)(sizeof ((train_alert *)0)->fired / sizeof(long)), "fired[] holds every rule");

/* A list like "rollback, lower_lr" as TRAIN_ALERT_* bits; -1 with why. */
static int alert_parse_actions(const char *key, const char *text, char *why, size_t len)
{
    int bits = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '+') p++;
        size_t n = strcspn(p, " ,+");
        if (!n) break;
        int a = 0;
        while (a < ALERT_NACTIONS && (strlen(alert_action_names[a]) != n || memcmp(p, alert_action_names[a], n)))
            a++;
        if (a == ALERT_NACTIONS) {
            snprintf(why, len, "%s = '%s': unknown action '%.*s' (a list of: %s)", key, text, (int)(n < 40 ? n : 40), p,
                     ALERT_ACTION_LIST);
            return -1;
        }
        bits |= 1 << a;
        p += n;
    }
    if (!bits) {
        snprintf(why, len, "%s is empty: give at least one action (%s)", key, ALERT_ACTION_LIST);
        return -1;
    }
    return bits;
}

int train_alert_check(const config *cfg, char *why, size_t len)
{
    for (int k = 0; k < ALERT_NRULES; k++)
        if (alert_parse_actions(alert_rules[k].action_key, config_str(cfg, alert_rules[k].action_key), why,
                                  len) < 0)
            return -1;
    return 0;
}

static int alert_actions(const train_run *r, alert_rule k)
{
    char why[256];
    int bits = alert_parse_actions(alert_rules[k].action_key, config_str(r->cfg, alert_rules[k].action_key),
                                     why, sizeof why);
    return bits < 0 ? TRAIN_ALERT_LOG : bits;  /* checked at setup and by every reload */
}

status train_alert_setup(train_run *r)
{
    char why[320];
    if (train_alert_check(r->cfg, why, sizeof why) != 0) {
        log_error0("%s", why);
        return STATUS_INPUT;
    }
    if (config_int(r->cfg, "monitor.stagnation_patience") > 0 && !config_str(r->cfg, "data.val")[0]) {
        log_error0("monitor.stagnation_patience = %" PRId64 " watches the held-out loss, but data.val is empty\n"
                   "HINT: set data.val (and train.eval_interval), or monitor.stagnation_patience = 0",
                   config_int(r->cfg, "monitor.stagnation_patience"));
        return STATUS_INPUT;
    }
    r->alert = calloc(1, sizeof *r->alert);
    if (!r->alert) return STATUS_NOMEM;
    r->alert_ck = (train_alert_ckpt){ .lr_scale = 1.0 };
    r->alert->best_eval = INFINITY;
    r->alert->floor = LONG_MAX;
    return STATUS_OK;
}

void train_alert_free(train_run *r)
{
    free(r->alert);
    r->alert = NULL;
}

long train_alert_floor(const train_run *r)
{
    return r->alert->floor;
}

void train_alert_saved(train_run *r)
{
    if (r->step > r->alert->floor) r->alert->floor = LONG_MAX;  /* a newer state to roll back to */
}

void train_alert_rolled_back(train_run *r, long at)
{
    train_alert *m = r->alert;
    m->floor = at;  /* another alert before a newer commit goes further back */
    memset(m->fired, 0, sizeof m->fired);  /* from here on the rules watch a new trajectory */
    m->nloss = m->at_loss = m->slow_in_a_row = 0;
}

static int alert_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double alert_median(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    qsort(scratch, (size_t)n, sizeof *scratch, alert_cmp);
    return n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
}

static void alert_push(double *ring, int *count, int *at, int window, double v)
{
    if (*count > window) *count = window;  /* a reload shortened the window */
    if (*at >= window) *at = 0;
    ring[(*at)++] = v;
    if (*count < window) (*count)++;
}

/* This rank's resident set in bytes (0 when /proc cannot tell). */
/* Rank 0: one fired rule, its record and line. */
typedef struct alert_fire {
    int actions;               /* TRAIN_ALERT_* bits of everything fired */
} alert_fire;

static void alert_fire_rule(train_run *r, alert_fire *f, alert_rule k, double value, double threshold,
                              const char *what)
{
    int bits = alert_actions(r, k);
    f->actions |= bits;
    if (k == ALERT_RULE_EXPLOSION || k == ALERT_RULE_NONFINITE) f->actions |= TRAIN_ALERT_SUSPECT;
    if (k == ALERT_RULE_MEMORY) f->actions |= TRAIN_ALERT_REBASE_RSS;
    r->alert->fired[k] = r->ticks;
    json_t *acts = json_array();
    char list[128] = "";
    for (int a = 0; a < ALERT_NACTIONS; a++) {
        if (!(bits & (1 << a))) continue;
        json_array_append_new(acts, json_string(alert_action_names[a]));
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", alert_action_names[a]);
    }
    printf("alert step=%ld rule=%s: %s; actions: %s\n", r->step, alert_rules[k].name, what, list);
    fflush(stdout);
    train_emit(r, json_pack("{s:s, s:I, s:s, s:o, s:o, s:s, s:o}", "kind", "alert", "step",
                                     (json_int_t)r->step, "rule", alert_rules[k].name, "value",
                                     train_json_num(value), "threshold", train_json_num(threshold), "reason", what,
                                     "actions", acts));
}

/* Whether rule k may fire now (monitor.cooldown since it last did). */
static bool alert_ready(const train_run *r, alert_rule k)
{
    long cool = (long)config_int(r->cfg, "monitor.cooldown");
    return !r->alert->fired[k] || r->ticks - r->alert->fired[k] >= cool;
}

/* Rank 0: the rules on the step's global figures. */
static int alert_decide(train_run *r, const train_step_stats *ss, double units, const double stall[2])
{
    train_alert *m = r->alert;
    const config *cfg = r->cfg;
    alert_fire f = { 0 };
    char what[256];
    int window = (int)config_int(cfg, "monitor.window");
    double scratch[TRAIN_ALERT_WINDOW_MAX], dev[TRAIN_ALERT_WINDOW_MAX];
    bool finite = isfinite(ss->loss) && (isfinite(ss->gnorm) || r->dgc);
    if (m->nonfinite_due) {
        m->nonfinite_due = false;
        snprintf(what, sizeof what, "%ld step(s) in a row skipped for a non-finite loss or gradient (more than "
                 "train.max_skipped_steps = %" PRId64 ")", r->skipped_in_a_row, config_int(cfg, "train.max_skipped_steps"));
        alert_fire_rule(r, &f, ALERT_RULE_NONFINITE, (double)r->skipped_in_a_row,
                          (double)config_int(cfg, "train.max_skipped_steps"), what);
    }
    double thr = config_float(cfg, "monitor.explosion");
    if (thr > 0 && isfinite(ss->gnorm) && ss->gnorm > thr && alert_ready(r, ALERT_RULE_EXPLOSION)) {
        snprintf(what, sizeof what, "gradient norm %.6g above monitor.explosion = %g", ss->gnorm, thr);
        alert_fire_rule(r, &f, ALERT_RULE_EXPLOSION, ss->gnorm, thr, what);
    }
    thr = config_float(cfg, "monitor.spike_z");
    if (finite && thr > 0 && m->nloss >= 8) {
        double med = alert_median(m->loss, m->nloss, scratch);
        for (int i = 0; i < m->nloss; i++) dev[i] = fabs(m->loss[i] - med);
        double mad = alert_median(dev, m->nloss, scratch);
        /* a flat history (a fixed batch at lr 0) has no spread: changes below 0.1% of
         * the loss are never a spike */
        double scale = fmax(1.4826 * mad, fmax(1e-3 * fabs(med), 1e-12)), z = (ss->loss - med) / scale;
        if (z > thr && alert_ready(r, ALERT_RULE_SPIKE)) {
            snprintf(what, sizeof what, "loss %.6g is %.1f robust standard deviations above the median %.6g of the "
                     "last %d steps (monitor.spike_z = %g)", ss->loss, z, med, m->nloss, thr);
            alert_fire_rule(r, &f, ALERT_RULE_SPIKE, z, thr, what);
        }
    }
    if (finite) alert_push(m->loss, &m->nloss, &m->at_loss, window, ss->loss);
    long patience = (long)config_int(cfg, "monitor.stagnation_patience");
    if (r->eval_new) {
        r->eval_new = false;
        if (r->last_eval < m->best_eval - config_float(cfg, "monitor.stagnation_min_delta")) {
            m->best_eval = r->last_eval;
            m->evals_since_best = 0;
        } else if (patience > 0 && ++m->evals_since_best >= patience) {
            snprintf(what, sizeof what, "no held-out loss better than %.6g by monitor.stagnation_min_delta = %g in "
                     "%d evaluations (monitor.stagnation_patience = %ld)", m->best_eval,
                     config_float(cfg, "monitor.stagnation_min_delta"), m->evals_since_best, patience);
            alert_fire_rule(r, &f, ALERT_RULE_STAGNATION, r->last_eval, m->best_eval, what);
            m->evals_since_best = 0;
        }
    }
    double rate = ss->step_ms > 0 ? units / (ss->step_ms / 1e3) : 0;
    thr = config_float(cfg, "monitor.throughput_drop");
    if (r->ticks > 2 && rate > 0) {  /* the first steps of a launch warm caches up */
        double med = m->nrate >= 8 ? alert_median(m->rate, m->nrate, scratch) : 0;
        m->slow_in_a_row = thr > 0 && med > 0 && rate < thr * med ? m->slow_in_a_row + 1 : 0;
        if (m->slow_in_a_row >= 3 && alert_ready(r, ALERT_RULE_THROUGHPUT)) {
            const char *unit;
            train_units(r, &unit);
            snprintf(what, sizeof what, "throughput %.4g %s, 3 steps in a row below monitor.throughput_drop = %g of "
                     "the median %.4g %s of the last %d steps", rate, unit, thr, med, unit, m->nrate);
            alert_fire_rule(r, &f, ALERT_RULE_THROUGHPUT, rate, thr * med, what);
            m->slow_in_a_row = 0;
        }
        alert_push(m->rate, &m->nrate, &m->at_rate, window, rate);
    }
    thr = config_float(cfg, "monitor.comm_stall");
    if (thr > 0 && stall[0] > thr && r->ticks > 2 && alert_ready(r, ALERT_RULE_COMM_STALL)) {
        snprintf(what, sizeof what, "a rank waited %.0f%% of the step for gradient communication (monitor.comm_stall "
                 "= %g)", 100 * stall[0], thr);
        alert_fire_rule(r, &f, ALERT_RULE_COMM_STALL, stall[0], thr, what);
    }
    thr = (double)config_size(cfg, "monitor.memory_growth");
    if (thr > 0 && stall[1] > thr && alert_ready(r, ALERT_RULE_MEMORY)) {
        snprintf(what, sizeof what, "a rank's resident set grew by %.1f MiB since the warm-up steps or the last "
                 "memory alert (monitor.memory_growth = %.1f MiB)", stall[1] / 1048576, thr / 1048576);
        alert_fire_rule(r, &f, ALERT_RULE_MEMORY, stall[1], thr, what);
    }
    return f.actions;
}

status train_alert_step(train_run *r, const train_step_stats *ss, double units, int *actions)
{
    train_alert *m = r->alert;
    r->ticks++;
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
            if (r->ticks == 3 || m->rss0 == 0) m->rss0 = rss;  /* after the first steps' allocations */
            local[1] = rss - m->rss0;
        }
        comm_ctl ctl = train_ctl(r);
        ctl.name = "world (monitor)";
        TRY(comm_ctl_allreduce(ctl, local, stall, 2, MPI_DOUBLE, MPI_MAX));
    }
    if (r->rt->rank == 0) *actions = alert_decide(r, ss, units, stall);
    return STATUS_OK;
}

void train_alert_note_skip(train_run *r)
{
    r->alert->nonfinite_due = true;
}

bool train_alert_guards_nonfinite(const train_run *r)
{
    return alert_actions(r, ALERT_RULE_NONFINITE) & (TRAIN_ALERT_ROLLBACK | TRAIN_ALERT_STOP);
}

status train_alert_act(train_run *r, int actions)
{
    bool rank0 = r->rt->rank == 0;
    if (actions & TRAIN_ALERT_REBASE_RSS) r->alert->rss0 = train_rss();  /* alert again on further growth only */
    if (actions & TRAIN_ALERT_LOWER_LR) {
        double f = config_float(r->cfg, "monitor.lr_factor");
        r->alert_ck.lr_scale *= f;
        if (rank0) {
            printf("monitor: learning rate x %g: now %g of the schedule's\n", f, r->alert_ck.lr_scale);
            train_emit(r, json_pack("{s:s, s:I, s:o, s:o}", "kind", "lower_lr", "step", (json_int_t)r->step,
                                             "factor", train_json_num(f), "lr_scale",
                                             train_json_num(r->alert_ck.lr_scale)));
        }
    }
    if ((actions & TRAIN_ALERT_DISABLE_DGC) && r->dgc && dgc_active(r->dgc)) {
        r->dgc_flush = true;  /* the residuals go out with the next, dense step */
        dgc_set_active(r->dgc, false);
        if (rank0) printf("monitor: DGC-Pro switched off; the next step is dense\n");
    }
    if (actions & TRAIN_ALERT_ROLLBACK) {
        long limit = (long)config_int(r->cfg, "monitor.max_rollbacks");
        if (r->alert_ck.rollbacks >= limit) {
            char why[256];
            snprintf(why, sizeof why, "an alert asked for a rollback, but the run took %" PRId64 " already "
                     "(monitor.max_rollbacks = %ld)", r->alert_ck.rollbacks, limit);
            return train_diverged(r, r->step, why);
        }
        /* within the bound: the loop rolls back (train_rollback), as the action bit says */
    }
    return STATUS_OK;
}
