/* CHAOS-build fault points (fault.h). The table below is the one list of every point in
 * the suite, so that a rule naming a point that does not exist is refused up front; a
 * module adds its points here when it wraps a call with FAULT_ERRNO. The step switches
 * (NEBULA_CHAOS_NAN, ...) are the same mechanism keyed by the step a process runs. */
#include "fault.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names are in every build (a supervisor checks a rule against them before it starts
 * anything); the code that fires them only in the CHAOS build. */
static const struct {
    const char *name;
    const char *what;
} fault_points[] = {
    /* The checkpoint writer, rank 0 (and its background thread), and every rank's write
     * of its slices of state.h5 in a synchronous save (ckpt.write: "/RANK" picks one). */
    { "ckpt.write", "the data write of state.h5 (every rank its slices in a synchronous save; rank 0 in an "
                    "asynchronous one)" },
    { "ckpt.fsync", "the fsync of state.h5" },
    { "ckpt.rename", "the rename of .step_N.tmp to step_N" },
    { "ckpt.marker", "writing the COMMITTED marker" },
    { "ckpt.mkdir", "creating the checkpoint directory (at start) or .step_N.tmp" },
    { "ckpt.create", "creating state.h5 (asynchronous writer; HDF5's calls)" },
    { "ckpt.open", "opening state.h5 for the data (asynchronous writer)" },
    { "ckpt.open_direct", "opening state.h5 with O_DIRECT (asynchronous writer; falls back to the page cache)" },
    { "ckpt.close", "closing state.h5 after the data (asynchronous writer)" },
    { "ckpt.checksums", "reopening state.h5 to store its checksums (asynchronous writer; HDF5's calls)" },
    { "ckpt.dirsync", "an fsync of a directory: .step_N.tmp, the checkpoint directory, step_N, a pruned one" },
    { "ckpt.moveaside", "the rename of an existing step_N to .step_N.old before it is replaced" },
    { "ckpt.marker_open", "creating the COMMITTED marker's temporary file" },
    { "ckpt.marker_fsync", "the fsync of the COMMITTED marker" },
    { "ckpt.marker_close", "closing the COMMITTED marker" },
    { "ckpt.marker_rename", "the rename of the COMMITTED marker to its name" },
    { "ckpt.prune", "removing an old checkpoint's COMMITTED marker (pruning; a failure only warns)" },
    /* the metrics writer (train/metrics.c) and the run-directory lock (train/rundir.c) */
    { "metrics.open", "opening RUN_DIR/metrics.jsonl" },
    { "metrics.write", "writing one metrics.jsonl record" },
    { "metrics.close", "closing metrics.jsonl at the end" },
    { "rundir.open", "opening RUN_DIR/lock" },
    { "rundir.read", "reading the lock's previous holder" },
    { "rundir.lock", "flock on RUN_DIR/lock" },
    { "rundir.write", "writing this run's holder line" },
    { "rundir.config", "writing RUN_DIR/config.ini" },
    { "rundir.release", "emptying the holder line at the end" },
    /* every atomic write (base/path.c path_write_atomic): config.ini, reload answers,
     * profile shapes, nebula-report --out, nebula-ckpt convert --out, ... */
    { "out.create", "creating an atomic write's temporary file" },
    { "out.write", "writing its contents (after the fill: the temporary is whole)" },
    { "out.fsync", "the fsync of the temporary file" },
    { "out.close", "closing the temporary file" },
    { "out.rename", "the rename of the temporary over the output" },
    /* nebula-model's repository writes (libcore/model): objects (chunks, skeletons,
     * manifests, commits), refs and HEAD, the work-tree index, locks, the reflog, checkouts */
    { "model.object_write", "writing an object's temporary file" },
    { "model.object_fsync", "the fsync of an object's temporary file" },
    { "model.object_rename", "the rename of an object's temporary file to its id" },
    { "model.ref_write", "writing a ref's, HEAD's or a COMMITTED marker's temporary file" },
    { "model.ref_fsync", "its fsync" },
    { "model.ref_rename", "its rename over the ref" },
    { "model.work_write", "writing the work-tree index (worktree.json)" },
    { "model.work_fsync", "its fsync" },
    { "model.work_rename", "its rename" },
    { "model.lock", "writing a ref's lock file" },
    { "model.reflog", "appending to the reflog (after the ref moved)" },
    { "model.checkout", "the fsync of a checked-out state.h5" },
};
#define NPOINTS ((int)(sizeof fault_points / sizeof fault_points[0]))

bool fault_point_known(const char *name)
{
    for (int i = 0; i < NPOINTS; i++)
        if (!strcmp(fault_points[i].name, name)) return true;
    return false;
}

void fault_point_names(const char *module, char *out, size_t len)
{
    size_t mlen = module ? strlen(module) : 0, used = 0;
    out[0] = '\0';
    for (int i = 0; i < NPOINTS && used < len; i++) {
        if (mlen && (strncmp(fault_points[i].name, module, mlen) != 0 || fault_points[i].name[mlen] != '.')) continue;
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? ", " : "", fault_points[i].name);
    }
}

#ifdef CHAOS

static bool module_known(const char *module, size_t len)
{
    for (int i = 0; i < NPOINTS; i++)
        if (!strncmp(fault_points[i].name, module, len) && fault_points[i].name[len] == '.') return true;
    return false;
}

