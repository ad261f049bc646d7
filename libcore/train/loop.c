/* loop — the step loop of a run: a step, the heartbeat, the metrics line, DGC-Pro's
 * auto decision, evaluation, and at each step end one agreement of every rank on
 * the checkpoint triggers, signals, the alert rules' actions, the elastic control file
 * and hot-reload requests (rank 0's clock, rules and file system decide); then the last checkpoint, the final evaluation and the
 * summary line. It sits above the three sub-modules (train_impl.h) and composes them: the
 * step's divergence verdict goes to control/diverge.c, an alert's rollback is run here.
 *
 * The one design decision: everything a step end acts on is agreed in one small
 * allreduce (MAX of five flags) before anyone acts, so every rank checkpoints,
 * applies a control file or stops at the same step — never some ranks alone. */
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "train_impl.h"

static status train_checkpoint(train_run *r)
{
    TRY(train_check_state(r));
    ckpt_content c;
    train_ckpt_content(r, &c);
    /* the grid recorded in the file (format version 2): dp x tp x pp, ZeRO stage */
    c.layout = (ckpt_layout){ r->grid.shape.dp, r->grid.shape.tp, r->grid.shape.pp, r->use_zero ? 1 : 0 };
    train_commits_saving(r);  /* rank 0: what the step's commit says, once it is committed */
    double t0 = train_now_s();
    TRY(ckpt_save(r->ckpt, &c));
    double ms = (train_now_s() - t0) * 1e3;
    train_commits_poll(r);  /* a checkpoint this save committed (sync: this one) goes to ckpt.commit_to */
    train_profile_ckpt(r, ms);
    train_trace_ckpt(r, t0, ms);
    train_alert_saved(r);  /* a newer state to roll back to */
    if (r->rt->rank != 0) return STATUS_OK;
    train_emit(r, json_pack("{s:s, s:I, s:o, s:b}", "kind", "checkpoint", "step", (json_int_t)r->step,
                                     "stall_ms", train_json_num(ms), "async", config_bool(r->cfg, "ckpt.async")));
    if (!config_bool(r->cfg, "ckpt.async")) {
        printf("checkpoint step=%ld stall_ms=%.1f\n", r->step, ms);
        return STATUS_OK;
    }
    /* The previous async save has finished inside ckpt_save at the latest: its whole
     * cost to the step loop is known now. */
    ckpt_stats p;
    ckpt_get_stats(r->ckpt, &p);
    printf("checkpoint step=%ld save_ms=%.1f memcpy_ms=%.1f (async: copied and written in the background)", r->step,
           ms, p.memcpy_s * 1e3);
    if (p.write_s > 0)
        printf(" previous_stall_ms=%.1f previous_save_ms=%.1f previous_fence_ms=%.1f previous_finish_ms=%.1f "
               "previous_copy_ms=%.1f bytes=%zu previous_write_MB/s=%.0f",
               (p.save_s + p.fence_s + p.finish_s) * 1e3, p.save_s * 1e3, p.fence_s * 1e3, p.finish_s * 1e3,
               p.copy_s * 1e3, p.bytes, (double)p.bytes / p.write_s / 1e6);
    printf("\n");
    return STATUS_OK;
}

/* Rank 0's line for a stop on request, after the step end's checkpoint or its withholding
 * (collective: a background save still running commits first). jobscripts/lib.sh reads it
 * when a launcher's exit code hides the ranks' 3 (nebula_ranks_outcome): its wording is a
 * format. A withheld checkpoint names the last commit, the state a relaunch resumes. */
