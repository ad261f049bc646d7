/* elastic — the trainer's side of a supervisor: the heartbeat it writes and the
 * control file it reads (README, "Elastic control and heartbeat").
 *
 * Heartbeat: rank 0 rewrites RUN_DIR/heartbeat in place before the first step and
 * after every step, one line of exactly TRAIN_HEARTBEAT_BYTES (128) bytes, space-padded
 * and ending in '\n':
 *     step=N steps=N time=SECONDS.MILLIS pid=N world=N global_batch=N
 * (time is the wall clock, CLOCK_REALTIME). A stale time means a frozen run.
 *
 * Control: RUN_DIR/control, key=value lines without sections, keys world,
 * global_batch and lr_rule (linear|sqrt|none; default elastic.lr_rule), parsed by
 * train_control_parse (control.h), read without blocking (path_open_regular: a FIFO,
 * a directory or a device there is rejected, not waited on). Rank 0 stats
 * it at each step end and train_loop's flag allreduce makes every rank agree,
 * so it is applied at a step boundary by all ranks at once, before that step's
 * checkpoint (a changed batch is part of the state saved). Rank 0 checks it against
 * the run; a file that fits is renamed control.applied, anything else (a bad line, a
 * batch that does not split into whole micro-batches) control.rejected with an error,
 * and the run goes on. A new world size cannot be applied in place: the run
 * checkpoints, writes RUN_DIR/relaunch ("world=N\nstep=N\n", atomically, after the
 * checkpoint committed) and exits with code 4 (STATUS_RELAUNCH); the supervisor
 * relaunches with N ranks, which resumes from that checkpoint. While steps are being
 * skipped for non-finite values no checkpoint is committed (diverge.c), so a new world
 * or grid waits, its file unretired, for the first step end that commits one.
 *
 * The design decision: the learning-rate factor is relative to the configured global
 * batch (train_elastic), not to the batch in force, so successive changes do not
 * compound and a return to the configured batch restores the configured rate; and
 * the training loader, which cannot change its batch, is reopened at the position the
 * old one reached, so the steps after a change read exactly what a run resumed from a
 * checkpoint at that step would. */
#include "rules.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "control.h"

/* Heartbeat: one line rewritten in place, the same length every time, so that a
 * reader never sees a shorter line with the tail of the previous one, and the write
 * is one pwrite into the page cache (no fsync: a supervisor that watches for a
 * frozen run needs freshness, not durability). */
#define TRAIN_HEARTBEAT_BYTES 128

status train_heartbeat_open(train_run *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/heartbeat", r->run_dir);
    char why[256];
    /* never through a link planted in the run dir, never blocking on a FIFO */
    if (path_create_regular(path, 0, 0644, &r->heartbeat_fd, why, sizeof why) != 0) {
        log_error("%s %s\nHINT: remove it; the run creates its heartbeat as a regular file", path, why);
        return STATUS_IO;
    }
    if (ftruncate(r->heartbeat_fd, TRAIN_HEARTBEAT_BYTES) != 0) {
        log_error("cannot size %s: %s", path, strerror(errno));
        close(r->heartbeat_fd);
        r->heartbeat_fd = -1;
        return STATUS_IO;
    }
    return STATUS_OK;
}

