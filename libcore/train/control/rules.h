/* rules — what the trainer's control files share (elastic, control file, hot reload,
 * run directory, divergence, alert rules, heterogeneous shares): the decisions, taken
 * alike on every rank (rank 0 decides, every rank applies). Private to libcore/train:
 * observe/ and the top files include it; core/ never does.
 *
 * The one design decision: control calls only down, into core (the batch arithmetic,
 * the checkpoint content) and below; what it records goes out through core's
 * train_emit, and what needs the loop (a rollback, a checkpoint, a stop) is returned
 * as an action bit for the loop to carry out. */
#ifndef NEBULA_TRAIN_RULES_H
#define NEBULA_TRAIN_RULES_H

#include "train/core/core.h"

/* ---- elastic.c: heartbeat and control file ---- */
/* Rank 0, at setup: creates RUN_DIR/heartbeat at its fixed size (STATUS_IO when it cannot). */
status train_heartbeat_open(train_run *r);
/* Every rank after each step (a no-op without the file): rewrites the heartbeat line. */
void train_heartbeat(train_run *r);
/* After a checkpoint load: the global batch and lr factor a control file set, or the config's. */
status train_elastic_resume(train_run *r, const ckpt_content *c);
/* Rank 0, every step: whether RUN_DIR/control is there (one stat). */
bool train_control_exists(const train_run *r);
/* Collective: rank 0 decides, every rank applies; a new world size only sets *relaunch. */
status train_control(train_run *r, int *relaunch);
/* Every rank: global batch gb at the same micro-batch (accumulation, averaging and the
 * loader follow) and lr_factor, as train_elastic records them. */
status train_elastic_set_batch(train_run *r, int64_t gb, double lr_factor);
/* Rank 0, after the checkpoint committed: RUN_DIR/relaunch, control renamed control.applied. */
status train_relaunch_write(train_run *r, int world);

/* ---- reload.c: hot reload (docs/monitor.md) ---- */
/* At setup: an empty history. */
void train_reload_init(train_run *r);
/* Rank 0, every step: whether RUN_DIR/reload holds a version to decide now (one stat;
 * the directory is read when it changed). */
bool train_reload_pending(train_run *r);
/* Collective, when rank 0 saw one: rank 0 decides, every rank applies (or nobody). */
status train_reload_take(train_run *r);
/* After a checkpoint load, before train_elastic_resume: the history it holds replayed
 * onto the run's config (STATUS_CORRUPT when it is not readable). */
status train_reload_resume(train_run *r, const ckpt_content *c);

/* ---- reload_history.c: the checkpointed history's one parser ---- */
/* key "section.name" and value appended to ini[cap] as INI lines "[section]\nname = value\n":
 * 0, or -1 when they do not fit. */
int train_reload_ini_add(char *ini, size_t cap, const char *key, const char *value);
/* The history in text (the blob's, NUL-terminated) as *seen and the net assignments, in
 * order, as INI (the folded base first, then every entry's changes). 0, or -1 with why:
 * not JSON, another layout, or a change that is not one config assignment (a string
 * "section.key" and a string value of one line, within the request limits). */
int train_reload_history_parse(const char *text, long *seen, char *ini, size_t cap, char *why, size_t len);
/* The INI of train_reload_history_parse, one assignment at a time into cfg (later values
 * win, as they did in the run): 0, or -1 with why naming the assignment the config refused
 * and its message (captured; with hold, held back rather than printed). */
int train_reload_history_apply(config *cfg, const char *ini, bool hold, char *why, size_t len);

/* ---- diverge.c: non-finite losses, gradients and parameters (see train.max_skipped_steps) ---- */
/* Whether a checkpoint asked for now is withheld: while steps are being skipped for
 * non-finite values (the weights are those that gave them), nothing is committed, so
 * the last commit before the streak stays the rollback target and the one a relaunch
 * resumes. Rank 0 logs it, naming that commit. The same on every rank (the verdict is). */
