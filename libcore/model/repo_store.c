/* repo_store — a repository's directory: init, open, find, its config.json (remotes),
 * and the durable writes, reads and locks every other file of the module goes through.
 *
 * The one design decision: every file of a repository is written whole under a temporary
 * name, fsync'd and renamed (the directory fsync'd after), and read never through a
 * symbolic link and never past a size bound, so a crash or a planted file can neither
 * leave a half-written object nor make a read block or follow a link out of the store. */
#include "repo_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"

double repo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void repo_default_author(char *out, size_t len)
{
    const char *a = getenv("NEBULA_AUTHOR"), *u = getenv("USER");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    if (a && a[0]) snprintf(out, len, "%s", a);
    else snprintf(out, len, "%s@%s", u && u[0] ? u : "unknown", host);
}

status repo_mkparent(const char *path)
{
    char dir[REPO_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return STATUS_OK;
    *slash = '\0';
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return STATUS_OK;
    return path_mkdirs(dir, "repository directory");
}

static void fsync_parent(const char *path)
{
    char dir[REPO_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);  /* a file system that cannot fsync a directory has nothing more to offer */
        close(dfd);
    }
}

status repo_write_file(const char *path, const void *p, size_t n, fault_plan *chaos, const char *point)
{
    return repo_write_file_sync(path, p, n, chaos, point, true);
}

void repo_objects_sync(const char *objdir, const uint8_t *touched)
{
    int top = open(objdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);  /* a new objects/xx directory's own name */
    if (top >= 0) {
        fsync(top);
        close(top);
    }
    for (int i = 0; i < 256; i++) {
        if (touched && !touched[i]) continue;
        char d[REPO_PATH_MAX + 8];
        snprintf(d, sizeof d, "%s/%02x", objdir, i);
        int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) continue;
        fsync(fd);
        close(fd);
    }
}

status repo_write_file_sync(const char *path, const void *p, size_t n, fault_plan *chaos, const char *point,
                            bool dirsync)
{
    char tmp[REPO_PATH_MAX + 64], why[256], pt[48];
    static _Atomic unsigned seq;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(), seq++);
    unlink(tmp);  /* left by a crashed process of the same pid */
    int fd, rc = 0, e = 0;
    if (path_create_regular(tmp, O_EXCL | O_TRUNC, 0644, &fd, why, sizeof why) != 0) {
        log_error("cannot create %s: %s", tmp, why);
        return STATUS_IO;
    }
    snprintf(pt, sizeof pt, "%s_write", point);
    if ((e = FAULT_ERRNO(chaos, pt, -1)) != 0) errno = e, rc = -1;
    if (!rc) rc = path_write_all(fd, p, n);
    snprintf(pt, sizeof pt, "%s_fsync", point);
    if (!rc && (e = FAULT_ERRNO(chaos, pt, -1)) != 0) errno = e, rc = -1;
    if (!rc) rc = fsync(fd);
    if (close(fd) != 0) rc = -1;
    snprintf(pt, sizeof pt, "%s_rename", point);
    if (!rc && (e = FAULT_ERRNO(chaos, pt, -1)) != 0) errno = e, rc = -1;
    if (!rc) rc = rename(tmp, path);
    if (rc) {
        log_error("cannot write %s: %s", path, log_errno_str());
        unlink(tmp);
        return STATUS_IO;
    }
    if (dirsync) fsync_parent(path);
    return STATUS_OK;
}

status repo_read_file(const char *path, uint64_t max, char **out, size_t *n, char *why, size_t len)
{
    int fd;
    struct stat sb;
    char r[256];
    *out = NULL;
    *n = 0;
    if (path_open_own(path, &fd, &sb, max, r, sizeof r) != 0) {
        bool missing = errno == ENOENT;
        snprintf(why, len, "%s (%s)", missing ? "is missing" : r, path);
        return missing ? STATUS_INPUT : STATUS_CORRUPT;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    CHECK(buf, "out of memory reading a repository file");
    if (path_read_all_at(fd, buf, (size_t)sb.st_size, 0) != 0) {
        snprintf(why, len, "cannot be read (%s): %s", path, errno ? log_errno_str() : "it is shorter than its size");
        close(fd);
        free(buf);
        return STATUS_IO;
    }
    close(fd);
    buf[sb.st_size] = '\0';
    *out = buf;
    *n = (size_t)sb.st_size;
    return STATUS_OK;
}

/* Whether the holder line "host pid" names a process of this host that is gone. */
static bool lock_stale(const char *lock)
{
    char *text = NULL, why[256], host[256] = "", me[256] = "";
    size_t n;
    if (repo_read_file(lock, 4096, &text, &n, why, sizeof why) != STATUS_OK) return false;
    long pid = 0;
    /* this host's, and its process gone — or this very process, which holds no lock when it
     * asks for one: an earlier process of the same pid (containers reuse pids) */
    bool stale = sscanf(text, "%255s %ld", host, &pid) == 2 && pid > 0 && gethostname(me, sizeof me - 1) == 0 &&
                 !strcmp(host, me) && (pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH));
    free(text);
    return stale;
}

