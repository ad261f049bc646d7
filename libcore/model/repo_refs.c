/* repo_refs — branches, tags, remote-tracking refs, HEAD and the reflog.
 *
 * The one design decision: a ref moves only under its lock file and only from the value
 * the mover read (compare-and-swap), so two processes that move one branch at once —
 * two pushes from two nodes into one shared directory — cannot both win: the second
 * finds the branch moved and is rejected, as git rejects a non-fast-forward push. */
#include "repo_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"

bool repo_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= REPO_NAME_MAX || name[0] == '-' || name[0] == '.' || name[0] == '/' || name[n - 1] == '/' ||
        name[n - 1] == '.' || strstr(name, "..") || strstr(name, "//") || strstr(name, "/.") ||
        (n >= 5 && !strcmp(name + n - 5, ".lock")) || !strcmp(name, "HEAD"))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '/'))
            return false;
    }
    return true;
}

status repo_ref_read(const char *dir, const char *ref, repo_id *id, bool *found)
{
    char p[REPO_PATH_MAX + 256], why[512], *text = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, ref);
    *found = false;
    status st = repo_read_file(p, 4096, &text, &n, why, sizeof why);
    if (st == STATUS_INPUT) return STATUS_OK;  /* no such ref */
    if (st != STATUS_OK) {
        log_error("ref %s %s", ref, why);
        return STATUS_CORRUPT;
    }
    if (n > 0 && text[n - 1] == '\n') text[--n] = '\0';
    bool ok = repo_id_parse(text, id);
    free(text);
    if (!ok) {
        log_error("ref %s (%s) does not hold a commit id; HINT: nebula-model fsck lists the damage", ref, p);
        return STATUS_CORRUPT;
    }
    *found = true;
    return STATUS_OK;
}

void repo_reflog_append(const char *dir, const char *ref, const repo_id *old, const repo_id *to, const char *why)
{
    char p[REPO_PATH_MAX + 256], a[33] = "00000000000000000000000000000000", b[33] = "00000000000000000000000000000000";
    char author[REPO_NAME_MAX], line[1024], err[256];
    snprintf(p, sizeof p, "%s/logs/%s", dir, ref);
    if (repo_mkparent(p) != STATUS_OK) return;
    if (old) repo_id_hex(old, a);
    if (to) repo_id_hex(to, b);
    repo_default_author(author, sizeof author);
    int n = snprintf(line, sizeof line, "%s %s %s %lld\t%s\n", a, b, author, (long long)time(NULL), why);
    int fd;
    if (path_create_regular(p, O_APPEND, 0644, &fd, err, sizeof err) != 0) {
        log_warn("cannot append to the reflog %s: %s", p, err);
        return;
    }
    if (path_write_all(fd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1)) != 0 || fsync(fd) != 0)
        log_warn("cannot append to the reflog %s: %s", p, log_errno_str());
    close(fd);
}