bool train_ckpt_withheld(train_run *r);
/* Not collective (rank 0 reads the run's ckpt directory): the newest committed checkpoint,
 * its path and step; false when there is none. */
bool train_last_commit(const train_run *r, char *path, size_t len, int64_t *step);
/* After each step, with its verdict (ss->skipped ...): the run of skipped steps ends or
 * grows; a skipped step is logged and recorded. Past train.max_skipped_steps: with
 * guarded (the alert rules' guard takes over, monitor.nonfinite_action) *past is set for
 * the loop to hand to train_alert_note_skip; without, STATUS_DIVERGED, logged with the
 * last commit and a HINT. Never calls the alert rules: they sit above it. */
status train_step_verdict(train_run *r, const train_step_stats *ss, bool guarded, bool *past);
/* Before a checkpoint (collective under ZeRO): STATUS_DIVERGED, logged, when a parameter
 * or optimizer moment is not finite (an update overflowed), so that none is saved. */
status train_check_state(train_run *r);
/* Ends the run as diverged (rank 0 logs why, the last commit and a HINT): STATUS_DIVERGED. */
status train_diverged(train_run *r, long step, const char *why);

/* ---- alert.c: alert rules and actions (docs/monitor.md) ---- */
/* The actions a rule may take, as bits in the step-end agreement. */
#define TRAIN_ALERT_LOG         (1 << 0)
#define TRAIN_ALERT_CHECKPOINT  (1 << 1)
#define TRAIN_ALERT_STOP        (1 << 2)
#define TRAIN_ALERT_LOWER_LR    (1 << 3)
#define TRAIN_ALERT_ROLLBACK    (1 << 4)
#define TRAIN_ALERT_DISABLE_DGC (1 << 5)
#define TRAIN_ALERT_SUSPECT     (1 << 6)  /* not an action: the state may be bad (explosion, non-finite) */
#define TRAIN_ALERT_REBASE_RSS  (1 << 7)  /* not an action: the memory rule fired, its baseline moves up */
/* Whether cfg's [monitor] action lists parse: 0, or -1 with why naming the key (setup, reload). */
int train_alert_check(const config *cfg, char *why, size_t len);
/* At setup: checks the keys (STATUS_INPUT, logged) and clears the state. */
status train_alert_setup(train_run *r);
/* After each step and its evaluation (collective while a per-rank rule is on): rank 0's
 * decision in *actions (0 elsewhere), its alerts logged and recorded. */
status train_alert_step(train_run *r, const train_step_stats *ss, double units, int *actions);
/* Every rank, with the agreed actions: lowers the rate, switches DGC-Pro off; a rollback
 * past monitor.max_rollbacks is STATUS_DIVERGED. Rollback, checkpoint and stop are the loop's. */
status train_alert_act(train_run *r, int actions);
void train_alert_free(train_run *r);
/* The rollback's bound: a checkpoint older than this step (LONG_MAX: any); after a
 * checkpoint's save, the bound lifts (a newer state to go back to); after a rollback
 * to step at, the rules start over on the new trajectory with the bound at it. */
long train_alert_floor(const train_run *r);
void train_alert_saved(train_run *r);
void train_alert_rolled_back(train_run *r, long at);
/* train_skip: more than train.max_skipped_steps in a row; the guard's rule fires next. */
void train_alert_note_skip(train_run *r);
/* Whether the guard's actions take over from ending the run (rollback or stop among them). */
bool train_alert_guards_nonfinite(const train_run *r);

/* ---- rundir.c: the run directory's lock, config.ini and file opening (rank 0) ---- */
/* Opens RUN_DIR/name with flags (| O_NOFOLLOW, mode 0644 when created) into *fd: STATUS_INPUT,
 * logged with the file named, for a symbolic link or a non-regular file (never written
 * through); STATUS_IO for another failure or an injected fault at point (f may be NULL). */
