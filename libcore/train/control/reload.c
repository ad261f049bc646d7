/* reload — hot reload of hyper-parameters (docs/monitor.md "Hot reload"): a person asks
 * a live run to change config keys with `nebula-train control RUN_DIR --set K=V ...`,
 * which writes RUN_DIR/reload/vNNNNNN.req atomically (version N: one more than any
 * request the directory has seen). Rank 0 looks for the next version at each step end;
 * the step-end agreement (loop.c) makes every rank take it at the same step; rank 0
 * checks it against the schema and the run (keys that cannot change live are refused
 * with the reason), every rank applies the same INI text to its copy of the config and
 * re-derives what was computed from it (optimizer, schedule, clipping, batch, DGC-Pro).
 * The request is answered by vN.applied or vN.rejected (the request plus the outcome),
 * recorded as a `reload` event, and the applied history is checkpointed (the blob
 * "reload"): a resume replays it, `--undo` restores what the newest change replaced.
 *
 * The one design decision: the run's config is a value replaced between steps, never a
 * set of side channels — a reload is exactly config_load_string of the request's
 * assignments (the same parser and checks as a config file), followed by the same
 * derivations train_setup makes, so a run changed live at step k continues bit for bit
 * as a run resumed from the step-k checkpoint with those keys set on the command line.
 * A change applied by a launch whose checkpoint was then lost is applied again at the
 * same step (vN.applied names it), so redone steps stay the steps they were. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "control.h"
#include "rules.h"

/* ---- which keys may change live ---- */

static const char *const reload_live_keys[] = {
    "optim.lr", "optim.weight_decay", "optim.beta1", "optim.beta2", "optim.eps", "optim.momentum",
    "optim.nesterov", "optim.schedule", "optim.warmup_steps", "optim.min_lr", "optim.step_size", "optim.gamma",
    "train.max_grad_norm", "train.steps", "train.global_batch", "train.accum", "train.log_interval", "train.eval_interval",
    "train.eval_batches", "train.max_skipped_steps", "ckpt.every_steps", "ckpt.every_minutes", "dgc.mode",
    "dgc.sparsity", "dgc.warmup_steps", "dgc.warmup_sparsity", "dgc.warmup_stages", "elastic.lr_rule",
};

const char *train_reload_live_list(void)
{
    return "optim.{lr, weight_decay, beta1, beta2, eps, momentum, nesterov, schedule, warmup_steps, min_lr, "
           "step_size, gamma}, train.{clip, steps, global_batch, accum, log_interval, eval_interval, eval_batches, "
           "max_skipped_steps}, ckpt.{every_steps, every_minutes}, dgc.{mode, sparsity, warmup_steps, "
           "warmup_sparsity, warmup_stages}, elastic.lr_rule, monitor.*";
}

const char *train_reload_refusal(const char *key)
{
    if (!strncmp(key, "monitor.", 8)) return NULL;
    for (size_t i = 0; i < sizeof reload_live_keys / sizeof reload_live_keys[0]; i++)
        if (!strcmp(key, reload_live_keys[i])) return NULL;
    if (!strncmp(key, "model.", 6))
        return "the model's shape is fixed when the run starts (its parameter table and buffers are laid out once); "
               "a model of another shape is another run";
    if (!strcmp(key, "train.micro_batch"))
        return "the activations are allocated for the micro-batch at start-up; change train.global_batch or "
               "train.accum instead";
    if (!strcmp(key, "train.seq_len"))
        return "the activations are allocated for the sequence length at start-up, and the data position counts "
               "samples of that length";
    if (!strcmp(key, "train.seed"))
        return "initialisation and the data order are functions of the seed; another seed is another run";
    if (!strcmp(key, "train.run_dir")) return "the run directory is where the run lives";
    if (!strcmp(key, "optim.name")) return "the optimizer's state (its moments) is laid out at start-up";
    if (!strncmp(key, "dgc.", 4))
        return "read when DGC-Pro is set up; its live keys are mode (on/off), sparsity and the warmup_* keys";
    if (!strncmp(key, "runtime.", 8) || !strncmp(key, "comm.", 5) || !strncmp(key, "device.", 7))
        return "placement, communicators and the device are fixed at launch";
    return "read once at start-up (buffers, threads, loaders or the checkpoint writer are laid out from it); "
           "relaunch with the new value, the run resumes from its checkpoint";
}

/* ---- the history: JSON text in the checkpointed blob ----
 * {"seen": N, "base": {KEY: VALUE, ...}, "entries": [{"version": V, "step": S, "undo_of": U,
 *  "undone": bool, "changes": [{"key": K, "old": O, "new": N}, ...]}, ...]}
 * "base" holds the net values of the oldest entries when the blob would overflow. */

