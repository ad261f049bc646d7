/* ckpt_dir — checkpoint directories: names, listing, the commit protocol and pruning.
 *
 * The one design decision: a checkpoint is trusted only through its name and its
 * marker, both made durable in order (Redis's temp + fsync + rename, llm.c's DONE
 * file): step_N/ appears by one rename of a complete, fsync'd .step_N.tmp/, and
 * step_N/COMMITTED appears by one rename of a fsync'd temporary, each followed by an
 * fsync of the directory that holds the new name. Everything else under the
 * checkpoint directory is debris that loaders skip and later commits remove.
 * Plain POSIX, no MPI and no HDF5: rank 0 runs it, or the background thread of an
 * asynchronous save. */
#include "ckpt_impl.h"
#include "base/path.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ckpt_dir_step_path(char *out, size_t len, const char *dir, int64_t step)
{
    snprintf(out, len, "%s/step_%08" PRId64, dir, step);
}

void ckpt_dir_tmp_path(char *out, size_t len, const char *dir, int64_t step)
{
    snprintf(out, len, "%s/.step_%08" PRId64 ".tmp", dir, step);
}

void ckpt_path_join(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, CKPT_PATH_MAX, "%s/%s", dir, name);
    CHECK(n > 0 && n < CKPT_PATH_MAX, "a checkpoint path is longer than CKPT_PATH_MAX");
}

void ckpt_dir_old_path(char *out, size_t len, const char *dir, int64_t step)
{
    snprintf(out, len, "%s/.step_%08" PRId64 ".old", dir, step);
}

void ckpt_dir_entry_path(char *out, size_t len, const char *dir, const ckpt_entry *e)
{
    if (e->kind == CKPT_ENTRY_TMP) ckpt_dir_tmp_path(out, len, dir, e->step);
    else if (e->kind == CKPT_ENTRY_OLD) ckpt_dir_old_path(out, len, dir, e->step);
    else ckpt_dir_step_path(out, len, dir, e->step);
}

/* fsync of path by name: 0, or -1 with errno that of the failed call and *op naming it.
 * An injected fault (fault_errno != 0) fails the fsync; the open is part of that point. */
static int fsync_path(const char *path, int fault_errno, const char **op)
{
    *op = "fsync of";
    if (fault_errno) {
        errno = fault_errno;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *op = "open to fsync";
        return -1;
    }
    int rc = fsync(fd), err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* Failures here log and return with errno still that of the failed call: the
 * caller's message and HINT depend on it (ENOSPC or not). */
status ckpt_dir_fsync_at(const char *path, int fault_errno)
{
    const char *op;
    if (fsync_path(path, fault_errno, &op) == 0) return STATUS_OK;
    int err = errno;
    log_error("%s %s failed: %s", op, path, log_errno_str());
    errno = err;
    return STATUS_IO;
}

status ckpt_dir_fsync(const char *path)
{
    return ckpt_dir_fsync_at(path, 0);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* rm -rf path; a missing path is fine. */
static status rmtree(const char *path)
{
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
        log_warn("cannot remove %s: %s", path, log_errno_str());
        return STATUS_IO;
    }
    return STATUS_OK;
}

/* Digits followed by exactly `suffix`. */
static bool parse_step(const char *s, const char *suffix, int64_t *step)
{
    if (!isdigit((unsigned char)s[0])) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || v < 0 || strcmp(end, suffix) != 0) return false;
    *step = v;
    return true;
}

static int entry_cmp(const void *a, const void *b)
{
    const ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;  /* newest first */
    return (int)y->kind - (int)x->kind;                         /* debris before the commit */
}

