/* repo_work — the work tree: ROOT/ckpt/, where a checkout puts the commit's checkpoint
 * and where a run started in ROOT (--run-dir ROOT) writes new ones. worktree.json lists
 * each checkpoint a checkout or commit put there with its file's hash and stat.
 *
 * The one design decision: a checkpoint counts as committed only when its state.h5 still
 * hashes to what was recorded (the hash is recomputed when size, mtime or inode changed),
 * and a checkout removes only committed checkpoints: new or changed ones make it refuse,
 * listing them, unless --force, so no training result is lost to a checkout. */
#include "repo_impl.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/path.h"

static json_t *index_read(const repo *r)
{
    char p[REPO_PATH_MAX + 32], why[256], *text = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/worktree.json", r->dir);
    json_t *j = NULL;
    if (repo_read_file(p, 1 << 24, &text, &n, why, sizeof why) == STATUS_OK) j = json_loadb(text, n, 0, NULL);
    free(text);
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_object();
    }
    return j;
}

static status index_write(repo *r, json_t *j)
{
    char p[REPO_PATH_MAX + 32], *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    snprintf(p, sizeof p, "%s/worktree.json", r->dir);
    status st = repo_write_file(p, text, strlen(text), &r->chaos, "model.work");
    free(text);
    return st;
}

/* XXH3-128 of a whole file; false when it cannot be read. */
static bool hash_file(const char *path, repo_id *id, struct stat *sb)
{
    int fd;
    char why[256];
    if (path_open_own(path, &fd, sb, 0, why, sizeof why) != 0) return false;
    XXH3_state_t *h = XXH3_createState();
    char *buf = malloc(1 << 20);
    CHECK(h && buf, "out of memory hashing a checkpoint");
    XXH3_128bits_reset(h);
    bool ok = true;
    for (uint64_t off = 0, n = (uint64_t)sb->st_size; off < n && ok; off += 1 << 20) {
        uint64_t k = n - off < (1 << 20) ? n - off : (1 << 20);
        ok = path_read_all_at(fd, buf, k, off) == 0;
        XXH3_128bits_update(h, buf, k);
    }
    close(fd);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    memcpy(id->b, c.digest, 16);
    XXH3_freeState(h);
    free(buf);
    return ok;
}

static json_t *entry(const struct stat *sb, const repo_id *hash)
{
    char hex[33];
    repo_id_hex(hash, hex);
    return json_pack("{s:s, s:I, s:I, s:I}", "file_hash", hex, "bytes", (json_int_t)sb->st_size, "ino",
                     (json_int_t)sb->st_ino, "mtime_ns",
                     (json_int_t)((int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec));
}

status repo_work_record(repo *r, const char *name, const repo_manifest *m)
{
    char p[REPO_PATH_MAX + 300];
    struct stat sb;
    snprintf(p, sizeof p, "%s/ckpt/%s/state.h5", r->root, name);
    if (lstat(p, &sb) != 0) return STATUS_OK;
    json_t *j = index_read(r);
    json_object_set_new(j, name, entry(&sb, &m->file_hash));
    status st = index_write(r, j);
    json_decref(j);
    return st;
}

/* Whether ROOT/ckpt/name is a checkpoint the index vouches for (rehashing when its stat changed). */
static bool entry_clean(const repo *r, json_t *e, const char *name)
{
    char p[REPO_PATH_MAX + 300], m[REPO_PATH_MAX + 300];
    struct stat sb;
    repo_id want, got;
    snprintf(p, sizeof p, "%s/ckpt/%s/state.h5", r->root, name);
    snprintf(m, sizeof m, "%s/ckpt/%s/COMMITTED", r->root, name);
    const char *hex = json_string_value(json_object_get(e, "file_hash"));
    if (!e || !hex || !repo_id_parse(hex, &want) || lstat(p, &sb) != 0 || lstat(m, &sb) != 0 || lstat(p, &sb) != 0)
        return false;
    int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    if (json_integer_value(json_object_get(e, "bytes")) == (json_int_t)sb.st_size &&
        json_integer_value(json_object_get(e, "ino")) == (json_int_t)sb.st_ino &&
        json_integer_value(json_object_get(e, "mtime_ns")) == (json_int_t)mt)
        return true;
    return hash_file(p, &got, &sb) && repo_id_eq(&got, &want);
}

status repo_work_status(repo *r, repo_status *st)
{
    memset(st, 0, sizeof *st);
    if (r->bare) return STATUS_OK;
    char dir[REPO_PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/ckpt", r->root);
    DIR *d = opendir(dir);
    if (!d) return STATUS_OK;
    json_t *j = index_read(r);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "step_", 5) != 0) continue;
        char p[REPO_PATH_MAX + 300];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        /* only a real directory can be a committed checkpoint: a link is never vouched for */
        bool clean = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && entry_clean(r, json_object_get(j, e->d_name), e->d_name);
        if (strlen(e->d_name) >= sizeof st->clean[0]) continue;  /* not a name a checkpoint has */
        if (clean && st->nclean < REPO_WORK_MAX) snprintf(st->clean[st->nclean++], sizeof st->clean[0], "%s", e->d_name);
        if (!clean && st->ndirty < REPO_WORK_MAX) snprintf(st->dirty[st->ndirty++], sizeof st->dirty[0], "%s", e->d_name);
    }
    closedir(d);
    json_decref(j);
    return STATUS_OK;
}