status train_rundir_open_file(const train_run *r, const char *name, int flags, fault_plan *f, const char *point,
                              int *fd);
/* Creates RUN_DIR and takes its lock for the run's life: STATUS_INPUT naming the holder when
 * another run holds it (exit 2), or when a link or special file stands in the run
 * directory under a name the trainer writes; a stale lock is taken over with a line. */
status train_rundir_lock(train_run *r);
/* Releases the lock (empties the holder line: a clean end, not a stale lock). */
void train_rundir_unlock(train_run *r);
/* Writes RUN_DIR/config.ini (the resolved config) atomically; a failure is a warning. */
void train_rundir_write_config(train_run *r);

/* ---- commit.c: a nebula-model repository (ckpt.commit_to, ckpt.resume = model:REPO@REF) ---- */
/* At setup, before the run directory is locked (collective): the keys checked, and rank 0
 * opens the repository ckpt.commit_to names (r->commits); STATUS_INPUT on every rank,
 * logged naming the key with a HINT, when it is not one. A no-op when the key is empty. */
status train_commits_setup(train_run *r);
/* Rank 0, before a checkpoint's save: the step's training loss and latest held-out loss,
 * which its commit uses once the checkpoint is committed. */
void train_commits_saving(train_run *r);
/* Rank 0, between steps (after each save, poll and wait of the checkpoint writer): a
 * finished commit is reported (its line, its "commit" record); a checkpoint the writer
 * committed since is counted (ckpt.commit_every), decided (ckpt.commit_when) and its commit
 * started in the background, after the one still running. Not collective; a no-op without
 * ckpt.commit_to and on the other ranks. */
void train_commits_poll(train_run *r);
/* Rank 0 at the end of the loop, after the final evaluation: the last checkpoint's commit
 * (improved: decided on that evaluation), then the running commit waited for and reported. */
void train_commits_finish(train_run *r);
/* Waits for a running commit (reported) and frees the state (train_free). */
void train_commits_free(train_run *r);
/* Collective: ckpt.resume = model:SPEC, SPEC = REPO@REF (REF: HEAD without one). Rank 0
 * resolves REF, and checks the commit out under RUN_DIR/model-checkout/<12-hex id>/ (or
 * finds it there, committed); every rank gets the checkpoint's directory in path, or the
 * same status: STATUS_INPUT (not a repository, an unknown ref), STATUS_CORRUPT, STATUS_IO,
 * logged by rank 0. */
status train_commits_checkout(train_run *r, const char *spec, char *path, size_t len);

/* ---- sched.c ---- */
/* sched.c: heterogeneous ranks' shares of the global batch (mode off: nothing). Setup
 * after the loaders (STATUS_INPUT naming the key for what it cannot do); the micro-batches
 * of this rank's share in a step and the size of each; the checkpoint's shares after a
 * load; an assignment anew (the global batch changed); balanced mode's measurement and
 * assignment after each step. */
status train_sched_setup(train_run *r);
void train_sched_free(train_run *r);
status train_sched_resume(train_run *r, const ckpt_content *c, const ckpt_info *info);
status train_sched_reassign(train_run *r, const char *why);
status train_sched_after_step(train_run *r, const train_step_stats *ss);
status train_sched_apportion(const double *w, int n, int64_t gb, int64_t floor_n, int64_t *out, double *frac);
/* Balanced mode's weights for train_sched_apportion from the ranks' busy speeds: the
 * samples above the floor that make every rank's busy time equal (water-filled), or, with
 * floor_first (compat.sched_floor_first, before d9fa268), the speeds themselves, so the
 * rest after everyone's floor goes in proportion to speed. scratch: 3 n doubles, in: n. */
void train_sched_balanced_weights(const double *speed, int n, double gb, double floor_n, bool floor_first,
                                  double *scratch, bool *in, double *weights);
#endif