static status train_stop_line(train_run *r, bool withheld)
{
    if (withheld) TRY(ckpt_wait(r->ckpt));
    if (r->rt->rank != 0) return STATUS_OK;
    printf("stopping at step %ld of %ld on request (SIGTERM or SIGUSR2): ", r->step, r->steps);
    char path[4300];
    int64_t at;
    if (!r->ckpt) printf("checkpoints are off");
    else if (!withheld) printf("checkpoint committed, a relaunch resumes from it");
    else if (train_last_commit(r, path, sizeof path, &at))
        printf("no checkpoint written (non-finite steps are being skipped, above); the last committed checkpoint is "
               "step %" PRId64 " at %s, a relaunch resumes from it", at, path);
    else printf("no checkpoint written (non-finite steps are being skipped, above) and none committed yet, a relaunch "
                "starts afresh");
    printf("; exit code 3\n");
    return STATUS_OK;
}

/* A resumed run whose checkpoint already reaches train.steps: no step, no checkpoint (it
 * exists), no evaluation and no summary numbers a run that trained nothing would invent. */
static status train_nothing_to_do(train_run *r)
{
    if (r->rt->rank == 0) {
        printf("nothing to do: the checkpoint resumed is at step %ld and train.steps = %ld; no step was run "
               "(raise --steps to train further)\n", r->step, r->steps);
        train_emit(r, json_pack("{s:s, s:I, s:I, s:I}", "kind", "summary", "steps", (json_int_t)r->step,
                                         "steps_run", (json_int_t)0, "metrics_lost", (json_int_t)r->metrics_lost));
        fflush(stdout);
    }
    return STATUS_OK;
}