static json_t *reload_history(const train_run *r)
{
    json_t *h = r->reload.blob[0] ? json_loads(r->reload.blob, 0, NULL) : NULL;
    if (!json_is_object(h)) {
        json_decref(h);
        h = json_pack("{s:I, s:{}, s:[]}", "seen", (json_int_t)0, "base", "entries");
    }
    return h;
}

/* Into the blob; the oldest entries fold into "base" while it does not fit. */
static void reload_history_store(train_run *r, json_t *h)
{
    for (;;) {
        char *text = json_dumps(h, JSON_COMPACT);
        size_t n = text ? strlen(text) : 0;
        json_t *entries = json_object_get(h, "entries");
        if (text && n < sizeof r->reload.blob) {
            memset(r->reload.blob, 0, sizeof r->reload.blob);
            memcpy(r->reload.blob, text, n);
            free(text);
            return;
        }
        free(text);
        CHECK(json_array_size(entries) > 0, "an empty history fits the reload blob");
        json_t *old = json_array_get(entries, 0), *base = json_object_get(h, "base"), *ch;
        size_t i;
        json_array_foreach(json_object_get(old, "changes"), i, ch)
            json_object_set(base, json_string_value(json_object_get(ch, "key")), json_object_get(ch, "new"));
        json_array_remove(entries, 0);
    }
}

/* ---- the request files ---- */

static void reload_path(const char *run_dir, long version, const char *suffix, char *path, size_t len)
{
    if (version > 0) snprintf(path, len, "%s/reload/v%06ld%s", run_dir, version, suffix);
    else snprintf(path, len, "%s/reload", run_dir);
}

/* The version and kind (0 req, 1 applied, 2 rejected) of a file name vNNNNNN.SUFFIX; -1 otherwise. */
static long reload_name(const char *name, int *kind)
{
    static const char *const suffix[] = { ".req", ".applied", ".rejected" };
    if (name[0] != 'v' || strlen(name) < 8) return -1;
    for (int i = 1; i <= 6; i++)
        if (name[i] < '0' || name[i] > '9') return -1;
    for (int k = 0; k < 3; k++)
        if (!strcmp(name + 7, suffix[k])) {
            *kind = k;
            return strtol(name + 1, NULL, 10);
        }
    return -1;
}

/* The lowest version above `above` with a file in RUN_DIR/reload (its best kind: a
 * request, else applied, else rejected), or 0; *highest: the highest of any. */
static long reload_scan(const char *run_dir, long above, int *kind, long *highest)
{
    char dir[4200];
    reload_path(run_dir, 0, "", dir, sizeof dir);
    *highest = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    long best = 0;
    int best_kind = 3;
    struct dirent *e;
    while ((e = readdir(d))) {
        int k;
        long v = reload_name(e->d_name, &k);
        if (v <= 0) continue;
        if (v > *highest) *highest = v;
        if (v <= above) continue;
        if (!best || v < best || (v == best && k < best_kind)) best = v, best_kind = k;
    }
    closedir(d);
    *kind = best_kind;
    return best;
}

/* A request or answer: a regular file of the run directory, never read through a link
 * (a link to /etc/shadow would otherwise be copied into the .rejected answer). */
static status reload_read(const char *path, char *text, size_t cap, size_t *n, char *why, size_t wlen)
{
    int fd;
    struct stat sb;
    if (path_open_own(path, &fd, &sb, cap - 1, why, wlen) != 0) return STATUS_INPUT;
    *n = (size_t)sb.st_size;
    int rc = path_read_all_at(fd, text, *n, 0);
    close(fd);
    if (rc != 0) {
        snprintf(why, wlen, "cannot be read: %s", errno ? strerror(errno) : "it shrank while being read");
        return STATUS_IO;
    }
    text[*n] = '\0';
    return STATUS_OK;
}

typedef struct reload_fill_ctx {
    const char *text;
} reload_fill_ctx;

static int reload_fill(void *ctx, int fd)
{
    const char *t = ((reload_fill_ctx *)ctx)->text;
    return path_write_all(fd, t, strlen(t));
}

/* The command's side: run_dir holds a run (base/path.h: its lock, metrics.jsonl or
 * heartbeat), or nothing is written there. */
static status reload_run_dir(const char *run_dir)
{
    struct stat st;
    int found = stat(run_dir, &st);
    if (found == 0 && S_ISDIR(st.st_mode) && path_is_run_dir(run_dir)) return STATUS_OK;
    log_error0("%s is not a run directory (%s)\nHINT: give the train.run_dir of a run that has started: a run "
               "creates its lock file there at start-up", run_dir,
               found != 0 ? strerror(errno) : !S_ISDIR(st.st_mode) ? path_kind(st.st_mode)
                                                                   : "no lock, metrics.jsonl or heartbeat: no run was started there");
    return STATUS_INPUT;
}

