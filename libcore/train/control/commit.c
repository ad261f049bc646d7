/* commit — the run and a nebula-model repository (docs/training.md "Model repository"):
 * with ckpt.commit_to = REPO[:BRANCH], rank 0 commits the run's checkpoints into REPO as
 * they commit (every ckpt.commit_every-th, or only those whose held-out loss improved on
 * the last commit's: ckpt.commit_when = improved), each recorded in metrics.jsonl as a
 * "commit" record; with ckpt.resume = model:REPO@REF every rank resumes from a commit,
 * which rank 0 checks out first under RUN_DIR/model-checkout/<its 12-hex id>/.
 *
 * The one design decision: a commit costs the step loop what its catalog costs and no
 * more. Rank 0's main thread learns that the checkpoint writer committed a step
 * (ckpt_commits, between steps), reads the file's catalog there (repo_scan_open: HDF5,
 * which is not thread-safe, and the file held open, so a pruned checkpoint stays
 * readable), and hands the scan to a thread that hashes, compresses and stores its
 * chunks with plain POSIX calls (repo_commit_scan). One commit runs at a time: the next
 * one waits for it. The thread only sets its result; the main thread reports it (the
 * line, the record: metrics.c's writer is the main thread's) when it polls the thread
 * between steps, at the end of the loop or when the run is freed. A commit that fails is
 * a warning: the checkpoint itself is committed, training goes on. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/repo.h"
#include "rules.h"

#define COMMIT_NOTES 4  /* checkpoints saved and not yet committed into the repository (async: 2) */

/* What the loop knew of a checkpoint's step when it saved it. */
typedef struct commit_note {
    long step;                 /* -1: free */
    double loss;               /* the step's training loss */
    double val;                /* the held-out loss of the last evaluation at or before it (NaN: none) */
    long val_step;             /* that evaluation's step (0: none) */
} commit_note;

/* The commit in flight (the thread's), and what it reports. */
typedef struct commit_job {
    pthread_t thread;
    bool running;              /* started and not joined (or run in the calling thread, not reported) */
    bool threaded;             /* thread is one to join */
    atomic_bool done;          /* the thread has finished */
    repo_scan scan;            /* the thread's, closed by it */
    repo_commit_opts opts;
    char message[96];
    long step;
    double best_before;        /* improved: the last commit's held-out loss before this one (restored when it fails) */
    status st;
    repo_id id;
    repo_put_stats stats;
} commit_job;

typedef struct train_commits {
    repo repo;                 /* the repository, opened at setup (only the thread uses it while one runs) */
    char name[REPO_PATH_MAX];  /* REPO as ckpt.commit_to gives it */
    char branch[REPO_NAME_MAX];/* BRANCH, or HEAD's branch at setup; "" for a detached HEAD */
    long every;                /* ckpt.commit_every */
    bool improved;             /* ckpt.commit_when = improved */
    long seen;                 /* the writer's commits looked at */
    long counted;              /* of them, checkpoints counted for commit_every */
    double best;               /* improved: the held-out loss at the last commit, the one running
                                  included (INFINITY: none yet) */
    bool best_known;           /* best was looked up in the branch's tip (this run's own earlier commit) */
    long deferred;             /* improved: the last checkpoint, decided after the final evaluation (-1: none) */
    commit_note notes[COMMIT_NOTES];
    commit_job job;
} train_commits;

/* REPO[:BRANCH] of ckpt.commit_to: the last ':' when what follows is a branch name. */
static void split_target(const char *spec, char *root, size_t rlen, char *branch, size_t blen)
{
    const char *colon = strrchr(spec, ':');
    branch[0] = '\0';
    if (colon && colon > spec && colon[1] && strlen(colon + 1) < blen && repo_name_ok(colon + 1)) {
        snprintf(root, rlen, "%.*s", (int)(colon - spec), spec);
        snprintf(branch, blen, "%s", colon + 1);
    } else {
        snprintf(root, rlen, "%s", spec);
    }
}