status train_loop(train_run *r)
{
    const runtime *rt = r->rt;
    const config *cfg = r->cfg;  /* read at every step: a hot reload changes the intervals */
    const char *unit;
    double units = train_units(r, &unit);
    double t_run = train_now_s(), t_ckpt = t_run, sum_ms = 0, sum_wait = 0;
    long timed = 0, first = r->step, saved = -1;
    bool stopped = false, halted = false;
    int relaunch = 0;  /* the world size a control file asked for */
    train_step_stats ss = { 0 };
    if (first >= r->steps) return train_nothing_to_do(r);
    /* A stop requested during start-up (data, model and resume take minutes on a large
     * model, Slurm's KillWait is 30 s) ends the run before its first step: the state is
     * the checkpoint just resumed, or none yet, so a relaunch continues either way. */
    int stop_asked = (int)r->signals->stop, stop_agreed;
    TRY(comm_ctl_allreduce(train_ctl(r), &stop_asked, &stop_agreed, 1, MPI_INT, MPI_MAX));
    if (stop_agreed) {
        if (rt->rank == 0)
            printf("stopping before step %ld of %ld on request (SIGTERM or SIGUSR2) during start-up: %s; exit code 3\n",
                   first + 1, r->steps, first > 0 ? "the resumed checkpoint is the state, a relaunch resumes from it"
                                                  : "no step was run, a relaunch starts afresh");
        return STATUS_STOPPED;
    }
    train_heartbeat(r);
    while (r->step < r->steps) {
        long log_every = (long)config_int(cfg, "train.log_interval");
        long eval_every = (long)config_int(cfg, "train.eval_interval");
        long ck_steps = (long)config_int(cfg, "ckpt.every_steps");
        double ck_minutes = config_float(cfg, "ckpt.every_minutes");
        TRY(train_trace_begin(r));  /* collective where the traced steps begin */
        TRY(train_step(r, &ss));
        bool past;  /* too many skipped steps in a row, and the alert rules' guard takes over */
        TRY(train_step_verdict(r, &ss, train_alert_guards_nonfinite(r), &past));
        if (past) train_alert_note_skip(r);  /* the guard's rule fires at this step's end */
        TRY(train_profile_step(r, &ss));
        train_trace_step(r, &ss);
        train_heartbeat(r);
        ckpt_poll(r->ckpt);  /* commits a finished background checkpoint without waiting */
        train_commits_poll(r);  /* rank 0: and into ckpt.commit_to's repository, in the background */
        if (r->ticks >= 1) { sum_ms += ss.step_ms; sum_wait += ss.comm_wait_ms; timed++; }  /* skip warm-up */
        bool log_now = r->step % log_every == 0 || r->step == r->steps;
        if (log_now && r->dgc && dgc_active(r->dgc)) TRY(train_log_dgc_layers(r));
        if (log_now) train_log_step(r, &ss, units, unit);
        TRY(train_samples_step(r, &ss, log_now));
        /* after the step's line: it describes the step as it ran */
        if (r->dgc) TRY(train_dgc_auto(r, &ss, first));
        TRY(train_sched_after_step(r, &ss));
        if (r->val_data && eval_every > 0 && r->step % eval_every == 0 && r->step < r->steps) {
            TRY(train_evaluate(r));
        }
        int alert;  /* rank 0's decision on the alert rules; 0 elsewhere */
        TRY(train_alert_step(r, &ss, units, &alert));
        /* Checkpoint triggers, signals, a control file and the alerts' actions, agreed by
         * every rank (rank 0's clock, file system and rules decide). */
        train_signals *sig = r->signals;
        int flags[5] = { sig->checkpoint || sig->stop, (int)sig->stop, rt->rank == 0 && train_control_exists(r), alert,
                         rt->rank == 0 && train_reload_pending(r) };
        if (rt->rank == 0 && ck_minutes > 0 && train_now_s() - t_ckpt >= ck_minutes * 60) flags[0] = 1;
        if (r->ckpt && ck_steps > 0 && r->step % ck_steps == 0) flags[0] = 1;
        int agreed[5];
        comm_ctl ctl = train_ctl(r);
        ctl.name = "world (step-end agreement)";
        TRY(comm_ctl_allreduce(ctl, flags, agreed, 5, MPI_INT, MPI_MAX));
        sig->checkpoint = 0;
        if (agreed[3]) {
            int act = agreed[3];
            TRY(train_alert_act(r, act));  /* lower_lr, disable_dgc; the bound on rollbacks */
            if (act & TRAIN_ALERT_ROLLBACK) TRY(train_rollback(r));
            if (act & TRAIN_ALERT_CHECKPOINT) agreed[0] = 1;
            /* a rollback is made durable at once (the skipped data, the lowered rate and the
             * rollback count are part of the state); a suspect state is never saved by a stop */
            if (act & TRAIN_ALERT_ROLLBACK) agreed[0] = 1;
            else if ((act & TRAIN_ALERT_STOP) && (act & TRAIN_ALERT_SUSPECT) && !(act & TRAIN_ALERT_CHECKPOINT))
                agreed[0] = 0;
            else if (act & TRAIN_ALERT_STOP) agreed[0] = 1;
            halted = act & TRAIN_ALERT_STOP;
        }
        if (agreed[4]) {  /* a hot reload, before the checkpoint that then records it */
            TRY(train_reload_take(r));
            units = train_units(r, NULL);
        }
        if (agreed[2]) {  /* before the checkpoint: a batch change is part of the state it saves */
            TRY(train_control(r, &relaunch));
            units = train_units(r, NULL);
            if (relaunch || r->regrid.tp) agreed[0] = 1;
        }
        bool withheld = agreed[0] && r->ckpt && train_ckpt_withheld(r);  /* inside a run of skipped steps */
        if (agreed[0] && r->ckpt && !withheld) {
            TRY(train_checkpoint(r));
            t_ckpt = train_now_s();
            saved = r->step;
        }
        if (relaunch || r->regrid.tp) {
            stopped = true;
            break;
        }
        if (halted) {
            if (rt->rank == 0)
                printf("stopping at step %ld of %ld: a monitor rule's stop action (the alert above): %s; exit code 5 "
                       "(not requeued)\n", r->step, r->steps,
                       !r->ckpt ? "checkpoints are off" : agreed[0] && !withheld ? "checkpoint committed"
                                : "the state may be bad (explosion or non-finite values): not saved, the last committed "
                                  "checkpoint stays the newest");
            stopped = true;
            break;
        }
        if (agreed[1]) {
            TRY(train_stop_line(r, withheld));
            stopped = r->step < r->steps;
            break;
        }
        TRY(train_trace_step_end(r));  /* collective after the last traced step: trace.json */
    }
    if (r->ckpt && r->step == r->steps && saved != r->step && !train_ckpt_withheld(r)) TRY(train_checkpoint(r));
    if (r->ckpt) {
        TRY(ckpt_wait(r->ckpt));
        ckpt_stats cs;
        ckpt_get_stats(r->ckpt, &cs);
        if (rt->rank == 0 && cs.write_s > 0)
            printf("checkpoint last background write: %.0f MB in %.2f s = %.0f MB/s\n", (double)cs.bytes / 1e6,
                   cs.write_s, (double)cs.bytes / cs.write_s / 1e6);
    }
    TRY(train_trace_finish(r));    /* collective: trace.json, when the traced steps reached the end */
    TRY(train_profile_finish(r));  /* collective: the profile table and profile.json */
    if (relaunch && rt->rank == 0) TRY(train_relaunch_write(r, relaunch));  /* after the commit it points to */
    if (r->val_data && !stopped) {  /* a stop is often on a deadline: evaluation waits for the end */
        TRY(train_evaluate(r));
    }
    double traffic[2] = { r->dgc_sent, r->dgc_dense };
    TRY(comm_ctl_allreduce(train_ctl(r), MPI_IN_PLACE, traffic, 2, MPI_DOUBLE, MPI_SUM));
    /* rank 0, after the loop's last collective: the last commit into ckpt.commit_to (improved: on
     * the final evaluation) is made and waited for */
    train_commits_finish(r);
    if (rt->rank == 0 && traffic[0] > 0)
        printf("dgc: gradient traffic between nodes %.3f MB against %.3f MB for dense ring allreduces: %.1fx less\n",
               traffic[0] / 1e6, traffic[1] / 1e6, traffic[1] / traffic[0]);
    if (rt->rank == 0 && !r->regrid.tp) {  /* a new grid continues the run: its summary comes at the end */
        double mean = timed ? sum_ms / timed : ss.step_ms, wait = timed ? sum_wait / timed : ss.comm_wait_ms;
        /* exposed_comm: the share of a step spent waiting for gradient communication after
         * backward (what overlap did not hide, waiting for slower ranks included), so in
         * [0, 100]%. Not relative to comm_ms: a wait for a slow rank is not communication
         * time, and that ratio read 1930% on an imbalanced run. */
        double exposed = mean > 0 ? fmin(100.0, fmax(0.0, 100 * wait / mean)) : 0.0;
        printf("summary: steps=%ld steps_run=%ld final_loss=%.6f mean_step_ms=%.1f %s=%.1f comm_wait_ms=%.2f "
               "comm_ms=%.2f exposed_comm=%.0f%% time_s=%.1f run_dir=%s\n", r->step, r->ticks, ss.loss, mean,
               unit, mean > 0 ? units / (mean / 1e3) : 0.0, wait, r->comm_ms, exposed, train_now_s() - t_run,
               r->run_dir);
        json_t *j = json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I}", "kind", "summary", "steps",
                              (json_int_t)r->step, "steps_run", (json_int_t)r->ticks, "final_loss",
                              train_json_num(ss.loss), "mean_step_ms", train_json_num(mean), "comm_wait_ms",
                              train_json_num(wait), "comm_ms", train_json_num(r->comm_ms), "exposed_comm_pct",
                              train_json_num(exposed), "metrics_lost", (json_int_t)r->metrics_lost);
        train_emit(r, j);  /* its metrics_lost: the records before it */
        if (r->metrics_lost)
            printf("metrics: %ld of %ld records could not be written to %s/metrics.jsonl (see the warnings above); "
                   "training was not affected\n", r->metrics_lost, r->metrics_records, r->run_dir);
        fflush(stdout);
    }
    if (r->regrid.tp) return STATUS_REGRID;
    return relaunch ? STATUS_RELAUNCH : halted ? STATUS_HALTED : stopped ? STATUS_STOPPED : STATUS_OK;
}
