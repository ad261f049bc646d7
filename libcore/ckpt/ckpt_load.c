/* ckpt_load — the load policy of ckpt_load (ckpt.h): `none`, an explicit checkpoint
 * directory, or `auto`, which walks the run's checkpoints newest first and takes the first
 * that opens, verifies and passes the content's value check, naming every one it skips
 * with its reason. The file itself is read by ckpt_read.c.
 *
 * The one design decision: a refusal is sorted by where its cause lies. Trouble in the
 * checkpoint itself (no or a damaged marker, a missing or unreadable file, damaged HDF5
 * metadata, a checksum, a value no run writes) makes `auto` fall back to an older one;
 * a checkpoint that does not fit the run (another model or parameter table, a newer
 * format) stops it at once, because the older ones were written by the same run. Every
 * verdict is agreed by all ranks, so every rank loads the same checkpoint. */
#include "ckpt_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- load ---------------------------------------------------------------------- */

static const char *hint_older =
    "HINT: resume from an older committed checkpoint of this run, or with `auto`, which takes the newest "
    "one that verifies";
static const char *hint_model =
    "HINT: resume from a checkpoint written by the same model and parameter layout (model.name and the "
    "architecture keys of its config)";

/* Whether a load's status is a verdict on the checkpoint (it is damaged, refused, or does
 * not fit this run), as opposed to the job's own trouble: a rank that missed a deadline
 * (STATUS_TIMEOUT) or failed. After the latter no further collective can be trusted to
 * complete, so `auto` stops at once rather than trying older checkpoints. */
static bool is_verdict(status st)
{
    return st == STATUS_INPUT || st == STATUS_IO || st == STATUS_CORRUPT;
}

/* One checkpoint directory, collectively. *damaged: the trouble lies in the checkpoint
 * itself (its marker, its file, a checksum, a value c->check refuses), not in how it fits
 * this run (another model or table, a newer format): `auto` skips the first kind. own:
 * the directory is an entry of the run's own checkpoint directory (`auto`), whose files
 * are never read through a symbolic link. info->refused is this checkpoint's alone: it
 * is cleared first, so a refusal of a newer checkpoint never colours this one's status. */
static status load_one(MPI_Comm comm, const char *path, bool own, ckpt_content *c, ckpt_info *info, char *why,
                       bool *damaged)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    int64_t marker_step = -1;
    status st = STATUS_OK;
    *damaged = false;
    info->refused = false;
    if (rank == 0) {
        struct stat sb = { 0 };
        if ((own ? lstat(path, &sb) : stat(path, &sb)) != 0 || !S_ISDIR(sb.st_mode)) {
            snprintf(why, CKPT_WHY_MAX, own && S_ISLNK(sb.st_mode) ? "is a symbolic link: a checkpoint of the run "
                     "directory is never read through a link" : "no such checkpoint directory");
            st = STATUS_INPUT;
        } else {
            st = ckpt_dir_marker(path, own, &marker_step, why);
        }
    }
    comm_ctl ctl = comm_ctl_watched(ckpt_ctl(comm, c->timeout_s), c->wd);
    st = ckpt_agree(ctl, st, why, CKPT_WHY_MAX);
    if (st != STATUS_OK && !is_verdict(st)) return st;
    if (st != STATUS_OK) {
        *damaged = true;  /* no marker, or a damaged one: not a checkpoint a loader trusts */
        return st;
    }
    TRY(comm_ctl_bcast(ctl, &marker_step, 1, MPI_INT64_T, 0));
    char h5[CKPT_PATH_MAX];
    snprintf(h5, sizeof h5, "%s/%s", path, CKPT_FILE);
    size_t bytes = 0;  /* what the read moves, for the watchdog's deadline */
    for (int g = 0; g < c->ngroups; g++) bytes += c->groups[g].table->total * sizeof(float);
    char op[96];
    snprintf(op, sizeof op, "checkpoint load of step %" PRId64 ": HDF5 collective I/O", marker_step);
    watchdog_enter(c->wd, op, ckpt_guard_s(c->timeout_s, bytes));
    st = ckpt_file_read(comm, h5, own, marker_step, c, info, why);
    watchdog_leave(c->wd);
    *damaged = st == STATUS_CORRUPT || st == STATUS_IO;
    if (!is_verdict(st)) info->refused = false;  /* a timeout after a value check is a timeout */
    TRY(st);
    snprintf(info->path, sizeof info->path, "%s", path);
    return STATUS_OK;
}