static status commits_open(train_run *r, train_commits **out)
{
    const config *cfg = r->cfg;
    const char *spec = config_str(cfg, "ckpt.commit_to");
    train_commits *c = calloc(1, sizeof *c);
    if (!c) return STATUS_NOMEM;
    *out = c;
    split_target(spec, c->name, sizeof c->name, c->branch, sizeof c->branch);
    c->every = (long)config_int(cfg, "ckpt.commit_every");
    c->improved = !strcmp(config_str(cfg, "ckpt.commit_when"), "improved");
    c->best = INFINITY;
    c->deferred = -1;
    for (int i = 0; i < COMMIT_NOTES; i++) c->notes[i].step = -1;
    if (repo_open(&c->repo, c->name) != STATUS_OK) {
        log_error0("ckpt.commit_to = %s (%s): %s is not a nebula-model repository\nHINT: nebula-model init %s",
                   spec, config_origin(cfg, "ckpt.commit_to"), c->name, c->name);
        return STATUS_INPUT;
    }
    c->repo.threads = 1;  /* one core beside the step loop, whose threads take the others */
    char head[REPO_NAME_MAX];
    repo_id tip;
    bool born;
    if (repo_head(&c->repo, head, sizeof head, &tip, &born) != STATUS_OK) {
        log_error0("ckpt.commit_to = %s: the HEAD of %s cannot be read\nHINT: nebula-model fsck --repo %s", spec,
                   c->name, c->name);
        return STATUS_INPUT;
    }
    if (!c->branch[0]) snprintf(c->branch, sizeof c->branch, "%s", head);
    return STATUS_OK;
}

status train_commits_setup(train_run *r)
{
    const config *cfg = r->cfg;
    const char *spec = config_str(cfg, "ckpt.commit_to");
    if (!spec[0]) return STATUS_OK;
    if (config_int(cfg, "ckpt.every_steps") <= 0 && config_float(cfg, "ckpt.every_minutes") <= 0) {
        log_error0("ckpt.commit_to = %s (%s) commits checkpoints, and checkpoints are off\nHINT: set ckpt.every_steps "
                   "or ckpt.every_minutes", spec, config_origin(cfg, "ckpt.commit_to"));
        return STATUS_INPUT;
    }
    if (!strcmp(config_str(cfg, "ckpt.commit_when"), "improved") && !config_str(cfg, "data.val")[0]) {
        log_error0("ckpt.commit_when = improved (%s) compares held-out losses, and data.val is empty\nHINT: set "
                   "data.val, or ckpt.commit_when = always", config_origin(cfg, "ckpt.commit_when"));
        return STATUS_INPUT;
    }
    status st = STATUS_OK;
    if (r->rt->rank == 0) {
        st = commits_open(r, &r->commits);
        if (st != STATUS_OK) {
            free(r->commits);
            r->commits = NULL;
        }
    }
    int mine = (int)st, all;  /* every rank ends alike */
    TRY(comm_ctl_allreduce(train_ctl(r), &mine, &all, 1, MPI_INT, MPI_MAX));
    return (status)all;
}

void train_commits_saving(train_run *r)
{
    train_commits *c = r->commits;
    if (!c) return;
    commit_note *n = &c->notes[0];  /* this step's, else a free one, else the oldest */
    for (int i = 0; i < COMMIT_NOTES; i++) {
        commit_note *k = &c->notes[i];
        if (k->step == r->step) { n = k; break; }
        if (n->step >= 0 && (k->step < 0 || k->step < n->step)) n = k;
    }
    *n = (commit_note){ r->step, r->last_loss, r->last_eval_step > 0 ? r->last_eval : NAN, r->last_eval_step };
}

static commit_note *note_of(train_commits *c, long step)
{
    for (int i = 0; i < COMMIT_NOTES; i++)
        if (c->notes[i].step == step) return &c->notes[i];
    return NULL;
}

static void *commit_thread(void *arg)
{
    train_commits *c = arg;
    commit_job *j = &c->job;
    j->st = repo_commit_scan(&c->repo, &j->scan, &j->opts, &j->id, &j->stats);
    repo_scan_close(&j->scan);
    atomic_store(&j->done, true);
    return NULL;
}

/* Joins the commit in flight (blocking when `wait`, else only a finished one) and reports it. */
static void commit_join(train_run *r, bool wait)
{
    train_commits *c = r->commits;
    commit_job *j = &c->job;
    if (!j->running || (!wait && !atomic_load(&j->done))) return;
    if (j->threaded) pthread_join(j->thread, NULL);
    j->running = j->threaded = false;
    const char *branch = c->branch[0] ? c->branch : "detached HEAD";
    if (j->st != STATUS_OK) {
        log_warn("step %ld was not committed to %s (%s): %s (above); the checkpoint itself is committed, training "
                 "goes on", j->step, c->name, branch, status_str(j->st));
        c->best = j->best_before;
        return;
    }
    char hex[33];
    repo_id_hex(&j->id, hex);
    printf("committed step %ld to %s (%s) as %.12s: %" PRIu64 " new chunks, %.1f MB stored\n", j->step, c->name,
           branch, hex, j->stats.chunks_new, (double)j->stats.stored / 1e6);
    fflush(stdout);
    json_t *rec = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I}", "kind", "commit", "step", (json_int_t)j->step,
                            "commit", hex, "repo", c->repo.root, "new_chunks", (json_int_t)j->stats.chunks_new,
                            "stored_bytes", (json_int_t)j->stats.stored);
    if (rec && c->branch[0]) json_object_set_new(rec, "branch", json_string(c->branch));  /* none: detached HEAD */
    train_emit(r, rec);
}