status ckpt_dir_list(const char *dir, ckpt_entry **entries, int *n)
{
    *entries = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return STATUS_OK;
        log_error("cannot list checkpoint directory %s: %s", dir, log_errno_str());
        return STATUS_IO;
    }
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        ckpt_entry e;
        if (!strncmp(de->d_name, "step_", 5) && parse_step(de->d_name + 5, "", &e.step)) {
            char marker[CKPT_PATH_MAX];
            struct stat sb;
            char step_dir[CKPT_PATH_MAX];
            ckpt_path_join(step_dir, dir, de->d_name);
            ckpt_path_join(marker, step_dir, CKPT_MARKER);
            /* lstat: a step_N planted as a link is listed as one, never entered (the
             * directory dir itself may be a link, to a scratch file system); a marker
             * that is a link counts as present, and its read (ckpt_dir_marker, own)
             * refuses it by name */
            if (lstat(step_dir, &sb) == 0 && S_ISLNK(sb.st_mode)) e.kind = CKPT_ENTRY_LINK;
            else e.kind = lstat(marker, &sb) == 0 ? CKPT_ENTRY_COMMITTED : CKPT_ENTRY_UNCOMMITTED;
        } else if (!strncmp(de->d_name, ".step_", 6) && parse_step(de->d_name + 6, ".tmp", &e.step)) {
            e.kind = CKPT_ENTRY_TMP;
        } else if (!strncmp(de->d_name, ".step_", 6) && parse_step(de->d_name + 6, ".old", &e.step)) {
            e.kind = CKPT_ENTRY_OLD;
        } else {
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *grown = realloc(*entries, (size_t)cap * sizeof **entries);
            CHECK(grown, "out of memory listing checkpoints");
            *entries = grown;
        }
        (*entries)[(*n)++] = e;
    }
    closedir(d);
    if (*n > 1) qsort(*entries, (size_t)*n, sizeof **entries, entry_cmp);
    return STATUS_OK;
}

status ckpt_dir_prepare_tmp(const char *dir, int64_t step)
{
    return ckpt_dir_prepare_tmp_at(dir, step, NULL);
}

status ckpt_dir_prepare_tmp_at(const char *dir, int64_t step, fault_plan *chaos)
{
    char tmp[CKPT_PATH_MAX];
    ckpt_dir_tmp_path(tmp, sizeof tmp, dir, step);
    rmtree(tmp);  /* debris of an earlier attempt at this step */
    int inject = FAULT_ERRNO(chaos, "ckpt.mkdir", step);
    errno = inject;
    if (inject || mkdir(tmp, 0755) != 0) {
        int err = errno;
        log_error("cannot create %s: %s", tmp, log_errno_str());
        errno = err;
        return STATUS_IO;
    }
    return STATUS_OK;
}

status ckpt_dir_marker(const char *path, bool own, int64_t *step, char *why)
{
    char marker[CKPT_PATH_MAX], text[64];
    ckpt_path_join(marker, path, CKPT_MARKER);
    int fd;
    struct stat sb;
    char kind[160];
    int rc = own ? path_open_own(marker, &fd, &sb, 64, kind, sizeof kind)
                 : path_open_regular(marker, &fd, &sb, 64, kind, sizeof kind);
    if (rc != 0) {
        if (errno == ENOENT) {
            snprintf(why, CKPT_WHY_MAX, "not a committed checkpoint (no %s marker: its save did not finish)",
                     CKPT_MARKER);
            return STATUS_INPUT;
        }
        snprintf(why, CKPT_WHY_MAX, "its %s marker %s", CKPT_MARKER, kind);
        return STATUS_IO;
    }
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    text[got > 0 ? got : 0] = '\0';
    char *nl = strchr(text, '\n');
    if (nl) *nl = '\0';
    if (got <= 0 || !parse_step(text, "", step)) {
        snprintf(why, CKPT_WHY_MAX, "its %s marker is damaged (expected the step number)", CKPT_MARKER);
        return STATUS_CORRUPT;
    }
    return STATUS_OK;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* step_dir/COMMITTED holding the step: temporary name, fsync, rename, fsync step_dir;
 * each call a fault point of `chaos` (NULL: none). A failure leaves no marker, not
 * even one renamed but not durable: a save reported failed is never committed. */
static status write_marker(const char *step_dir, int64_t step, fault_plan *chaos)
{
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], text[32];
    ckpt_path_join(tmp, step_dir, CKPT_MARKER ".tmp");
    ckpt_path_join(fin, step_dir, CKPT_MARKER);
    int len = snprintf(text, sizeof text, "%" PRId64 "\n", step);
    int inject = FAULT_ERRNO(chaos, "ckpt.marker_open", step);
    errno = inject;
    int fd = inject ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) goto unlink_tmp;
    errno = inject = FAULT_ERRNO(chaos, "ckpt.marker", step);
    int rc = inject ? -1 : write_all(fd, text, (size_t)len);
    if (rc == 0) {
        errno = inject = FAULT_ERRNO(chaos, "ckpt.marker_fsync", step);
        rc = inject ? -1 : fsync(fd);
    }
    int err = errno;
    inject = FAULT_ERRNO(chaos, "ckpt.marker_close", step);
    int closed = close(fd);  /* the descriptor goes either way */
    if (inject) {
        closed = -1;
        errno = inject;
    }
    if (closed != 0 && rc == 0) rc = -1;
    else errno = err;
    if (rc != 0) goto unlink_tmp;
    errno = inject = FAULT_ERRNO(chaos, "ckpt.marker_rename", step);
    if (inject || rename(tmp, fin) != 0) goto unlink_tmp;
    if (ckpt_dir_fsync_at(step_dir, FAULT_ERRNO(chaos, "ckpt.dirsync", step)) != STATUS_OK) {
        err = errno;
        unlink(fin);
        errno = err;
        return STATUS_IO;
    }
    return STATUS_OK;