static void log_loaded(const ckpt_info *info)
{
    if (info->resharded)
        log_info0("resuming from %s (step %" PRId64 "), written by %d ranks: resharded, per-rank state is "
                  "rank 0's", info->path, info->step, info->world_size);
    else
        log_info0("resuming from %s (step %" PRId64 ")", info->path, info->step);
}

/* An explicit path is read as the run's own (never through a link) when it names an entry
 * of the run's checkpoint directory dir as dir spells it: what a rollback loads. */
static bool own_entry(const char *dir, const char *path)
{
    size_t n = dir ? strlen(dir) : 0;
    return n > 0 && !strncmp(path, dir, n) && path[n] == '/' && !strchr(path + n + 1, '/');
}

static status load_explicit(MPI_Comm comm, const char *dir, const char *path, ckpt_content *c, ckpt_info *info)
{
    char why[CKPT_WHY_MAX] = "";
    bool damaged;
    status st = load_one(comm, path, own_entry(dir, path), c, info, why, &damaged);
    if (st == STATUS_OK) {
        log_loaded(info);
        return STATUS_OK;
    }
    if (info->refused) st = STATUS_INPUT;  /* intact, but holding what no run writes: refused, exit 2 */
    log_error0("cannot load checkpoint %s: %s", path, why);
    if (!strstr(why, "HINT:"))  /* an older format version names its fix itself */
        log_error0("%s", damaged ? hint_older : hint_model);
    return st;
}

/* `auto`: every entry newest first, until one loads. Each one refused is kept with its
 * reason and reported once the outcome is known: as warnings when an older checkpoint
 * loaded, in the error when none did. */
typedef struct refusal {
    char path[CKPT_PATH_MAX];
    char why[CKPT_WHY_MAX];
} refusal;

static void refusal_add(refusal *list, int *n, const char *path, const char *why)
{
    snprintf(list[*n].path, sizeof list[*n].path, "%s", path);
    snprintf(list[*n].why, sizeof list[*n].why, "%s", why);
    (*n)++;
}