status repo_ref_update(const char *dir, const char *ref, const repo_id *old, bool old_any, const repo_id *to,
                       const char *why, double wait_s, fault_plan *chaos)
{
    char p[REPO_PATH_MAX + 256], lock[REPO_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", dir, ref);
    snprintf(lock, sizeof lock, "%s.lock", p);
    TRY(repo_lock(lock, wait_s, chaos));
    repo_id cur;
    bool found;
    status st = repo_ref_read(dir, ref, &cur, &found);
    if (st == STATUS_OK && !old_any && (found != (old != NULL) || (found && !repo_id_eq(&cur, old)))) {
        char h[33] = "nothing";
        if (found) repo_id_hex(&cur, h);
        log_error("%s moved meanwhile (it is at %.12s): another process updated it", ref, h);
        st = STATUS_PEER;
    }
    if (st == STATUS_OK && to) {
        char line[40];
        repo_id_hex(to, line);
        strcat(line, "\n");
        st = repo_write_file(p, line, 33, chaos, "model.ref");
    } else if (st == STATUS_OK && unlink(p) != 0 && errno != ENOENT) {
        log_error("cannot delete %s: %s", p, log_errno_str());
        st = STATUS_IO;
    }
    if (st == STATUS_OK) {
        int e = FAULT_ERRNO(chaos, "model.reflog", -1);
        (void)e;
        repo_reflog_append(dir, ref, found ? &cur : NULL, to, why);
    }
    repo_unlock(lock);
    return st;
}

status repo_head(const repo *r, char *branch, size_t len, repo_id *id, bool *born)
{
    char p[REPO_PATH_MAX + 16], why[512], *text = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/HEAD", r->dir);
    if (repo_read_file(p, 4096, &text, &n, why, sizeof why) != STATUS_OK) {
        log_error("the repository's HEAD %s", why);
        return STATUS_CORRUPT;
    }
    if (n > 0 && text[n - 1] == '\n') text[--n] = '\0';
    status st = STATUS_OK;
    branch[0] = '\0';
    *born = false;
    if (!strncmp(text, "ref: refs/heads/", 16) && repo_name_ok(text + 16)) {
        snprintf(branch, len, "%s", text + 16);
        char ref[REPO_NAME_MAX + 16];
        snprintf(ref, sizeof ref, "refs/heads/%s", branch);
        st = repo_ref_read(r->dir, ref, id, born);
    } else if (repo_id_parse(text, id)) {
        *born = true;
    } else {
        log_error("the repository's HEAD (%s) holds neither a branch nor a commit id", p);
        st = STATUS_CORRUPT;
    }
    free(text);
    return st;
}

status repo_head_set(repo *r, const char *branch, const repo_id *id, const char *why)
{
    char p[REPO_PATH_MAX + 16], text[REPO_NAME_MAX + 32], old_branch[REPO_NAME_MAX];
    repo_id old;
    bool born = false;
    if (repo_head(r, old_branch, sizeof old_branch, &old, &born) != STATUS_OK) born = false;
    snprintf(p, sizeof p, "%s/HEAD", r->dir);
    if (branch) snprintf(text, sizeof text, "ref: refs/heads/%s\n", branch);
    else repo_id_hex(id, text), strcat(text, "\n");
    TRY(repo_write_file(p, text, strlen(text), &r->chaos, "model.ref"));
    repo_reflog_append(r->dir, "HEAD", born ? &old : NULL, id, why);
    return STATUS_OK;
}

/* Every id of the store whose hex starts with prefix (4..31 digits): 0, 1 (in *id) or 2 (ambiguous). */
static int match_prefix(const char *dir, const char *prefix, repo_id *id)
{
    char sub[REPO_PATH_MAX + 32], hex[40];
    size_t n = strlen(prefix);
    snprintf(sub, sizeof sub, "%s/objects/%.2s", dir, prefix);
    DIR *d = opendir(sub);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) && found < 2) {
        if (strlen(e->d_name) != 30) continue;
        snprintf(hex, sizeof hex, "%.2s%s", prefix, e->d_name);
        if (strncmp(hex, prefix, n) != 0 || !repo_id_parse(hex, id)) continue;
        found++;
    }
    closedir(d);
    return found;
}

status repo_resolve(const repo *r, const char *name, repo_id *id)
{
    char base[REPO_NAME_MAX + 8], objdir[REPO_PATH_MAX];
    snprintf(base, sizeof base, "%s", name);
    long back = 0;
    char *tilde = strchr(base, '~');
    if (tilde) {
        char *end;
        back = tilde[1] ? strtol(tilde + 1, &end, 10) : 1;
        if (tilde[1] && (*end || back < 0)) {
            log_error("'%s': after ~ comes a count of first parents (HEAD~2)", name);
            return STATUS_INPUT;
        }
        *tilde = '\0';
    }
    bool found = false;
    if (!strcmp(base, "HEAD")) {
        char branch[REPO_NAME_MAX];
        TRY(repo_head(r, branch, sizeof branch, id, &found));
        if (!found) {
            log_error("HEAD has no commit yet (branch %s is unborn): commit a checkpoint first", branch);
            return STATUS_INPUT;
        }
    }
    const char *kinds[] = { "refs/heads/", "refs/tags/", "refs/remotes/" };
    for (int k = 0; k < 3 && !found && repo_name_ok(base); k++) {
        char ref[REPO_NAME_MAX + 32];
        snprintf(ref, sizeof ref, "%s%s", kinds[k], base);
        TRY(repo_ref_read(r->dir, ref, id, &found));
    }
    repo_objdir(r->dir, objdir, sizeof objdir);
    size_t n = strlen(base);
    if (!found && n == 32 && repo_id_parse(base, id)) found = repo_object_has(objdir, id);
    if (!found && n >= 4 && n < 32 && strspn(base, "0123456789abcdef") == n) {
        int m = match_prefix(r->dir, base, id);
        if (m > 1) {
            log_error("'%s' is an ambiguous commit id prefix: give more digits", base);
            return STATUS_INPUT;
        }
        found = m == 1;
    }
    if (!found) {
        log_error("'%s' is neither a branch, a tag, a remote branch (REMOTE/BRANCH) nor a commit id of this "
                  "repository (nebula-model branch and tag list them)", base);
        return STATUS_INPUT;
    }
    for (long i = 0; i < back; i++) {
        repo_commit c;
        char why[512];
        if (repo_commit_load(objdir, id, &c, why, sizeof why) != STATUS_OK) {
            log_error("%s: %s", name, why);
            return STATUS_CORRUPT;
        }
        bool root = c.nparents == 0;
        if (!root) *id = c.parents[0];
        repo_commit_free(&c);
        if (root) {
            log_error("'%s' goes back past the first commit (%ld parent(s) exist)", name, i);
            return STATUS_INPUT;
        }
    }
    return STATUS_OK;
}