unlink_tmp:
    err = errno;
    log_error("cannot write the commit marker %s: %s", fin, log_errno_str());
    unlink(tmp);
    errno = err;
    return STATUS_IO;
}

/* Removes a committed checkpoint: marker first (durably), so a crash half-way leaves
 * debris rather than a committed checkpoint with missing files. */
static void remove_committed(const char *path, int64_t step, fault_plan *chaos)
{
    char marker[CKPT_PATH_MAX];
    ckpt_path_join(marker, path, CKPT_MARKER);
    int inject = FAULT_ERRNO(chaos, "ckpt.prune", step);
    errno = inject;
    if ((inject || unlink(marker) != 0) && errno != ENOENT) {
        log_warn("cannot remove %s: %s; old checkpoint kept", marker, log_errno_str());
        return;
    }
    const char *op;
    if (fsync_path(path, FAULT_ERRNO(chaos, "ckpt.dirsync", step), &op) != 0) {  /* a warning: pruning is optional */
        log_warn("%s %s failed: %s; left uncommitted, a later save removes it", op, path, log_errno_str());
        return;
    }
    rmtree(path);
}

/* After step is committed: keeps the keep_last newest committed checkpoints up to
 * step (step included), removes older ones and older debris. Newer checkpoints (a run
 * resumed from an older one) are left alone with a warning: `auto` would take them.
 * Failures here only warn: the new checkpoint is committed either way. */
static void prune(const char *dir, int64_t step, int keep_last, fault_plan *chaos)
{
    ckpt_entry *e;
    int n, kept = 1;
    if (ckpt_dir_list(dir, &e, &n) != STATUS_OK) return;
    for (int i = 0; i < n; i++) {
        char path[CKPT_PATH_MAX];
        ckpt_dir_entry_path(path, sizeof path, dir, &e[i]);
        if (e[i].step > step) {
            if (e[i].kind == CKPT_ENTRY_COMMITTED)
                log_warn("%s is newer than the checkpoint just written (step %" PRId64 "): resuming with "
                         "`auto` would take it; remove it if this run replaces it", path, step);
            continue;
        }
        if (e[i].step == step || e[i].kind == CKPT_ENTRY_LINK) continue;  /* a link: not the run's to remove */
        if (e[i].kind != CKPT_ENTRY_COMMITTED) rmtree(path);
        else if (kept < keep_last) kept++;
        else remove_committed(path, step, chaos);
    }
    free(e);
}

status ckpt_dir_commit(const char *dir, int64_t step, int keep_last, ckpt_fault fault)
{
    return ckpt_dir_commit_at(dir, step, keep_last, fault, NULL);
}