static bool parse_count(const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) return false;
    *out = v;
    return true;
}

/* One rule; kept in f when it is f's module's. */
static bool rule_parse(fault_plan *f, char *item)
{
    char *colon = strchr(item, ':');
    if (!colon) return false;
    *colon = '\0';
    char *name = colon + 1, *slash = strchr(name, '/'), *at = strchr(name, '@'), *hash = strchr(item, '#');
    int64_t step = -1, nth = 0, rank = 0;
    if (slash) {
        *slash = '\0';
        if (!parse_count(slash + 1, 0, &rank) || rank > INT32_MAX) return false;
    }
    if (at) {
        *at = '\0';
        if (hash || !parse_count(at + 1, 0, &step)) return false;
    }
    int err = !strcmp(name, "EIO") ? EIO : !strcmp(name, "ENOSPC") ? ENOSPC : !strcmp(name, "KILL") ? FAULT_KILL : 0;
    if (err == 0) return false;
    size_t mlen;
    if (hash) {
        *hash = '\0';
        mlen = strlen(item);
        if (!module_known(item, mlen) || !parse_count(hash + 1, 1, &nth)) return false;
    } else {
        if (!fault_point_known(item)) return false;
        mlen = (size_t)(strchr(item, '.') - item);
    }
    if (strlen(f->module) != mlen || strncmp(f->module, item, mlen) != 0) return true;  /* another module's */
    if (f->n == FAULT_RULES_MAX) return false;
    snprintf(f->rule[f->n].point, sizeof f->rule[f->n].point, "%s", hash ? "" : item);
    f->rule[f->n].err = err;
    f->rule[f->n].step = step;
    f->rule[f->n].nth = nth;
    f->rule[f->n].rank = (int)rank;
    f->n++;
    return true;
}

status fault_plan_init(fault_plan *f, const char *module)
{
    memset(f, 0, sizeof *f);
    snprintf(f->module, sizeof f->module, "%s", module);
    atomic_init(&f->reached, 0);
    const char *env = getenv("NEBULA_CHAOS_FAULT");
    if (!env || !env[0]) return STATUS_OK;
    char text[1024], *save = NULL;
    snprintf(text, sizeof text, "%s", env);
    for (char *item = strtok_r(text, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char shown[256], points[2048];
        snprintf(shown, sizeof shown, "%s", item);
        if (rule_parse(f, item)) continue;
        fault_point_names(NULL, points, sizeof points);
        log_error("NEBULA_CHAOS_FAULT: cannot use '%s' (at most %d rules per module, comma-separated, each "
                  "POINT:ERRNO[@STEP][/RANK] or MODULE#N:ERRNO[/RANK]; POINT one of %s; MODULE the part before "
                  "the dot; ERRNO EIO, ENOSPC or KILL; STEP a step, N >= 1, RANK the rank it fires on, 0 without)", shown,
                  FAULT_RULES_MAX, points);
        return STATUS_INPUT;
    }
    if (f->n) log_warn0("chaos: %d %s fault(s) armed from NEBULA_CHAOS_FAULT=%s", f->n, module, env);
    return STATUS_OK;
}

int fault_errno(fault_plan *f, const char *point, int64_t step)
{
    if (!f || f->n == 0) return 0;
    long long nth = atomic_fetch_add(&f->reached, 1) + 1;
    for (int i = 0; i < f->n; i++) {
        if (f->rule[i].rank != f->rank) continue;
        bool hit = f->rule[i].nth ? f->rule[i].nth == nth
                                  : !strcmp(f->rule[i].point, point) && (f->rule[i].step < 0 || f->rule[i].step == step);
        if (!hit) continue;
        log_warn("chaos: injected %s at %s (step %" PRId64 ", point #%lld)",
                 f->rule[i].err == ENOSPC ? "ENOSPC" : f->rule[i].err == FAULT_KILL ? "SIGKILL" : "EIO", point, step, nth);
        if (f->rule[i].err == FAULT_KILL) {  /* a crash at this point: nothing after it runs */
            fflush(stdout);
            fflush(stderr);
            raise(SIGKILL);
        }
        return f->rule[i].err;
    }
    return 0;
}

bool fault_step_at(const char *var, long tick, long step, bool say)
{
    /* var = "5,6,7": the 5th, 6th and 7th step this process runs (counted across
     * rollbacks, so a redone step is clean), on every rank */
    const char *list = getenv(var);
    for (const char *p = list; p && *p;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p) break;
        if (t == tick) {
            if (say) printf("chaos: %s at step %ld (the %ld-th step run)\n", var, step, tick);
            return true;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

#else  /* the normal build: no rules, no environment read, no fault code */

status fault_plan_init(fault_plan *f, const char *module)
{
    memset(f, 0, sizeof *f);
    snprintf(f->module, sizeof f->module, "%s", module);
    return STATUS_OK;
}

int fault_errno(fault_plan *f, const char *point, int64_t step)
{
    (void)f, (void)point, (void)step;
    return 0;
}

bool fault_step_at(const char *var, long tick, long step, bool say)
{
    (void)var, (void)tick, (void)step, (void)say;
    return false;
}
#endif
