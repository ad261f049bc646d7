/* ckpt_out — where nebula-ckpt may commit a checkpoint: never over or inside a committed
 * one. A file output (convert --to) follows the output rule of base/path.h
 * (path_output_check: never a device, an input, a run directory's own file or anything
 * inside a checkpoint). A checkpoint output (convert --from and --dtype, reshard and
 * upgrade with --out DIR) commits DIR/step_N through the saver, which would replace a
 * committed step of the same number: DIR must be a directory (or not exist yet), not a
 * committed checkpoint nor inside one, and DIR/step_N must not exist. Refused here,
 * before anything is written: exit 2, naming the checkpoint. Not collective: every rank
 * sees the same file system and reaches the same answer. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/path.h"
#include "offline.h"

/* dir holds a commit marker: a committed (or once committed) checkpoint directory. */
static bool holds_marker(const char *dir)
{
    char marker[PATH_MAX + 16];
    struct stat st;
    snprintf(marker, sizeof marker, "%s/COMMITTED", dir);
    return lstat(marker, &st) == 0;
}

/* The absolute, resolved form of path, which need not exist yet: its deepest existing
 * ancestor through realpath (symbolic links followed), the missing rest appended.
 * false when it cannot be resolved. */
static bool resolve(const char *path, char *out)
{
    char cur[PATH_MAX];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur) return false;
    size_t cut = strlen(cur);  /* cur[0..cut) is the part tried; path + cut the missing rest */
    for (;;) {
        cur[cut] = '\0';
        if (realpath(cut ? cur : ".", out)) break;
        if (errno != ENOENT) return false;
        char *slash = strrchr(cur, '/');
        cut = slash == cur ? 1 : slash ? (size_t)(slash - cur) : 0;  /* "/" always resolves */
    }
    const char *rest = path + cut;
    while (*rest == '/') rest++;
    size_t n = strlen(out);
    if (!*rest) return true;
    if (n + 1 + strlen(rest) >= PATH_MAX) return false;
    if (n > 1) out[n++] = '/';
    strcpy(out + n, rest);
    return true;
}

/* The directory root of a checkpoint output: a directory or nothing yet, not a committed
 * checkpoint, nor inside one. */
static status ckpt_out_check_dir(const char *out)
{
    char abs[PATH_MAX];
    if (!resolve(out, abs)) {
        log_error0("--out %s: cannot resolve the path (%s)", out, strerror(errno));
        return STATUS_INPUT;
    }
    struct stat st;
    if (stat(abs, &st) == 0 && !S_ISDIR(st.st_mode)) {
        log_error0("--out %s is %s; it takes the directory to hold step_N", out, path_kind(st.st_mode));
        return STATUS_INPUT;
    }
    /* the path itself and every directory above it */
    for (;;) {
        if (holds_marker(abs)) {
            log_error0("--out %s: %s is a committed checkpoint; nebula-ckpt never writes over or inside one", out, abs);
            log_error0("HINT: choose an --out outside it (a directory to hold step_N)");
            return STATUS_INPUT;
        }
        char *slash = strrchr(abs, '/');
        if (!slash || !abs[1]) break;
        slash[slash == abs] = '\0';  /* "/x" -> "/", "/x/y" -> "/x" */
    }
    return STATUS_OK;
}

status ckpt_out_check_step(const char *root, int64_t step, const char *same_as)
{
    TRY(ckpt_out_check_dir(root));
    char dir[PATH_MAX], a[PATH_MAX], b[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/step_%08" PRId64, root, step);
    struct stat st;
    if (lstat(dir, &st) != 0) return STATUS_OK;
    if (same_as && realpath(dir, a) && realpath(same_as, b) && !strcmp(a, b)) return STATUS_OK;  /* in place */
    log_error0("--out %s: %s already exists%s; nebula-ckpt never replaces a checkpoint it was not asked to rewrite",
               root, dir, holds_marker(dir) ? " and is committed" : "");
    log_error0("HINT: choose another --out directory, or remove %s first if it is not needed", dir);
    return STATUS_INPUT;
}