status ckpt_dir_commit_at(const char *dir, int64_t step, int keep_last, ckpt_fault fault, fault_plan *chaos)
{
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], old[CKPT_PATH_MAX];
    ckpt_dir_tmp_path(tmp, sizeof tmp, dir, step);
    ckpt_dir_step_path(fin, sizeof fin, dir, step);
    ckpt_dir_old_path(old, sizeof old, dir, step);
    TRY(ckpt_dir_fsync_at(tmp, FAULT_ERRNO(chaos, "ckpt.dirsync", step)));  /* the name state.h5 inside it */
    if (fault == CKPT_FAULT_BEFORE_RENAME) {
        log_warn("fault injected: stopping before the rename of %s", tmp);
        return STATUS_IO;
    }
    /* A checkpoint of this step already exists (committed, or debris of a crash before
     * its marker): move it aside under a name loaders skip, remove it after the commit. */
    struct stat sb;
    bool replacing = stat(fin, &sb) == 0;
    if (replacing) {
        rmtree(old);
        int inject = FAULT_ERRNO(chaos, "ckpt.moveaside", step);
        errno = inject;
        if (inject || rename(fin, old) != 0) {
            int err = errno;
            log_error("cannot move the existing %s aside: %s", fin, log_errno_str());
            errno = err;
            return STATUS_IO;
        }
    }
    int inject = FAULT_ERRNO(chaos, "ckpt.rename", step);
    errno = inject;
    if (inject || rename(tmp, fin) != 0) {
        int err = errno;
        log_error("cannot rename %s to %s: %s", tmp, fin, log_errno_str());
        errno = err;
        return STATUS_IO;
    }
    TRY(ckpt_dir_fsync_at(dir, FAULT_ERRNO(chaos, "ckpt.dirsync", step)));
    if (fault == CKPT_FAULT_BEFORE_MARKER) {
        log_warn("fault injected: stopping before the commit marker of %s", fin);
        return STATUS_IO;
    }
    TRY(write_marker(fin, step, chaos));
    log_info("checkpoint committed: %s", fin);
    if (replacing) rmtree(old);
    prune(dir, step, keep_last, chaos);
    return STATUS_OK;
}

void ckpt_dir_discard(const char *dir, int64_t step)
{
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], old[CKPT_PATH_MAX], why[CKPT_WHY_MAX];
    ckpt_dir_tmp_path(tmp, sizeof tmp, dir, step);
    ckpt_dir_step_path(fin, sizeof fin, dir, step);
    ckpt_dir_old_path(old, sizeof old, dir, step);
    struct stat sb;
    int64_t marked;
    if (stat(tmp, &sb) == 0 && rmtree(tmp) == STATUS_OK)
        log_info("removed %s, the unfinished save of step %" PRId64, tmp, step);
    /* Renamed but never committed: the failed save's own; a damaged marker is left to the loaders. */
    if (stat(fin, &sb) == 0 && ckpt_dir_marker(fin, true, &marked, why) == STATUS_INPUT && rmtree(fin) == STATUS_OK)
        log_info("removed %s, renamed but never committed", fin);
    /* A committed checkpoint of this step that the save had moved aside goes back. */
    if (stat(fin, &sb) != 0 && stat(old, &sb) == 0 && ckpt_dir_marker(old, true, &marked, why) == STATUS_OK) {
        if (rename(old, fin) == 0 && ckpt_dir_fsync(dir) == STATUS_OK)
            log_info("put the committed checkpoint of step %" PRId64 " back at %s", step, fin);
        else
            log_warn("cannot move %s back to %s: %s", old, fin, log_errno_str());
    }
}

bool ckpt_last_committed(const char *dir, char *path, size_t len, int64_t *step)
{
    return ckpt_committed_before(dir, INT64_MAX, path, len, step);
}

bool ckpt_committed_before(const char *dir, int64_t before, char *path, size_t len, int64_t *step)
{
    ckpt_entry *e;
    int n;
    bool found = false;
    if (ckpt_dir_list(dir, &e, &n) != STATUS_OK) return false;
    for (int i = 0; i < n && !found; i++) {
        if (e[i].kind != CKPT_ENTRY_COMMITTED || e[i].step >= before) continue;
        ckpt_dir_entry_path(path, len, dir, &e[i]);
        *step = e[i].step;
        found = true;
    }
    free(e);
    return found;
}

int ckpt_retire_after(const char *dir, int64_t step)
{
    ckpt_entry *e;
    int n, removed = 0;
    if (ckpt_dir_list(dir, &e, &n) != STATUS_OK) return 0;
    for (int i = 0; i < n; i++) {
        if (e[i].step <= step || e[i].kind == CKPT_ENTRY_LINK) continue;  /* a link: never loaded, left alone */
        char path[CKPT_PATH_MAX];
        ckpt_dir_entry_path(path, sizeof path, dir, &e[i]);
        if (e[i].kind == CKPT_ENTRY_COMMITTED) {
            remove_committed(path, e[i].step, NULL);
            removed++;
        } else {
            rmtree(path);
        }
    }
    free(e);
    return removed;
}