/* Removes a checkpoint directory of the work tree: its marker first (a loader then no
 * longer trusts it), then its files, then itself. */
static status remove_ckpt(const char *dir)
{
    char p[REPO_PATH_MAX + 600];
    struct stat sb;
    if (lstat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {  /* a link (checkout --force): the link goes, not its target */
        if (unlink(dir) == 0) return STATUS_OK;
        goto fail;
    }
    DIR *probe = opendir(dir);  /* a subdirectory is not a checkpoint's: refused before the marker goes */
    struct dirent *pe;
    while (probe && (pe = readdir(probe)))
        if (pe->d_type == DT_DIR && strcmp(pe->d_name, ".") && strcmp(pe->d_name, "..")) {
            closedir(probe);
            log_error("%s holds a directory (%s): not a checkpoint a checkout removes", dir, pe->d_name);
            return STATUS_INPUT;
        }
    if (probe) closedir(probe);
    if (snprintf(p, sizeof p, "%s/COMMITTED", dir) >= (int)sizeof p) goto fail;
    if (unlink(p) != 0 && errno != ENOENT) goto fail;
    DIR *d = opendir(dir);
    if (!d) goto fail;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
    }
    closedir(d);
    if (rmdir(dir) != 0) goto fail;
    return STATUS_OK;
fail:
    log_error("cannot remove %s: %s", dir, log_errno_str());
    return STATUS_IO;
}

status repo_work_checkout(repo *r, const repo_id *commit, bool force, char *path, size_t len)
{
    char objdir[REPO_PATH_MAX], why[512], ckdir[REPO_PATH_MAX + 8], target[32];
    repo_objdir(r->dir, objdir, sizeof objdir);
    path[0] = '\0';
    if (r->bare) return STATUS_OK;
    repo_commit c;
    repo_manifest m;
    if (repo_commit_load(objdir, commit, &c, why, sizeof why) != STATUS_OK) {
        log_error("%s", why);
        return STATUS_CORRUPT;
    }
    status st = repo_manifest_load(objdir, &c.manifest, &m, why, sizeof why);
    repo_commit_free(&c);
    if (st == STATUS_OK && (st = repo_manifest_check(objdir, &m, why, sizeof why)) != STATUS_OK) repo_manifest_free(&m);
    if (st != STATUS_OK) {
        log_error("%s", why);
        return st;
    }
    repo_status ws;
    repo_work_status(r, &ws);
    if (ws.ndirty && !force) {
        char list[1024] = "";
        for (int i = 0; i < ws.ndirty; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", ws.dirty[i]);
        log_error("the work tree %s/ckpt holds uncommitted checkpoints (%s): a checkout would remove them; HINT: "
                  "nebula-model commit -m MSG first, or checkout --force to discard them", r->root, list);
        repo_manifest_free(&m);
        return STATUS_INPUT;
    }
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", r->root);
    snprintf(target, sizeof target, "step_%08" PRId64, m.h.step);
    json_t *j = index_read(r);
    /* The commit's checkpoint first, so a refusal (damage found while materialising) leaves
     * the work tree as it was; only a checkpoint under the target's own name goes before. */
    bool keep = false;  /* the target is there already and clean with the same file */
    for (int pass = 0; pass < 2 && st == STATUS_OK; pass++) {
        for (int i = 0; i < ws.nclean + ws.ndirty && st == STATUS_OK; i++) {
            const char *name = i < ws.nclean ? ws.clean[i] : ws.dirty[i - ws.nclean];  /* dirty: --force */
            bool is_target = !strcmp(name, target);
            if (is_target != (pass == 0)) continue;
            const char *h = json_string_value(json_object_get(json_object_get(j, name), "file_hash"));
            repo_id have;
            if (is_target && i < ws.nclean && h && repo_id_parse(h, &have) && repo_id_eq(&have, &m.file_hash)) {
                keep = true;
                continue;
            }
            char p[REPO_PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", ckdir, name);
            st = remove_ckpt(p);
            json_object_del(j, name);
        }
        if (pass == 0 && st == STATUS_OK && !keep) st = repo_materialize(objdir, &m, ckdir, r->threads, &r->chaos, path, len);
    }
    if (st == STATUS_OK) st = index_write(r, j);
    json_decref(j);
    if (st == STATUS_OK && keep) snprintf(path, len, "%s/%s", ckdir, target);
    if (st == STATUS_OK) st = repo_work_record(r, target, &m);
    repo_manifest_free(&m);
    return st;
}