static status load_auto(MPI_Comm comm, const char *dir, ckpt_content *c, ckpt_info *info)
{
    int rank, n = 0, nrefused = 0, tried = 0;
    MPI_Comm_rank(comm, &rank);
    ckpt_entry *e = NULL;
    comm_ctl ctl = comm_ctl_watched(ckpt_ctl(comm, c->timeout_s), c->wd);
    TRY(ckpt_agree(ctl, rank == 0 ? ckpt_dir_list(dir, &e, &n) : STATUS_OK, NULL, 0));
    TRY(comm_ctl_bcast(ctl, &n, 1, MPI_INT, 0));
    if (rank != 0 && n > 0) {
        e = malloc((size_t)n * sizeof *e);
        CHECK(e, "out of memory listing checkpoints");
    }
    if (n > 0) TRY(comm_ctl_bcast(ctl, e, n * (int)sizeof *e, MPI_BYTE, 0));
    refusal *refused = malloc(((size_t)n + 1) * sizeof *refused);
    CHECK(refused, "out of memory listing checkpoints");
    status st = STATUS_OK;
    bool loaded = false;
    for (int i = 0; i < n && !loaded && st == STATUS_OK; i++) {
        char path[CKPT_PATH_MAX], why[CKPT_WHY_MAX] = "";
        ckpt_dir_entry_path(path, sizeof path, dir, &e[i]);
        if (e[i].kind == CKPT_ENTRY_TMP || e[i].kind == CKPT_ENTRY_OLD) {
            refusal_add(refused, &nrefused, path, e[i].kind == CKPT_ENTRY_TMP ? "an unfinished save, never committed"
                                                                              : "a checkpoint being replaced");
            continue;
        }
        if (e[i].kind == CKPT_ENTRY_LINK) {
            refusal_add(refused, &nrefused, path, "is a symbolic link: a checkpoint of the run directory is never "
                        "read through a link");
            continue;
        }
        if (e[i].kind == CKPT_ENTRY_UNCOMMITTED) {
            snprintf(why, sizeof why, "not committed (no %s marker: its save did not finish)", CKPT_MARKER);
            refusal_add(refused, &nrefused, path, why);
            continue;
        }
        tried++;
        bool damaged;
        status s = load_one(comm, path, true, c, info, why, &damaged);
        if (s == STATUS_OK) {
            loaded = true;
        } else if (!is_verdict(s)) {  /* a rank missed a deadline or failed: no more collectives */
            for (int k = 0; k < nrefused; k++) log_warn0("skipping %s: %s", refused[k].path, refused[k].why);
            log_error0("loading checkpoint %s stopped: %s", path,
                       why[0] ? why : s == STATUS_TIMEOUT ? "a rank missed the deadline (comm.timeout)" : "a rank failed");
            st = s;
        } else if (damaged || info->refused) {
            refusal_add(refused, &nrefused, path, why);
        } else {  /* it does not fit this run (another model or table, a newer format): nor will older ones */
            for (int k = 0; k < nrefused; k++) log_warn0("skipping %s: %s", refused[k].path, refused[k].why);
            log_error0("cannot load checkpoint %s: %s", path, why);
            if (!strstr(why, "HINT:")) log_error0("%s", hint_model);
            st = s;
        }
    }
    free(e);
    if (st != STATUS_OK) {
        free(refused);
        return st;
    }
    info->skipped = nrefused;
    if (loaded) {
        for (int k = 0; k < nrefused; k++)
            log_warn0("skipping %s: %s; falling back to an older checkpoint", refused[k].path, refused[k].why);
        free(refused);
        log_loaded(info);
        return STATUS_OK;
    }
    info->step = -1;
    if (tried > 0) {
        log_error0("no checkpoint under %s can be resumed: %d committed, each refused:", dir, tried);
        for (int k = 0; k < nrefused; k++) log_error0("  %s: %s", refused[k].path, refused[k].why);
        log_error0("HINT: the run's checkpoints are damaged; start again with `none`, or restore the "
                   "directory from a copy");
        free(refused);
        return STATUS_INPUT;
    }
    for (int k = 0; k < nrefused; k++) log_warn0("skipping %s: %s", refused[k].path, refused[k].why);
    free(refused);
    log_info0("no committed checkpoint under %s: starting from step 0", dir);
    return STATUS_OK;
}

status ckpt_load(MPI_Comm comm, const char *dir, const char *which, ckpt_content *c, ckpt_info *info)
{
    CHECK(which && c && info && c->model, "ckpt_load needs `which`, a content with a model, and an info");
    memset(info, 0, sizeof *info);
    info->step = -1;
    if (!strcmp(which, "none")) return STATUS_OK;
    CHECK(ckpt_host_little_endian(), "checkpoints hash float32 as stored, little-endian; this host is big-endian");
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    CHECK(strcmp(which, "auto") != 0 || dir, "ckpt_load(\"auto\") needs the checkpoint directory");
    status st = strcmp(which, "auto") != 0 ? load_explicit(comm, dir, which, c, info) : load_auto(comm, dir, c, info);
    ckpt_h5_quiet_end(q);
    return st;
}