/* improved: the held-out loss of the branch's tip when it is this run's own commit (an
 * earlier launch's), so a relaunch goes on comparing with it. */
static void best_from_tip(train_run *r)
{
    train_commits *c = r->commits;
    c->best_known = true;
    char ref[REPO_NAME_MAX + 16], objdir[REPO_PATH_MAX + 16], why[256], run[4096];
    repo_id tip;
    bool found = false;
    if (!c->branch[0]) return;
    snprintf(ref, sizeof ref, "refs/heads/%s", c->branch);
    if (repo_ref_read(c->repo.dir, ref, &tip, &found) != STATUS_OK || !found) return;
    repo_objdir(c->repo.dir, objdir, sizeof objdir);
    repo_commit cm;
    if (repo_commit_load(objdir, &tip, &cm, why, sizeof why) != STATUS_OK) return;
    const char *was = json_string_value(json_object_get(cm.lineage, "run_dir"));
    json_t *val = json_object_get(json_object_get(cm.lineage, "metrics"), "val_loss");
    if (was && realpath(r->run_dir, run) && !strcmp(was, run) && json_is_number(val)) c->best = json_number_value(val);
    repo_commit_free(&cm);
}

/* A checkpoint the writer committed: counted, decided, and its commit started. */
static void commit_start(train_run *r, long step)
{
    train_commits *c = r->commits;
    commit_note *n = note_of(c, step);
    commit_note none = { step, NAN, NAN, 0 };
    if (!n) n = &none;
    if (c->improved) {
        if (!c->best_known) best_from_tip(r);
        if (!isfinite(n->val) || !(n->val < c->best)) {
            if (!isfinite(n->val))
                printf("checkpoint step %ld not committed to %s: no held-out loss yet (ckpt.commit_when = improved; "
                       "see train.eval_interval)\n", step, c->name);
            else
                printf("checkpoint step %ld not committed to %s: held-out loss %.6f (step %ld) is not below the last "
                       "commit's %.6f (ckpt.commit_when = improved)\n", step, c->name, n->val, n->val_step, c->best);
            n->step = -1;
            return;
        }
    }
    commit_join(r, true);  /* one at a time */
    commit_job *j = &c->job;
    char ckdir[4200];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", r->run_dir);
    char path[4300];
    int64_t at;
    if (!ckpt_last_committed(ckdir, path, sizeof path, &at) || at != step) {  /* a rollback retired it */
        log_warn("checkpoint step %ld is no longer the newest under %s: not committed to %s", step, ckdir, c->name);
        n->step = -1;
        return;
    }
    if (repo_scan_open(&j->scan, path) != STATUS_OK) {
        log_warn("step %ld was not committed to %s: its checkpoint %s cannot be read (above); training goes on", step,
                 c->name, path);
        n->step = -1;
        return;
    }
    if (isfinite(n->loss)) snprintf(j->message, sizeof j->message, "step %ld loss %.6f", step, n->loss);
    else snprintf(j->message, sizeof j->message, "step %ld", step);
    j->opts = (repo_commit_opts){ .message = j->message, .branch = c->branch[0] ? c->branch : NULL };
    j->step = step;
    j->best_before = c->best;
    if (c->improved) c->best = n->val;  /* the next checkpoint is compared with this one */
    j->stats = (repo_put_stats){ 0 };
    j->st = STATUS_OK;
    n->step = -1;
    atomic_store(&j->done, false);
    int err = pthread_create(&j->thread, NULL, commit_thread, c);
    j->running = true;
    j->threaded = err == 0;
    if (err) {
        log_warn("cannot start a thread to commit step %ld to %s (%s): committing it in this one", step, c->name,
                 strerror(err));
        commit_thread(c);
        commit_join(r, false);  /* report now */
    }
}

void train_commits_poll(train_run *r)
{
    train_commits *c = r->commits;
    if (!c) return;
    commit_join(r, false);
    int64_t step;
    long n = ckpt_commits(r->ckpt, &step);
    if (n == c->seen) return;
    c->counted += n - c->seen;  /* one at a time in practice: a save waits for the one before */
    c->seen = n;
    if (c->counted % c->every != 0) {
        commit_note *k = note_of(c, (long)step);
        if (k) k->step = -1;
        return;
    }
    /* the last checkpoint's held-out loss is the final evaluation's, after it */
    if (c->improved && step == r->steps && r->val_data && r->last_eval_step != step) {
        c->deferred = (long)step;
        return;
    }
    commit_start(r, (long)step);
}