bool repo_is_ancestor(const char *objdir, const repo_id *a, const repo_id *b)
{
    /* breadth-first over b's ancestry; histories here are chains with few merges */
    int cap = 64, head = 0, tail = 0;
    repo_id *q = malloc((size_t)cap * sizeof *q);
    CHECK(q, "out of memory walking history");
    q[tail++] = *b;
    bool yes = false;
    while (head < tail && !yes) {
        repo_id cur = q[head++];
        if (repo_id_eq(&cur, a)) {
            yes = true;
            break;
        }
        repo_commit c;
        char why[512];
        if (repo_commit_load(objdir, &cur, &c, why, sizeof why) != STATUS_OK) continue;
        for (int i = 0; i < c.nparents; i++) {
            bool seen = false;  /* each commit once: parents [p, p] must not double the walk */
            for (int k = 0; k < tail && !seen; k++) seen = repo_id_eq(&q[k], &c.parents[i]);
            if (seen) continue;
            if (tail == cap) {
                cap *= 2;
                q = realloc(q, (size_t)cap * sizeof *q);
                CHECK(q, "out of memory walking history");
            }
            q[tail++] = c.parents[i];
        }
        repo_commit_free(&c);
    }
    free(q);
    return yes;
}

/* Appends the refs under dir/sub to the lists. */
static void list_dir(const char *dir, const char *sub, char (**names)[256], repo_id **ids, int *n, int *cap)
{
    char p[REPO_PATH_MAX + 512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    DIR *d = opendir(p);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".lock") || strstr(e->d_name, ".tmp.")) continue;
        char child[512];
        snprintf(child, sizeof child, "%s/%s", sub, e->d_name);
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, child);
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            list_dir(dir, child, names, ids, n, cap);
            continue;
        }
        repo_id id;
        bool found;
        if (!S_ISREG(sb.st_mode) || repo_ref_read(dir, child, &id, &found) != STATUS_OK || !found) continue;
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            *names = realloc(*names, (size_t)*cap * sizeof **names);
            *ids = realloc(*ids, (size_t)*cap * sizeof **ids);
            CHECK(*names && *ids, "out of memory listing refs");
        }
        if (snprintf((*names)[*n], 256, "%s", child) >= 256) continue;
        (*ids)[(*n)++] = id;
    }
    closedir(d);
}

int repo_refs_list(const char *dir, const char *prefix, char (**names)[256], repo_id **ids)
{
    int n = 0, cap = 0;
    *names = NULL;
    *ids = NULL;
    list_dir(dir, prefix, names, ids, &n, &cap);
    /* sorted by name (insertion sort: few refs) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
            char t[256];
            repo_id ti = (*ids)[j];
            memcpy(t, (*names)[j], 256), memcpy((*names)[j], (*names)[j - 1], 256), memcpy((*names)[j - 1], t, 256);
            (*ids)[j] = (*ids)[j - 1], (*ids)[j - 1] = ti;
        }
    return n;
}