status repo_lock(const char *lock, double wait_s, fault_plan *chaos)
{
    double t0 = repo_now();
    char line[300], host[256] = "localhost", why[256], tmp[REPO_PATH_MAX + 64];
    static _Atomic unsigned seq;
    gethostname(host, sizeof host - 1);
    int n = snprintf(line, sizeof line, "%s %d\n", host, (int)getpid());
    TRY(repo_mkparent(lock));
    /* the holder line is written whole before the lock exists: a temporary file, then
     * link(2), which fails with EEXIST while another holds it (atomic on NFS too), so a
     * crash can never leave a lock without its holder */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", lock, (int)getpid(), seq++);
    unlink(tmp);  /* left by a crashed process of the same pid (containers reuse pids) */
    int fd, e = FAULT_ERRNO(chaos, "model.lock", -1);
    if (e || path_create_regular(tmp, O_EXCL | O_TRUNC, 0644, &fd, why, sizeof why) != 0) {
        log_error("cannot create the lock %s: %s", tmp, e ? strerror(e) : why);
        return STATUS_IO;
    }
    int rc = path_write_all(fd, line, (size_t)n);
    if (!rc) rc = fsync(fd);
    close(fd);
    if (rc) {
        log_error("cannot write the lock %s: %s", tmp, log_errno_str());
        unlink(tmp);
        return STATUS_IO;
    }
    status st = STATUS_OK;
    for (;;) {
        if (link(tmp, lock) == 0) break;
        if (errno != EEXIST) {
            log_error("cannot take the lock %s: %s", lock, log_errno_str());
            st = STATUS_IO;
            break;
        }
        if (lock_stale(lock)) {
            log_warn("removing the stale lock %s (its holder is no longer running on this host)", lock);
            unlink(lock);
            continue;
        }
        if (repo_now() - t0 >= wait_s) {
            log_error("%s is held by another process (its content names it); HINT: wait for it, or remove the file "
                      "when no nebula-model runs on that host", lock);
            st = STATUS_PEER;
            break;
        }
        usleep(20000);
    }
    unlink(tmp);
    return st;
}

void repo_unlock(const char *lock)
{
    unlink(lock);
    fsync_parent(lock);
}

/* ---- init, open, find ------------------------------------------------------------ */

static status write_text(const char *path, const char *text)
{
    return repo_write_file(path, text, strlen(text), NULL, "model.ref");
}

status repo_init(const char *root, bool bare, const char *branch)
{
    char dir[REPO_PATH_MAX], p[REPO_PATH_MAX + 32], head[REPO_NAME_MAX + 32];
    struct stat sb;
    if (!repo_name_ok(branch)) {
        log_error("'%s' is not a valid branch name (letters, digits, '.', '_', '-', '/')", branch);
        return STATUS_INPUT;
    }
    if (stat(root, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        log_error("%s is %s, not a directory to hold a repository", root, path_kind(sb.st_mode));
        return STATUS_INPUT;
    }
    TRY(path_mkdirs(root, "repository directory"));
    snprintf(dir, sizeof dir, "%s/" REPO_DIR, root);
    if (lstat(dir, &sb) == 0) {
        log_error("%s already holds a repository (%s)", root, dir);
        return STATUS_INPUT;
    }
    const char *subs[] = { "objects", "refs/heads", "refs/tags", "refs/remotes", "logs" };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, subs[i]);
        TRY(path_mkdirs(p, "repository directory"));
    }
    json_t *cfg = json_pack("{s:b, s:{}}", "bare", bare, "remotes");
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/config.json", dir);
    status st = write_text(p, text);
    free(text);
    TRY(st);
    snprintf(p, sizeof p, "%s/HEAD", dir);
    snprintf(head, sizeof head, "ref: refs/heads/%s\n", branch);
    return write_text(p, head);
}