void train_commits_finish(train_run *r)
{
    train_commits *c = r->commits;
    if (!c) return;
    train_commits_poll(r);
    if (c->deferred >= 0) {
        commit_note *n = note_of(c, c->deferred);
        if (n && r->last_eval_step == c->deferred) n->val = r->last_eval, n->val_step = r->last_eval_step;
        long step = c->deferred;
        c->deferred = -1;
        commit_start(r, step);
    }
    commit_join(r, true);
}

void train_commits_free(train_run *r)
{
    if (!r->commits) return;
    commit_join(r, true);
    free(r->commits);
    r->commits = NULL;
}

/* ---- ckpt.resume = model:REPO@REF ---------------------------------------------------- */

/* Rank 0: the commit checked out (or found checked out) as a committed checkpoint. */
static status checkout(train_run *r, const char *spec, char *path, size_t len)
{
    char root[REPO_PATH_MAX], ref[REPO_NAME_MAX + 16] = "HEAD", why[512];
    const char *at = strrchr(spec, '@');
    if (at && at[1]) {
        if (strlen(at + 1) >= sizeof ref) {
            log_error("ckpt.resume = model:%s: the ref '%s' is too long", spec, at + 1);
            return STATUS_INPUT;
        }
        snprintf(ref, sizeof ref, "%s", at + 1);
    }
    snprintf(root, sizeof root, "%.*s", (int)(at ? at - spec : (long)strlen(spec)), spec);
    if (!root[0]) {
        log_error("ckpt.resume = model:%s names no repository: model:REPO@REF (REF: a branch, a tag, a commit id, "
                  "HEAD~1)", spec);
        return STATUS_INPUT;
    }
    repo rp;
    if (repo_open(&rp, root) != STATUS_OK) {
        log_error("ckpt.resume = model:%s: %s is not a nebula-model repository\nHINT: nebula-model init %s, then "
                  "commit a checkpoint into it (ckpt.commit_to, or nebula-model commit)", spec, root, root);
        return STATUS_INPUT;
    }
    repo_id id;
    if (repo_resolve(&rp, ref, &id) != STATUS_OK) {
        log_error("ckpt.resume = model:%s: '%s' names no commit of %s\nHINT: nebula-model log --repo %s", spec, ref,
                  root, root);
        return STATUS_INPUT;
    }
    char hex[33], objdir[REPO_PATH_MAX + 16], out[4200];
    repo_id_hex(&id, hex);
    repo_objdir(rp.dir, objdir, sizeof objdir);
    repo_commit cm;
    repo_manifest m;
    status st = repo_commit_load(objdir, &id, &cm, why, sizeof why);
    if (st != STATUS_OK) {
        log_error("ckpt.resume = model:%s: commit %s: %s\nHINT: nebula-model fsck --repo %s", spec, hex, why, root);
        return st;
    }
    st = repo_manifest_load(objdir, &cm.manifest, &m, why, sizeof why);
    repo_commit_free(&cm);
    if (st != STATUS_OK) {
        log_error("ckpt.resume = model:%s: the manifest of commit %s: %s\nHINT: nebula-model fsck --repo %s", spec,
                  hex, why, root);
        return st;
    }
    snprintf(out, sizeof out, "%s/model-checkout/%.12s", r->run_dir, hex);
    int64_t have;
    if (ckpt_last_committed(out, path, len, &have) && have == m.h.step) {
        printf("model: commit %.12s of %s (%s) is checked out at %s already\n", hex, root, ref, path);
    } else {
        st = repo_materialize(objdir, &m, out, 0, &rp.chaos, path, len);
        if (st != STATUS_OK)
            log_error("ckpt.resume = model:%s: commit %s could not be checked out under %s (above)", spec, hex, out);
        else
            printf("model: checked out commit %.12s of %s (%s), step %" PRId64 ", at %s\n", hex, root, ref, m.h.step,
                   path);
    }
    repo_manifest_free(&m);
    fflush(stdout);
    return st;
}

status train_commits_checkout(train_run *r, const char *spec, char *path, size_t len)
{
    int st = STATUS_OK;
    path[0] = '\0';
    if (r->rt->rank == 0) st = (int)checkout(r, spec, path, len);
    TRY(comm_ctl_bcast(train_ctl(r), &st, 1, MPI_INT, 0));
    if (st != STATUS_OK) return (status)st;
    return comm_ctl_bcast_bytes(train_ctl(r), path, len, 0);
}