void train_heartbeat(train_run *r)
{
    if (r->heartbeat_fd < 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[TRAIN_HEARTBEAT_BYTES + 1];
    int n = snprintf(line, sizeof line, "step=%ld steps=%ld time=%lld.%03ld pid=%ld world=%d global_batch=%" PRId64,
                     r->step, r->steps, (long long)ts.tv_sec, ts.tv_nsec / 1000000, (long)getpid(), r->rt->size,
                     r->elastic.global_batch);
    CHECK(n > 0 && n < TRAIN_HEARTBEAT_BYTES, "the heartbeat fields fit TRAIN_HEARTBEAT_BYTES");
    memset(line + n, ' ', (size_t)(TRAIN_HEARTBEAT_BYTES - 1 - n));
    line[TRAIN_HEARTBEAT_BYTES - 1] = '\n';
    if (pwrite(r->heartbeat_fd, line, TRAIN_HEARTBEAT_BYTES, 0) != TRAIN_HEARTBEAT_BYTES) {
        /* training goes on: a supervisor then sees a stale heartbeat, which is the truth */
        log_warn("cannot write %s/heartbeat: %s; no more heartbeats from this run", r->run_dir, strerror(errno));
        close(r->heartbeat_fd);
        r->heartbeat_fd = -1;
    }
}

/* The global batch GB at the same micro-batch: accumulation, bucket averaging and the
 * loader follow (collective in effect: every rank calls it with the same values). The
 * loader cannot change its batch in place, so a new one opens at the position the old
 * one reached: the next step reads global samples [cursor, cursor + GB) of the same
 * epoch order, or starts the next epoch when fewer remain (data_set_state), exactly as
 * a run resumed from a checkpoint at this step does. */
status train_elastic_set_batch(train_run *r, int64_t gb, double lr_factor)
{
    int64_t per = (int64_t)r->tb.micro_batch * train_dp_size(r);
    CHECK(gb >= per && gb % per == 0, "callers check that the global batch splits into whole micro-batches");
    r->tb.global_batch = (int)gb;
    r->tb.accum = (int)(gb / per);
    r->elastic = (train_elastic){ gb, lr_factor };
    r->bm.scale = 1.0 / ((double)r->tb.accum * train_dp_size(r));  /* as bucket_init's: the mean over GB */
    data_loader *d = NULL;
    TRY(train_open_data(r, &d, config_str(r->cfg, "data.train"), true));
    status st = data_set_state(d, &r->loader_state);
    if (st != STATUS_OK) {
        data_free(d);
        return st;
    }
    data_free(r->train_data);
    r->train_data = d;
    return train_sched_reassign(r, "the global batch changed");
}

/* After a checkpoint load: the batch and learning-rate factor an elastic control file
 * set before it was written (their ranges checked by the load: train_ckpt_check_values).
 * Absent (an older checkpoint): the config's. */
status train_elastic_resume(train_run *r, const ckpt_content *c)
{
    const ckpt_blob *b = train_ckpt_blob(c, TRAIN_CKPT_ELASTIC);
    CHECK(b, "train_ckpt_content lists the elastic blob");
    if (!b->loaded) {
        r->elastic = (train_elastic){ r->config_batch, 1.0 };
        return STATUS_OK;
    }
    train_elastic e = r->elastic;
    int64_t per = (int64_t)r->tb.micro_batch * train_dp_size(r);
    if (e.global_batch % per != 0) {
        log_error0("the checkpoint's global batch %" PRId64 " (set by an elastic control file) is not a multiple of "
                   "train.micro_batch x ranks = %d x %d = %" PRId64 " of this run: relaunch with a number of ranks "
                   "that divides it, or set train.micro_batch", e.global_batch, r->tb.micro_batch, train_dp_size(r), per);
        return STATUS_INPUT;
    }
    if (e.global_batch != r->config_batch) TRY(train_elastic_set_batch(r, e.global_batch, e.lr_factor));
    if (r->rt->rank == 0 && (e.global_batch != r->config_batch || e.lr_factor != 1.0))
        printf("elastic: the checkpoint's global batch %" PRId64 " (config: %d) and lr x %.6g continue "
               "(accumulation %d)\n", e.global_batch, r->config_batch, e.lr_factor, r->tb.accum);
    return STATUS_OK;
}

/* Elastic control: RUN_DIR/control, written by a supervisor (nebula-chaos) or a
 * person, read by rank 0 at a step end and acted on by every rank (README,
 * "Elastic control and heartbeat"). A bad file never stops the run: it is renamed
 * control.rejected with an error naming the line. */

typedef enum train_control_action {
    TRAIN_CONTROL_ACTION_NONE = 0,   /* rejected, vanished, or nothing to change */
    TRAIN_CONTROL_ACTION_BATCH,      /* new global batch and/or lr factor from the next step */
    TRAIN_CONTROL_ACTION_RELAUNCH,   /* checkpoint, write RUN_DIR/relaunch, exit 4 */
    TRAIN_CONTROL_ACTION_REGRID,     /* checkpoint, set the run up again on another grid (same processes) */
} train_control_action;

/* Rank 0's decision, broadcast as bytes (every rank runs the same binary). */
typedef struct train_control_decision {
    int64_t global_batch;      /* GB from the next step (or for the relaunch) */
    double lr_factor;          /* relative to the config's lr, see train_elastic */
    int32_t action;            /* train_control_action */
    int32_t world;             /* ranks of the relaunch */
    int32_t tp, pp;            /* the new grid's (REGRID) */
    int32_t accepted;          /* the file parsed and fits this run: it becomes control.applied */
    char rule[8];              /* lr rule that produced lr_factor, for the log line */
} train_control_decision;

static void train_control_path(const train_run *r, const char *suffix, char *path, size_t len)
{
    snprintf(path, len, "%s/control%s", r->run_dir, suffix);
}

/* Per step on rank 0: one stat, nothing more unless the file is there. Anything of
 * that name counts (a directory, a FIFO): train_control_decide refuses it. */
bool train_control_exists(const train_run *r)
{
    char path[4200];
    struct stat st;
    train_control_path(r, "", path, sizeof path);
    if (lstat(path, &st) != 0) return false;
    return !(r->control_stuck_ino && (uint64_t)st.st_dev == r->control_stuck_dev &&
             (uint64_t)st.st_ino == r->control_stuck_ino);
}

/* Rank 0: the spent file out of the way (control.applied / control.rejected), so that
 * it acts once. Whatever is there may be in the way of the rename (a directory where a
 * file goes, or the reverse): then a name with the step, then removal; a file that
 * survives all three is remembered and ignored, with one error. */
static void train_control_retire(train_run *r, const char *suffix)
{
    char path[4200], to[4300];
    train_control_path(r, "", path, sizeof path);
    train_control_path(r, suffix, to, sizeof to);
    if (rename(path, to) == 0) return;
    int err = errno;
    snprintf(to + strlen(to), sizeof to - strlen(to), ".%ld", r->step);
    if (rename(path, to) == 0) {
        log_warn("%s: cannot rename to control%s (%s); renamed %s", path, suffix, strerror(err), to);
        return;
    }
    struct stat st;
    bool seen = lstat(path, &st) == 0;
    if (remove(path) == 0) {
        log_warn("%s: cannot rename to control%s (%s); removed", path, suffix, strerror(err));
        return;
    }
    log_error("%s: cannot rename to control%s (%s) nor remove it (%s); ignored from now on\n"
              "HINT: remove it by hand; a new control file is read again", path, suffix, strerror(err),
              strerror(errno));
    if (seen) {
        r->control_stuck_dev = (uint64_t)st.st_dev;
        r->control_stuck_ino = (uint64_t)st.st_ino;
    }
}

/* Rank 0: the error line, and the file out of the way so that it acts once. */
static void train_control_reject(train_run *r, int line, const char *why)
{
    char path[4200];
    train_control_path(r, "", path, sizeof path);
    char where[32] = "";
    if (line > 0) snprintf(where, sizeof where, ":%d", line);
    log_error("%s%s: %s; renamed to control.rejected, training continues at step %ld", path, where, why, r->step);
    train_control_retire(r, ".rejected");
}

/* Rank 0: the file's bytes, never blocking (a FIFO has no writer, a device never
 * ends) and never through a link (path_open_own): anything but a regular file of at most
 * TRAIN_CONTROL_MAX_BYTES is rejected (a link too, or it would be found again at every step). false when it was
 * rejected or vanished. */
static bool train_control_read(train_run *r, char *text, size_t *n)
{
    char path[4200], why[256];
    train_control_path(r, "", path, sizeof path);
    int fd;
    struct stat sb;
    if (path_open_own(path, &fd, &sb, TRAIN_CONTROL_MAX_BYTES, why, sizeof why) != 0) {
        struct stat lsb;
        if (errno == ENOENT && lstat(path, &lsb) != 0) {  /* removed since the stat: nothing to do */
            log_warn("%s %s; ignored", path, why);
            return false;
        }
        train_control_reject(r, 0, why);
        return false;
    }
    *n = (size_t)sb.st_size;
    int rc = path_read_all_at(fd, text, *n, 0), err = errno;
    close(fd);
    if (rc != 0) {
        snprintf(why, sizeof why, "cannot read: %s", err ? strerror(err) : "it shrank while being read");
        train_control_reject(r, 0, why);
        return false;
    }
    return true;
}

/* Rank 0: reads and checks the file against this run. */
static void train_control_decide(train_run *r, train_control_decision *d)
{
    memset(d, 0, sizeof *d);
    char text[TRAIN_CONTROL_MAX_BYTES], why[512];
    size_t n = 0;
    if (!train_control_read(r, text, &n)) return;
    train_control_request k;
    int line;
    if (train_control_parse(text, n, &k, &line, why, sizeof why) != 0) {
        train_control_reject(r, line, why);
        return;
    }

    int world = k.world ? (int)k.world : r->rt->size;
    int64_t gb = k.global_batch ? k.global_batch : r->elastic.global_batch;
    grid_shape gs = { k.tp ? (int)k.tp : r->grid.shape.tp, k.pp ? (int)k.pp : r->grid.shape.pp, 0 };
    bool regrid = gs.tp != r->grid.shape.tp || gs.pp != r->grid.shape.pp;
    if (regrid && !r->ckpt) {
        train_control_reject(r, 0, "tp/pp: a new grid is formed from a checkpoint, and checkpoints are off");
        return;
    }
    if (regrid && world != r->rt->size) {
        train_control_reject(r, 0, "tp/pp with another world: change the world (a relaunch) or the grid (in place), "
                                   "one at a time");
        return;
    }
    if (regrid && (grid_shape_resolve(&gs, world, "the control file") != STATUS_OK ||
                   model_spec_check_grid(&r->spec, gs.tp, gs.pp) != STATUS_OK ||
                   train_grid_allowed(r->cfg, &gs) != STATUS_OK)) {
        train_control_reject(r, 0, "tp/pp: the grid does not fit this run (above)");
        return;
    }
    snprintf(d->rule, sizeof d->rule, "%s", k.rule[0] ? k.rule : config_str(r->cfg, "elastic.lr_rule"));
    int micro = r->tb.micro_batch, dp = regrid ? gs.dp : world / (r->grid.shape.tp * r->grid.shape.pp);
    if (world != r->rt->size || regrid) {  /* the new run resolves its micro-batch from the config at that size */
        train_batch tb;
        if (train_batch_resolve(&tb, r->cfg, dp) != STATUS_OK) {
            train_control_reject(r, 0, regrid ? "tp/pp: the config's batch sizes do not resolve at that grid (above)"
                                              : "world: the config's batch sizes do not resolve at that size (above)");
            return;
        }
        micro = tb.micro_batch;
    }
    int64_t per = (int64_t)micro * dp;
    if (data_get_format(r->train_data) != DATA_FORMAT_SYNTHETIC && (uint64_t)gb > data_samples(r->train_data)) {
        /* data_open would refuse it: checked here, where a refusal does not end the run */
        snprintf(why, sizeof why, "global_batch %" PRId64 " exceeds the %" PRIu64 " samples of data.train", gb,
                 data_samples(r->train_data));
        train_control_reject(r, 0, why);
        return;
    }
    if (gb % per != 0) {
        snprintf(why, sizeof why, "global_batch %" PRId64 " is not train.micro_batch x accumulation x data-parallel "
                 "ranks = %d x A x %d for a whole A >= 1 (valid: multiples of %" PRId64 ")", gb, micro, dp, per);
        train_control_reject(r, 0, why);
        return;
    }
    double ratio = (double)gb / r->config_batch;
    d->lr_factor = !k.global_batch ? r->elastic.lr_factor : !strcmp(d->rule, "linear") ? ratio
                   : !strcmp(d->rule, "sqrt") ? sqrt(ratio) : 1.0;
    d->global_batch = gb;
    d->world = world;
    d->tp = gs.tp, d->pp = gs.pp;
    d->accepted = 1;
    if (regrid && r->step < r->steps) {
        d->action = TRAIN_CONTROL_ACTION_REGRID;
        return;
    }
    if (world != r->rt->size && r->step >= r->steps)
        printf("elastic: world size %d requested at the last step: the run is complete, no relaunch\n", world);
    if (world != r->rt->size && r->step < r->steps) d->action = TRAIN_CONTROL_ACTION_RELAUNCH;
    else if (gb != r->elastic.global_batch || d->lr_factor != r->elastic.lr_factor) d->action = TRAIN_CONTROL_ACTION_BATCH;
}

/* Every rank, when rank 0 saw a control file: rank 0 decides, everyone applies. A
 * relaunch is only returned (*relaunch = the world size): train_loop checkpoints and
 * ends; train_relaunch_write then tells the supervisor. A relaunch or a new grid asked
 * for while a run of skipped steps withholds checkpoints is postponed (nothing applied,
 * the file left in place) until a step end that commits. */
status train_control(train_run *r, int *relaunch)
{
    train_control_decision d;
    if (r->rt->rank == 0) train_control_decide(r, &d);
    TRY(comm_ctl_bcast_bytes(train_ctl(r), &d, sizeof d, 0));
    if ((d.action == TRAIN_CONTROL_ACTION_REGRID || d.action == TRAIN_CONTROL_ACTION_RELAUNCH) && r->ckpt &&
        r->skipped_in_a_row > 0) {
        /* Both continue from the checkpoint of this step end, which a run of skipped steps
         * withholds (train_ckpt_withheld): nothing is applied, the file stays and is read
         * again at each step end, and acts at the first one that commits. One line a streak. */
        long streak = r->step - r->skipped_in_a_row + 1;
        if (r->rt->rank == 0 && r->control_postponed != streak) {
            printf("elastic: %s requested at step %ld: postponed, no checkpoint is committed while non-finite steps "
                   "are skipped (%ld in a row); the control file stays and is acted on at the first step end that "
                   "commits one\n", d.action == TRAIN_CONTROL_ACTION_REGRID ? "a new process grid" : "a new world size",
                   r->step, r->skipped_in_a_row);
            fflush(stdout);
        }
        r->control_postponed = streak;
        return STATUS_OK;
    }
    if (d.action == TRAIN_CONTROL_ACTION_REGRID) {
        /* the batch travels in the checkpoint; the run is set up again on the new grid */
        r->elastic = (train_elastic){ d.global_batch, d.lr_factor };
        r->regrid = (grid_shape){ d.tp, d.pp, d.world / (d.tp * d.pp) };
        if (r->rt->rank == 0) {
            char a[64], b[64];
            grid_shape_name(&r->grid.shape, a, sizeof a);
            grid_shape_name(&r->regrid, b, sizeof b);
            printf("elastic: process grid %s -> %s requested at step %ld: checkpoint, then the groups re-formed in "
                   "place\n", a, b, r->step);
            train_emit(r, json_pack("{s:s, s:I, s:s, s:s}", "kind", "regrid", "step", (json_int_t)r->step,
                                             "from", a, "to", b));
            train_control_retire(r, ".applied");
            fflush(stdout);
        }
        return STATUS_OK;
    }
    if (d.action == TRAIN_CONTROL_ACTION_RELAUNCH) {
        /* a batch given with the world travels in the checkpoint; this run takes no more steps */
        r->elastic = (train_elastic){ d.global_batch, d.lr_factor };
        *relaunch = d.world;
        return STATUS_OK;
    }
    if (d.action == TRAIN_CONTROL_ACTION_BATCH) {
        int64_t old = r->tb.global_batch;
        TRY(train_elastic_set_batch(r, d.global_batch, d.lr_factor));
        if (r->rt->rank == 0)
            printf("elastic: global batch %" PRId64 " -> %" PRId64 " at step %ld (accumulation %d, lr x %.6g, rule %s)\n",
                   old, d.global_batch, r->step, r->tb.accum, d.lr_factor, d.rule);
    } else if (r->rt->rank == 0 && d.accepted) {
        printf("elastic: control file at step %ld changes nothing (world %d, global batch %" PRId64 ", lr x %.6g)\n",
               r->step, r->rt->size, r->elastic.global_batch, r->elastic.lr_factor);
    }
    if (r->rt->rank == 0 && d.accepted) train_control_retire(r, ".applied");
    if (r->rt->rank == 0) fflush(stdout);
    return STATUS_OK;
}

static int train_relaunch_fill(void *ctx, int fd)
{
    char text[64];
    const long *wv = ctx;
    int n = snprintf(text, sizeof text, "world=%ld\nstep=%ld\n", wv[0], wv[1]);
    return path_write_all(fd, text, (size_t)n);
}

/* Rank 0, after the checkpoint committed: RUN_DIR/relaunch (path_write_atomic: a
 * supervisor never reads half of it, and a link planted at either name is replaced,
 * never written through), then the control file is spent. */
status train_relaunch_write(train_run *r, int world)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/relaunch", r->run_dir);
    long wv[2] = { world, r->step };
    TRY(path_write_atomic(path, "relaunch file", train_relaunch_fill, wv));
    train_control_retire(r, ".applied");
    train_emit(r, json_pack("{s:s, s:I, s:i}", "kind", "relaunch", "step", (json_int_t)r->step, "world",
                                     world));
    printf("elastic: world size %d requested at step %ld: %s; relaunch with %d ranks (exit 4)\n", world, r->step,
           r->ckpt ? "checkpoint committed" : "checkpoints are off, a relaunch starts from step 0",
           world);
    fflush(stdout);
    return STATUS_OK;
}