static status read_config(const char *dir, json_t **cfg)
{
    char p[REPO_PATH_MAX + 16], why[512], *text;
    size_t n;
    snprintf(p, sizeof p, "%s/config.json", dir);
    status st = repo_read_file(p, 1 << 20, &text, &n, why, sizeof why);
    if (st != STATUS_OK) {
        log_error("the repository's config.json %s", why);
        return STATUS_INPUT;
    }
    json_error_t e;
    *cfg = json_loadb(text, n, 0, &e);
    free(text);
    if (!*cfg || !json_is_object(*cfg) || !json_is_object(json_object_get(*cfg, "remotes"))) {
        log_error("%s is not a repository config (line %d: %s)", p, e.line, *cfg ? "no remotes object" : e.text);
        json_decref(*cfg);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status repo_open(repo *r, const char *root)
{
    memset(r, 0, sizeof *r);
    struct stat sb;
    if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        log_error("%s is not a directory (a repository is a directory holding " REPO_DIR "/; nebula-model init "
                  "makes one)", root);
        return STATUS_INPUT;
    }
    if (!realpath(root, r->root)) snprintf(r->root, sizeof r->root, "%s", root);
    if (snprintf(r->dir, sizeof r->dir, "%s/" REPO_DIR, r->root) >= (int)sizeof r->dir) return STATUS_INPUT;
    if (lstat(r->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        log_error("%s is not a repository: it holds no " REPO_DIR "/ directory (nebula-model init %s makes one)",
                  root, root);
        return STATUS_INPUT;
    }
    json_t *cfg;
    TRY(read_config(r->dir, &cfg));
    r->bare = json_is_true(json_object_get(cfg, "bare"));
    json_decref(cfg);
    char branch[REPO_NAME_MAX];
    repo_id id;
    bool born;
    TRY(repo_head(r, branch, sizeof branch, &id, &born));
    return fault_plan_init(&r->chaos, "model");
}

bool repo_find(const char *start, char *root, size_t len)
{
    char cur[REPO_PATH_MAX];
    if (!realpath(start, cur)) return false;
    for (;;) {
        char p[REPO_PATH_MAX + 16];
        struct stat sb;
        snprintf(p, sizeof p, "%s/" REPO_DIR, cur);
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            snprintf(root, len, "%s", cur);
            return true;
        }
        char *slash = strrchr(cur, '/');
        if (!slash || slash == cur) return false;
        *slash = '\0';
    }
}

json_t *repo_remotes(const repo *r)
{
    json_t *cfg;
    if (read_config(r->dir, &cfg) != STATUS_OK) return json_object();
    json_t *rem = json_incref(json_object_get(cfg, "remotes"));
    json_decref(cfg);
    return rem;
}

status repo_remote_path(const repo *r, const char *name, char *path, size_t len)
{
    json_t *rem = repo_remotes(r);
    const char *p = json_string_value(json_object_get(rem, name));
    status st = STATUS_OK;
    if (p) {
        snprintf(path, len, "%s", p);
    } else if (strchr(name, '/')) {  /* a path given instead of a remote's name */
        snprintf(path, len, "%s", name);
    } else {
        log_error("no remote named '%s' (%s); HINT: nebula-model remote add %s PATH", name,
                  json_object_size(rem) ? "see nebula-model remote" : "none is configured", name);
        st = STATUS_INPUT;
    }
    json_decref(rem);
    return st;
}

status repo_remote_add(const repo *r, const char *name, const char *path, bool replace)
{
    if (!repo_name_ok(name) || strchr(name, '/')) {
        log_error("'%s' is not a valid remote name (letters, digits, '.', '_', '-')", name);
        return STATUS_INPUT;
    }
    json_t *cfg;
    TRY(read_config(r->dir, &cfg));
    json_t *rem = json_object_get(cfg, "remotes");
    if (json_object_get(rem, name) && !replace) {
        log_error("remote '%s' exists (%s)", name, json_string_value(json_object_get(rem, name)));
        json_decref(cfg);
        return STATUS_INPUT;
    }
    char abs[REPO_PATH_MAX];
    if (!realpath(path, abs)) snprintf(abs, sizeof abs, "%s", path);
    json_object_set_new(rem, name, json_string(abs));
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS), p[REPO_PATH_MAX + 16];
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/config.json", r->dir);
    status st = write_text(p, text);
    free(text);
    return st;
}