status train_reload_request_write(const char *run_dir, const train_reload_request *req, long *version)
{
    TRY(reload_run_dir(run_dir));
    char dir[4200], path[4300], tmp[4400];
    reload_path(run_dir, 0, "", dir, sizeof dir);
    TRY(path_mkdirs(dir, "reload request directory"));
    char body[TRAIN_CONTROL_MAX_BYTES];
    size_t n = 0;
    if (req->at_step >= 0) n += (size_t)snprintf(body + n, sizeof body - n, "at_step = %ld\n", req->at_step);
    if (req->undo) n += (size_t)snprintf(body + n, sizeof body - n, "undo = true\n");
    for (int i = 0; i < req->nsets && n < sizeof body; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s = %s\n", req->key[i], req->value[i]);
    if (n >= sizeof body - 64) {
        log_error0("the request is longer than %d bytes", TRAIN_CONTROL_MAX_BYTES - 64);
        return STATUS_INPUT;
    }
    /* the next free version: linked, never renamed, so two writers never share one */
    for (int tries = 0; tries < 1000; tries++) {
        int kind;
        long highest;
        reload_scan(run_dir, LONG_MAX, &kind, &highest);
        long v = highest + 1 + tries;
        if (v > TRAIN_RELOAD_MAX_VERSION) {
            log_error0("%s holds version %ld: no version is left\nHINT: start a new run directory", dir, highest);
            return STATUS_INPUT;
        }
        char text[TRAIN_CONTROL_MAX_BYTES + 128];
        snprintf(text, sizeof text, "# nebula-train control request\nversion = %ld\n%s", v, body);
        snprintf(tmp, sizeof tmp, "%s/.v%06ld.tmp.%ld", dir, v, (long)getpid());
        reload_fill_ctx ctx = { text };
        TRY(path_write_atomic(tmp, "reload request", reload_fill, &ctx));
        reload_path(run_dir, v, ".req", path, sizeof path);
        int rc = link(tmp, path), err = errno;
        unlink(tmp);
        if (rc == 0) {
            int dfd = open(dir, O_RDONLY | O_DIRECTORY);
            if (dfd >= 0) (void)fsync(dfd), close(dfd);
            *version = v;
            return STATUS_OK;
        }
        if (err != EEXIST) {
            log_error0("cannot create %s: %s", path, strerror(err));
            return STATUS_IO;
        }
    }
    log_error0("%s: no free version after 1000 tries", dir);
    return STATUS_IO;
}

int train_reload_outcome(const char *run_dir, long version, char *text, size_t cap)
{
    static const char *const suffix[] = { ".applied", ".rejected" };
    for (int k = 0; k < 2; k++) {
        char path[4300], why[256];
        size_t n;
        reload_path(run_dir, version, suffix[k], path, sizeof path);
        if (reload_read(path, text, cap, &n, why, sizeof why) == STATUS_OK) return k + 1;
    }
    return 0;
}

/* ---- the run's side ---- */

void train_reload_init(train_run *r)
{
    memset(&r->reload, 0, sizeof r->reload);
    json_t *h = reload_history(r);
    reload_history_store(r, h);
    json_decref(h);
}

bool train_reload_pending(train_run *r)
{
    char dir[4200];
    reload_path(r->run_dir, 0, "", dir, sizeof dir);
    struct stat st;
    if (stat(dir, &st) != 0) return false;
    long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    /* a request for a later step (at_step, or the step an earlier launch applied it at)
     * waits for it, holding back the versions after it */
    if (r->reload.wait_version) return r->step >= r->reload.wait_step;
    /* one stat a step; the directory is read when it changed (and every 50 steps, for file
     * systems with coarse times) */
    if (mt == r->reload.dir_mtime_ns && r->step % 50 != 0) return false;
    r->reload.dir_mtime_ns = mt;
    int kind;
    long highest, v = reload_scan(r->run_dir, r->reload.seen, &kind, &highest);
    if (!v) return false;
    if (kind == 2) return true;  /* refused by an earlier launch: the version is spent */
    char path[4300], text[TRAIN_CONTROL_MAX_BYTES + 1], why[256];
    size_t n;
    reload_path(r->run_dir, v, kind == 0 ? ".req" : ".applied", path, sizeof path);
    train_reload_request q;
    int line;
    if (reload_read(path, text, sizeof text, &n, why, sizeof why) != STATUS_OK ||
        train_reload_parse(text, n, &q, &line, why, sizeof why) != 0)
        return true;  /* train_reload_take refuses it, saying why */
    long at = kind == 1 ? q.applied_step : q.at_step;
    if (at < 0 || r->step >= at) return true;
    r->reload.wait_version = v;
    r->reload.wait_step = at;
    return false;
}

/* What rank 0 decided, the same bytes on every rank. */
typedef enum reload_action {
    RELOAD_ACTION_NONE = 0,    /* nothing (the file vanished) */
    RELOAD_ACTION_APPLY,       /* apply ini from the next step */
    RELOAD_ACTION_SKIP,        /* version decided without a change (refused, or refused before) */
} reload_action;

typedef struct reload_decision {
    int32_t action;            /* reload_action */
    int32_t version;
    int32_t undo_of;           /* the version an undo restores the values before, 0 otherwise */
    int32_t again;             /* applied by an earlier launch, applied again at its step */
    int32_t late;              /* 1 + the at_step the request asked for, when the run was past it */
    char ini[TRAIN_CONTROL_MAX_BYTES]; /* the assignments as INI text */
} reload_decision;

/* Rank 0: does the config s (the run's with the request applied) fit the run? 0, or -1 with why. */
static int reload_fits(const train_run *r, const config *s, char *why, size_t len)
{
    lr_schedule sc;
    train_schedule_from_config(&sc, s);
    const char *bad = NULL;
    if (!lr_schedule_valid(&sc, &bad)) return snprintf(why, len, "the learning-rate schedule is not usable: %s", bad), -1;
    if (config_bool(s, "optim.nesterov") && config_float(s, "optim.momentum") == 0)
        return snprintf(why, len, "optim.nesterov = true needs optim.momentum > 0"), -1;
    if (train_alert_check(s, why, len) != 0) return -1;
    if (config_int(s, "monitor.stagnation_patience") > 0 && !config_str(s, "data.val")[0])
        return snprintf(why, len, "monitor.stagnation_patience watches the held-out loss, but the run has no data.val"),
               -1;
    if (config_int(s, "train.steps") < r->step)
        return snprintf(why, len, "train.steps = %" PRId64 " is below the step the run is at (%ld)",
                        config_int(s, "train.steps"), r->step), -1;
    if (config_int(s, "train.global_batch") != config_int(r->cfg, "train.global_batch") ||
        config_int(s, "train.accum") != config_int(r->cfg, "train.accum")) {
        train_batch tb;
        log_capture(why, len);
        status st = train_batch_resolve(&tb, s, r->rt->size);
        log_capture(NULL, 0);
        if (st != STATUS_OK) return -1;
        if (tb.micro_batch != r->tb.micro_batch)
            return snprintf(why, len, "the batch keys resolve to micro-batch %d, but the run's is %d (allocated at "
                            "start-up): give train.global_batch as a multiple of %d x %d ranks", tb.micro_batch,
                            r->tb.micro_batch, r->tb.micro_batch, r->rt->size), -1;
        if (data_get_format(r->train_data) != DATA_FORMAT_SYNTHETIC && (uint64_t)tb.global_batch > data_samples(r->train_data))
            return snprintf(why, len, "global batch %d exceeds the %" PRIu64 " samples of data.train", tb.global_batch,
                            data_samples(r->train_data)), -1;
    }
    if (!r->ckpt && (config_int(s, "ckpt.every_steps") > 0 || config_float(s, "ckpt.every_minutes") > 0))
        return snprintf(why, len, "checkpoints were off when the run started (ckpt.every_steps and ckpt.every_minutes "
                        "= 0), so it has no checkpoint writer; relaunch with them set"), -1;
    const char *was = config_str(r->cfg, "dgc.mode"), *now = config_str(s, "dgc.mode");
    if (strcmp(was, now) != 0) {
        if (!strcmp(now, "auto"))
            return snprintf(why, len, "dgc.mode = auto decides in the first steps of a fresh run; live, choose on or off"),
                   -1;
        if (!r->dgc)
            return snprintf(why, len, "dgc.mode = %s: DGC-Pro was not set up when the run started (dgc.mode = %s%s), so "
                            "its residuals and checkpoint state do not exist; relaunch with dgc.mode = %s", now, was,
                            !strcmp(was, "off") ? "" : ", ruled out at setup", now), -1;
    }
    if (r->dgc && (config_float(s, "optim.momentum") == 0) != (config_float(r->cfg, "optim.momentum") == 0))
        return snprintf(why, len, "optim.momentum to or from 0 with DGC-Pro: its momentum correction keeps a velocity "
                        "only when momentum > 0 (laid out at start-up)"), -1;
    return 0;
}

/* Rank 0: the request's assignments as d->ini, checked; 0, or -1 with why. An undo
 * becomes the old values of the newest change not undone. */
static int reload_plan(train_run *r, const train_reload_request *q, reload_decision *d, char *why, size_t len)
{
    if (q->undo) {
        json_t *h = reload_history(r), *entries = json_object_get(h, "entries"), *target = NULL;
        for (size_t i = json_array_size(entries); i-- > 0 && !target;) {
            json_t *e = json_array_get(entries, i);
            if (!json_integer_value(json_object_get(e, "undo_of")) && !json_is_true(json_object_get(e, "undone")))
                target = e;
        }
        if (!target) {
            json_decref(h);
            return snprintf(why, len, "nothing to undo: every change in the run's history is undone already (or "
                            "none was made)"), -1;
        }
        d->undo_of = (int32_t)json_integer_value(json_object_get(target, "version"));
        json_t *ch;
        size_t i;
        json_array_foreach(json_object_get(target, "changes"), i, ch)
            if (train_reload_ini_add(d->ini, sizeof d->ini, json_string_value(json_object_get(ch, "key")),
                               json_string_value(json_object_get(ch, "old"))) != 0) {
                json_decref(h);
                return snprintf(why, len, "the undo does not fit a request"), -1;
            }
        json_decref(h);
    }
    for (int i = 0; i < q->nsets; i++) {
        const char *no = train_reload_refusal(q->key[i]);
        if (no) return snprintf(why, len, "%s cannot change while the run lives: %s", q->key[i], no), -1;
        if (train_reload_ini_add(d->ini, sizeof d->ini, q->key[i], q->value[i]) != 0)
            return snprintf(why, len, "the request does not fit %zu bytes", sizeof d->ini), -1;
    }
    /* a batch size alone keeps the micro-batch (the activations are sized for it): the
     * other of accumulation and global batch is derived */
    bool gb = false, acc = false, micro = false;
    for (int i = 0; i < q->nsets; i++) {
        gb |= !strcmp(q->key[i], "train.global_batch");
        acc |= !strcmp(q->key[i], "train.accum");
        micro |= !strcmp(q->key[i], "train.micro_batch");
    }
    if ((gb != acc) && !micro) {
        char m[32];
        snprintf(m, sizeof m, "%d", r->tb.micro_batch);
        if (train_reload_ini_add(d->ini, sizeof d->ini, "train.micro_batch", m) != 0 ||
            train_reload_ini_add(d->ini, sizeof d->ini, gb ? "train.accum" : "train.global_batch", "0") != 0)
            return snprintf(why, len, "the request does not fit %zu bytes", sizeof d->ini), -1;
    }
    config *s = malloc(sizeof *s);
    if (!s) return snprintf(why, len, "out of memory for a copy of the config"), -1;
    *s = *r->cfg;
    char name[64];
    snprintf(name, sizeof name, "reload v%d", d->version);
    log_capture(why, len);
    status st = config_load_string(s, d->ini, name);
    log_capture(NULL, 0);
    int rc = st == STATUS_OK ? reload_fits(r, s, why, len) : -1;
    free(s);
    return rc;
}

/* Every rank: what was computed from the config at setup, again from r->cfg. resuming:
 * the checkpoint's elastic state (loaded already, applied next by train_elastic_resume)
 * decides the batch in force; only the configured batch it is relative to changes. */
static status reload_derive(train_run *r, bool resuming)
{
    const config *c = r->cfg;
    r->opt.adamw.beta1 = config_float(c, "optim.beta1");
    r->opt.adamw.beta2 = config_float(c, "optim.beta2");
    r->opt.adamw.eps = config_float(c, "optim.eps");
    r->opt.adamw.weight_decay = r->opt.sgd.weight_decay = config_float(c, "optim.weight_decay");
    r->opt.sgd.momentum = config_float(c, "optim.momentum");
    r->opt.sgd.nesterov = config_bool(c, "optim.nesterov");
    r->opt.clip = config_float(c, "train.max_grad_norm");
    r->steps = (long)config_int(c, "train.steps");
    train_schedule_from_config(&r->sched, c);
    if (r->dgc) {
        dgc_options o;
        train_dgc_options(r, &o);
        dgc_set_live(r->dgc, &o);
        bool on = !strcmp(config_str(c, "dgc.mode"), "on"), off = !strcmp(config_str(c, "dgc.mode"), "off");
        if (off && dgc_active(r->dgc)) {
            r->dgc_flush = true;  /* the residuals go out with the next, dense step */
            dgc_set_active(r->dgc, false);
        } else if (on && !dgc_active(r->dgc)) {
            dgc_set_active(r->dgc, true);
        }
    }
    train_batch tb;
    TRY(train_batch_resolve(&tb, c, r->rt->size));
    if (tb.global_batch != r->config_batch) {
        /* the reloaded batch is the configured one from here on: the rate is not rescaled
         * (the elastic control file's lr_rule does that; a reload sets optim.lr itself) */
        CHECK(tb.micro_batch == r->tb.micro_batch, "reload_fits keeps the micro-batch");
        r->config_batch = tb.global_batch;
        if (!resuming) TRY(train_elastic_set_batch(r, tb.global_batch, 1.0));
    }
    config_dump(c, r->config_text, sizeof r->config_text);
    return STATUS_OK;
}

/* Every rank: ini applied to the run's config; the changes (key, old, new) appended to
 * the history as version v. */
static status reload_apply(train_run *r, const char *ini, long v, long undo_of, json_t **changes_out)
{
    config *before = malloc(sizeof *before);
    if (!before) return STATUS_NOMEM;
    *before = r->live;
    char name[64];
    snprintf(name, sizeof name, "reload v%ld", v);
    status st = config_load_string(&r->live, ini, name);
    CHECK(st == STATUS_OK, "rank 0 checked the request with the same config and parser");
    json_t *changes = json_array();
    for (int k = 0; k < r->live.nkeys; k++) {
        if (!strcmp(before->values[k].text, r->live.values[k].text)) continue;
        char key[128];
        snprintf(key, sizeof key, "%s.%s", r->live.schema[k].section, r->live.schema[k].name);
        json_array_append_new(changes, json_pack("{s:s, s:s, s:s}", "key", key, "old", before->values[k].text, "new",
                                                 r->live.values[k].text));
    }
    free(before);
    st = reload_derive(r, false);
    json_t *h = reload_history(r), *entries = json_object_get(h, "entries");
    if (undo_of) {
        json_t *e;
        size_t i;
        json_array_foreach(entries, i, e)
            if (json_integer_value(json_object_get(e, "version")) == undo_of) json_object_set_new(e, "undone", json_true());
    }
    json_array_append_new(entries, json_pack("{s:I, s:I, s:I, s:b, s:O}", "version", (json_int_t)v, "step",
                                             (json_int_t)r->step, "undo_of", (json_int_t)undo_of, "undone", 0,
                                             "changes", changes));
    json_object_set_new(h, "seen", json_integer(v));
    reload_history_store(r, h);
    json_decref(h);
    r->reload.seen = v;
    *changes_out = changes;
    return st;
}

/* "optim.lr 0.001 -> 0.0003, ..." */
static void reload_describe(json_t *changes, char *out, size_t len)
{
    json_t *ch;
    size_t i, n = 0;
    out[0] = '\0';
    json_array_foreach(changes, i, ch) {
        int w = snprintf(out + n, len - n, "%s%s %s -> %s", i ? ", " : "", json_string_value(json_object_get(ch, "key")),
                         json_string_value(json_object_get(ch, "old")), json_string_value(json_object_get(ch, "new")));
        if (w < 0 || (size_t)w >= len - n) break;
        n += (size_t)w;
    }
    if (!json_array_size(changes)) snprintf(out, len, "no value changes");
}

/* Rank 0: the answer file (the request and its outcome), then the request out of the way. */
static void reload_answer(train_run *r, long v, const char *request, bool applied, const char *what)
{
    char path[4300], req[4300], text[TRAIN_CONTROL_MAX_BYTES * 2];
    reload_path(r->run_dir, v, applied ? ".applied" : ".rejected", path, sizeof path);
    int n = snprintf(text, sizeof text, "# nebula-train: %s at step %ld (launch %d): %s\n", applied ? "applied" : "refused",
                     r->step, r->launch, what);
    /* the request's own lines, without its comments and an earlier applied_step */
    for (const char *p = request; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        size_t len = strcspn(p, "\n");
        if (len == 0 || p[0] == '#' || !strncmp(p, "applied_step", 12) || !strncmp(p, "at_step", 7)) continue;
        if (n >= 0 && (size_t)n < sizeof text) n += snprintf(text + n, sizeof text - (size_t)n, "%.*s\n", (int)len, p);
    }
    if (applied && n >= 0 && (size_t)n < sizeof text) snprintf(text + n, sizeof text - (size_t)n, "applied_step = %ld\n", r->step);
    reload_fill_ctx ctx = { text };
    if (path_write_atomic(path, "reload answer", reload_fill, &ctx) != STATUS_OK)
        log_warn("the answer to reload v%ld was not written; the run goes on", v);
    reload_path(r->run_dir, v, ".req", req, sizeof req);
    if (unlink(req) != 0 && errno != ENOENT) log_warn("cannot remove %s: %s", req, strerror(errno));
}

/* Rank 0: the decision on the lowest pending version. */
static void reload_decide(train_run *r, reload_decision *d, char *request, size_t cap, char *why, size_t wlen)
{
    memset(d, 0, sizeof *d);
    request[0] = why[0] = '\0';
    int kind;
    long highest, v = reload_scan(r->run_dir, r->reload.seen, &kind, &highest);
    r->reload.wait_version = 0;
    if (!v) return;
    d->version = (int32_t)v;
    d->action = RELOAD_ACTION_SKIP;
    if (kind == 2) return;  /* refused by an earlier launch: stays refused */
    char path[4300];
    reload_path(r->run_dir, v, kind == 0 ? ".req" : ".applied", path, sizeof path);
    size_t n;
    train_reload_request q;
    int line = 0;
    if (reload_read(path, request, cap, &n, why, wlen) != STATUS_OK) {  /* the reason names the file */
        char reason[512];
        snprintf(reason, sizeof reason, "%s", why);
        if (snprintf(why, wlen, "%s %s", path, reason) >= (int)wlen) why[wlen - 1] = '\0';  /* cut at the end */
        request[0] = '\0';
        return;
    }
    if (train_reload_parse(request, n, &q, &line, why, wlen) != 0) {
        if (line > 0) {
            char w[512];
            snprintf(w, sizeof w, "line %d: %s", line, why);
            snprintf(why, wlen, "%s", w);
        }
        return;
    }
    if (q.version != v) {
        snprintf(why, wlen, "the file says version = %ld, its name %ld", q.version, v);
        return;
    }
    d->again = kind == 1;
    d->late = kind == 0 && q.at_step >= 0 && q.at_step < r->step ? (int32_t)q.at_step + 1 : 0;
    if (reload_plan(r, &q, d, why, wlen) != 0) return;
    d->action = RELOAD_ACTION_APPLY;
}

/* One version: rank 0 decides, every rank applies (or nobody). */
static status reload_take_one(train_run *r)
{
    reload_decision *d = malloc(sizeof *d);
    char *request = malloc(TRAIN_CONTROL_MAX_BYTES + 1), why[768] = "";
    status st = d && request ? STATUS_OK : STATUS_NOMEM;
    if (st == STATUS_OK && r->rt->rank == 0) reload_decide(r, d, request, TRAIN_CONTROL_MAX_BYTES + 1, why, sizeof why);
    if (st == STATUS_OK) st = comm_ctl_bcast_bytes(train_ctl(r), d, sizeof *d, 0);
    if (st != STATUS_OK || d->action == RELOAD_ACTION_NONE) goto free_buffers;
    bool rank0 = r->rt->rank == 0;
    if (d->action == RELOAD_ACTION_SKIP) {
        json_t *h = reload_history(r);
        json_object_set_new(h, "seen", json_integer(d->version));
        reload_history_store(r, h);
        json_decref(h);
        r->reload.seen = d->version;
        if (rank0 && why[0]) {  /* refused now (not before): answered, recorded */
            log_error("reload v%d refused at step %ld: %s; the run goes on unchanged", d->version, r->step, why);
            reload_answer(r, d->version, request, false, why);
            train_emit(r, json_pack("{s:s, s:I, s:i, s:b, s:s}", "kind", "reload", "step", (json_int_t)r->step,
                                             "version", d->version, "applied", 0, "reason", why));
        }
        goto free_buffers;
    }
    json_t *changes = NULL;
    st = reload_apply(r, d->ini, d->version, d->undo_of, &changes);
    if (rank0) {
        char what[2048];
        reload_describe(changes, what, sizeof what);
        char undo[64] = "";
        if (d->undo_of) snprintf(undo, sizeof undo, " (undoes v%d)", d->undo_of);
        char late[96] = "";
        if (d->late) snprintf(late, sizeof late, " (asked for step %d: the run was past it when it saw the request)",
                              d->late - 1);
        printf("reload v%d at step %ld%s%s%s: %s\n", d->version, r->step, undo,
               d->again ? " (applied again: the launch that applied it first lost its state since)" : "", late, what);
        fflush(stdout);
        reload_answer(r, d->version, request, true, what);
        train_emit(r, json_pack("{s:s, s:I, s:i, s:b, s:O, s:o, s:b}", "kind", "reload", "step",
                                         (json_int_t)r->step, "version", d->version, "applied", 1, "changes", changes,
                                         "undo_of", d->undo_of ? json_integer(d->undo_of) : json_null(), "again",
                                         d->again));
        train_rundir_write_config(r);
    }
    json_decref(changes);
free_buffers:
    free(d), free(request);
    return st;
}

status train_reload_resume(train_run *r, const ckpt_content *c)
{
    const ckpt_blob *b = train_ckpt_blob(c, TRAIN_CKPT_RELOAD);
    CHECK(b, "train_ckpt_content lists the reload blob");
    if (!b->loaded || !r->reload.blob[0]) {  /* older than hot reload: no history */
        train_reload_init(r);
        return STATUS_OK;
    }
    r->reload.blob[sizeof r->reload.blob - 1] = '\0';
    /* the net values, in order: the folded base, then every entry (the load's value check
     * ran the same parse: a history refused here was not checked, e.g. loaded elsewhere) */
    char ini[TRAIN_CONTROL_MAX_BYTES * 4], why[512];
    if (train_reload_history_parse(r->reload.blob, &r->reload.seen, ini, sizeof ini, why, sizeof why) != 0) {
        log_error0("the checkpoint's reload history %s", why);
        return STATUS_CORRUPT;
    }
    if (!ini[0]) return STATUS_OK;
    /* one key at a time: later values win, as they did in the run */
    config *before = malloc(sizeof *before);
    if (!before) return STATUS_NOMEM;
    *before = r->live;
    if (train_reload_history_apply(&r->live, ini, false, why, sizeof why) != 0) {
        free(before);
        return STATUS_CORRUPT;
    }
    if (r->rt->rank == 0) {
        char line[2048] = "";
        size_t n = 0;
        for (int k = 0; k < r->live.nkeys; k++) {
            if (!strcmp(before->values[k].text, r->live.values[k].text)) continue;
            const config_key *ck = &r->live.schema[k];
            n += (size_t)snprintf(line + n, n < sizeof line ? sizeof line - n : 0, "%s%s.%s = %s", n ? ", " : "",
                                  ck->section, ck->name, r->live.values[k].text);
            if (strcmp(before->values[k].origin, "default") != 0)
                log_warn0("%s.%s = %s (%s) is replaced by the value a hot reload set before the checkpoint (%s)\n"
                          "HINT: change it in the live run with nebula-train control %s --set %s.%s=...", ck->section,
                          ck->name, before->values[k].text, before->values[k].origin, r->live.values[k].text,
                          r->run_dir, ck->section, ck->name);
        }
        if (n) printf("reload: the checkpoint's history (up to v%ld) continues: %s\n", r->reload.seen, line);
    }
    free(before);
    return reload_derive(r, true);
}

static int reload_cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int train_reload_list(const char *run_dir, FILE *f)
{
    if (reload_run_dir(run_dir) != STATUS_OK) return -1;
    char dir[4200];
    reload_path(run_dir, 0, "", dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(f, "%s: no hot-reload request yet\n", dir);
        return 0;
    }
    long v[1024];
    int n = 0, kind;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024) {
        long x = reload_name(e->d_name, &kind);
        if (x > 0) v[n++] = x;  /* a version may have two files: deduplicated after the sort */
    }
    closedir(d);
    qsort(v, (size_t)n, sizeof *v, reload_cmp_long);
    for (int i = 0; i < n; i++) {
        if (i && v[i] == v[i - 1]) continue;
        char text[TRAIN_CONTROL_MAX_BYTES * 2 + 1], path[4300], why[256];
        size_t len;
        int got = train_reload_outcome(run_dir, v[i], text, sizeof text);
        if (!got) {
            reload_path(run_dir, v[i], ".req", path, sizeof path);
            if (reload_read(path, text, sizeof text, &len, why, sizeof why) != STATUS_OK) continue;
        }
        /* the answer's first line says what happened; the request's lines follow */
        fprintf(f, "v%ld %s\n", v[i], got == 1 ? "applied" : got == 2 ? "refused" : "pending (the run has not read it yet)");
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (!strncmp(line, "version", 7) || !strncmp(line, "# nebula-train control request", 30)) continue;
            fprintf(f, "    %s\n", !strncmp(line, "# nebula-train: ", 16) ? line + 16 : line);
        }
    }
    return n;
}

status train_reload_take(train_run *r)
{
    /* every version pending now, in order (a queue of requests takes one step end) */
    for (int k = 0; k < TRAIN_RELOAD_MAX_SETS; k++) {
        TRY(reload_take_one(r));
        int more = r->rt->rank == 0 && train_reload_pending(r);
        TRY(comm_ctl_bcast(train_ctl(r), &more, 1, MPI_INT, 0));
        if (!more) break;
    }
    return STATUS_OK;
}
