/* repo_fsck — the store checked whole (fsck) and its unreachable objects removed (gc).
 *
 * The one design decision: both start from the same census (every file under objects/,
 * sorted by id) and the same walk (every ref, HEAD, and for gc the reflog, through commits
 * to manifests, chunks, skeletons and delta bases), so what fsck calls unreachable is
 * exactly what gc would remove, and a crash's leftovers — objects nothing names yet,
 * temporary files — are reported as such, never as damage. */
#include "repo_impl.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"

typedef struct census {
    repo_id *ids;               /* [n] sorted */
    uint8_t *mark;              /* [n] reached by the walk */
    int64_t *mtime;             /* [n] seconds */
    int n, cap;
    char (*debris)[REPO_PATH_MAX]; /* temporary files and names that are no object */
    int ndebris;
} census;

static int cmp_id(const void *a, const void *b)
{
    return memcmp(a, b, 16);
}

static void census_take(const char *objdir, census *c)
{
    memset(c, 0, sizeof *c);
    DIR *top = opendir(objdir);
    if (!top) return;
    struct dirent *e;
    while ((e = readdir(top))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) != 2) continue;
        char sub[REPO_PATH_MAX + 8];
        snprintf(sub, sizeof sub, "%s/%s", objdir, e->d_name);
        DIR *d = opendir(sub);
        if (!d) continue;
        struct dirent *f;
        while ((f = readdir(d))) {
            if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
            char hex[64], p[REPO_PATH_MAX + 300];
            repo_id id;
            struct stat sb;
            if (snprintf(hex, sizeof hex, "%s%s", e->d_name, f->d_name) >= (int)sizeof hex) hex[0] = 0;
            snprintf(p, sizeof p, "%s/%s", sub, f->d_name);
            if (lstat(p, &sb) != 0) continue;
            if (strlen(f->d_name) != 30 || !repo_id_parse(hex, &id) || !S_ISREG(sb.st_mode)) {
                c->debris = realloc(c->debris, (size_t)(c->ndebris + 1) * sizeof *c->debris);
                CHECK(c->debris, "out of memory");
                if (snprintf(c->debris[c->ndebris], REPO_PATH_MAX, "%s", p) < REPO_PATH_MAX) c->ndebris++;
                continue;
            }
            if (c->n == c->cap) {
                c->cap = c->cap ? 2 * c->cap : 256;
                c->ids = realloc(c->ids, (size_t)c->cap * sizeof *c->ids);
                c->mtime = realloc(c->mtime, (size_t)c->cap * sizeof *c->mtime);
                CHECK(c->ids && c->mtime, "out of memory");
            }
            c->mtime[c->n] = sb.st_mtime;
            c->ids[c->n++] = id;
        }
        closedir(d);
    }
    closedir(top);
    /* sort ids with their mtimes: pair them through an index */
    int *ix = malloc((size_t)c->n * sizeof *ix + 1);
    repo_id *ids = malloc((size_t)c->n * sizeof *ids + 1);
    int64_t *mt = malloc((size_t)c->n * sizeof *mt + 1);
    CHECK(ix && ids && mt, "out of memory");
    memcpy(ids, c->ids, (size_t)c->n * sizeof *ids);
    qsort(ids, (size_t)c->n, sizeof *ids, cmp_id);
    for (int i = 0; i < c->n; i++) {
        repo_id *hit = bsearch(&c->ids[i], ids, (size_t)c->n, sizeof *ids, cmp_id);
        mt[hit - ids] = c->mtime[i];
    }
    free(ix);
    free(c->ids);
    free(c->mtime);
    c->ids = ids;
    c->mtime = mt;
    c->mark = calloc((size_t)c->n + 1, 1);
    CHECK(c->mark, "out of memory");
}

static void census_free(census *c)
{
    free(c->ids);
    free(c->mark);
    free(c->mtime);
    free(c->debris);
}

/* Marks id; false when the store does not hold it. *first: it was not marked before. */
static bool mark(census *c, const repo_id *id, bool *first)
{
    repo_id *hit = bsearch(id, c->ids, (size_t)c->n, sizeof *c->ids, cmp_id);
    *first = false;
    if (!hit) return false;
    *first = !c->mark[hit - c->ids];
    c->mark[hit - c->ids] = 1;
    return true;
}

/* A chunk's delta chain, marked. */
static void mark_bases(const char *objdir, census *c, const repo_id *id, uint64_t *missing)
{
    repo_id cur = *id;
    for (int d = 0; d < REPO_DELTA_DEPTH; d++) {
        repo_object_head h;
        if (!repo_object_head_read(objdir, &cur, &h) || !h.delta) return;
        bool first;
        if (!mark(c, &h.base, &first)) {
            char hex[33];
            repo_id_hex(&h.base, hex);
            log_error("delta base %s is missing", hex);
            (*missing)++;
            return;
        }
        cur = h.base;
    }
}

/* Walks one commit's history, marking everything it reaches; counts what is missing and
 * the commits and manifests that do not parse or lie about sizes (bad). */
static void walk(const char *objdir, census *c, const repo_id *tip, const char *from, uint64_t *missing, uint64_t *bad)
{
    repo_id *stack = malloc(64 * sizeof *stack);
    int n = 0, cap = 64;
    CHECK(stack, "out of memory");
    stack[n++] = *tip;
    while (n) {
        repo_id id = stack[--n];
        bool first;
        char hex[33], why[512];
        repo_id_hex(&id, hex);
        if (!mark(c, &id, &first)) {
            log_error("commit %s (reached from %s) is missing", hex, from);
            (*missing)++;
            continue;
        }
        if (!first) continue;
        repo_commit cm;
        repo_manifest m;
        if (repo_commit_load(objdir, &id, &cm, why, sizeof why) != STATUS_OK) {
            log_error("%s (reached from %s)", why, from);
            (*bad)++;
            continue;
        }
        for (int i = 0; i < cm.nparents; i++) {
            if (n == cap) stack = realloc(stack, (size_t)(cap *= 2) * sizeof *stack);
            CHECK(stack, "out of memory");
            stack[n++] = cm.parents[i];
        }
        if (!mark(c, &cm.manifest, &first)) {
            log_error("the manifest of commit %s is missing", hex);
            (*missing)++;
        } else if (first && repo_manifest_load(objdir, &cm.manifest, &m, why, sizeof why) != STATUS_OK) {
            log_error("commit %s: %s", hex, why);
            (*bad)++;
        } else if (first) {
            if (repo_manifest_check(objdir, &m, why, sizeof why) != STATUS_OK) {
                log_error("commit %.12s: %s", hex, why);
                (*bad)++;
            }
            if (!mark(c, &m.skeleton, &first)) {
                log_error("the skeleton of commit %s is missing", hex);
                (*missing)++;
            }
            for (int k = 0; k < m.n; k++)
                for (int i = 0; i < m.items[k].nchunks; i++) {
                    if (!mark(c, &m.items[k].chunks[i], &first)) {
                        log_error("chunk %d of %s (commit %.12s) is missing", i, m.items[k].path, hex);
                        (*missing)++;
                    } else if (first) {
                        mark_bases(objdir, c, &m.items[k].chunks[i], missing);
                    }
                }
            repo_manifest_free(&m);
        }
        repo_commit_free(&cm);
    }
    free(stack);
}

/* Walks from every id a reflog file (or every one under a directory, recursively) names:
 * the old and new value of every move. */
static void walk_logs(const char *objdir, census *c, const char *dir, const char *sub)
{
    char p[REPO_PATH_MAX + 600];
    struct stat sb;
    if (snprintf(p, sizeof p, "%s/%s", dir, sub) >= (int)sizeof p || lstat(p, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char child[600];
            if (e->d_name[0] == '.' || snprintf(child, sizeof child, "%s/%s", sub, e->d_name) >= (int)sizeof child)
                continue;
            walk_logs(objdir, c, dir, child);
        }
        if (d) closedir(d);
        return;
    }
    char *text = NULL, why[256], *save = NULL;
    size_t tn;
    if (!S_ISREG(sb.st_mode) || repo_read_file(p, (uint64_t)1 << 26, &text, &tn, why, sizeof why) != STATUS_OK) return;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char a[33], b[33];
        repo_id ia, ib;
        uint64_t ignore = 0;
        if (sscanf(line, "%32s %32s", a, b) != 2) continue;
        if (repo_id_parse(a, &ia) && repo_object_has(objdir, &ia)) walk(objdir, c, &ia, "the reflog", &ignore, &ignore);
        if (repo_id_parse(b, &ib) && repo_object_has(objdir, &ib)) walk(objdir, c, &ib, "the reflog", &ignore, &ignore);
    }
    free(text);
}

/* Walks from every ref and HEAD (and, reflog, every id the reflogs name); *bad_refs counts
 * a HEAD or ref that cannot be read, and commits and manifests that are damaged. */
static status walk_all(const repo *r, census *c, bool reflog, uint64_t *missing, uint64_t *bad_refs)
{
    char objdir[REPO_PATH_MAX], (*names)[256];
    repo_id *ids;
    repo_objdir(r->dir, objdir, sizeof objdir);
    int n = repo_refs_list(r->dir, "refs", &names, &ids);
    for (int i = 0; i < n; i++) walk(objdir, c, &ids[i], names[i], missing, bad_refs);
    free(names);
    free(ids);
    char branch[REPO_NAME_MAX];
    repo_id head;
    bool born;
    if (repo_head(r, branch, sizeof branch, &head, &born) != STATUS_OK) (*bad_refs)++;
    else if (born) walk(objdir, c, &head, "HEAD", missing, bad_refs);
    if (!reflog) return STATUS_OK;
    walk_logs(objdir, c, r->dir, "logs");  /* every id the reflog names, at any depth (refs/heads/team/exp) */
    return STATUS_OK;
}

/* Ref files under dir/sub that hold no commit id (repo_ref_read logs each). */
static uint64_t count_bad_refs(const char *dir, const char *sub)
{
    char p[REPO_PATH_MAX + 512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    DIR *d = opendir(p);
    uint64_t bad = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".lock") || strstr(e->d_name, ".tmp.")) continue;
        char child[600];
        struct stat sb;
        repo_id id;
        bool found;
        if (snprintf(child, sizeof child, "%s/%s", sub, e->d_name) >= (int)sizeof child) continue;
        snprintf(p, sizeof p, "%s/%s", dir, child);
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) bad += count_bad_refs(dir, child);
        else if (repo_ref_read(dir, child, &id, &found) != STATUS_OK) bad++;
    }
    if (d) closedir(d);
    return bad;
}

status repo_fsck(repo *r, repo_fsck_report *rep)
{
    char objdir[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    memset(rep, 0, sizeof *rep);
    census c;
    census_take(objdir, &c);
    rep->objects = (uint64_t)c.n;
    for (int i = 0; i < c.n; i++) {
        void *data = NULL;
        size_t n;
        char why[600];
        if (repo_object_get(objdir, &c.ids[i], 0, &data, &n, why, sizeof why) != STATUS_OK) {
            log_error("%s", why);
            rep->bad++;
        }
        free(data);
    }
    uint64_t bad_refs = count_bad_refs(r->dir, "refs");
    walk_all(r, &c, true, &rep->missing, &bad_refs);  /* as a default gc walks: "unreachable" is what it removes */
    rep->bad += bad_refs;
    for (int i = 0; i < c.n; i++) rep->unreachable += !c.mark[i];
    rep->debris = (uint64_t)c.ndebris;
    for (int i = 0; i < c.ndebris; i++) log_info("debris (a write that did not finish; gc removes it): %s", c.debris[i]);
    census_free(&c);
    return rep->bad || rep->missing ? STATUS_CORRUPT : STATUS_OK;
}

status repo_gc(repo *r, bool keep_reflog, double grace_s, uint64_t *removed, uint64_t *freed)
{
    int64_t newest = (int64_t)time(NULL) - (int64_t)grace_s;  /* younger files may be a running commit's */
    char objdir[REPO_PATH_MAX], lock[REPO_PATH_MAX + 16];
    repo_objdir(r->dir, objdir, sizeof objdir);
    snprintf(lock, sizeof lock, "%s/gc.lock", r->dir);
    TRY(repo_lock(lock, 0, &r->chaos));
    census c;
    census_take(objdir, &c);
    uint64_t missing = 0, bad_refs = 0;
    walk_all(r, &c, keep_reflog, &missing, &bad_refs);
    *removed = *freed = 0;
    status st = STATUS_OK;
    if (missing || bad_refs) {
        log_error("gc stops: the store is damaged (%llu missing objects; see above); run nebula-model fsck",
                  (unsigned long long)missing);
        st = STATUS_CORRUPT;
    }
    /* In the reverse of the write order — commits, then manifests, then chunks and skeletons,
     * each pass made durable before the next — so a gc killed half-way never leaves a commit
     * whose manifest or chunks are gone (a transfer trusts a commit that is there to be whole). */
    for (int pass = 0; pass < 3 && st == STATUS_OK; pass++) {
        for (int i = 0; i < c.n; i++) {
            if (c.mark[i] || c.mtime[i] > newest) continue;
            repo_object_head h;
            int kind = repo_object_head_read(objdir, &c.ids[i], &h) ? (int)h.kind : 0;
            if ((pass == 0) != (kind == REPO_KIND_COMMIT) || (pass == 1) != (kind == REPO_KIND_MANIFEST)) continue;
            char p[REPO_PATH_MAX];
            struct stat sb;
            repo_object_path(objdir, &c.ids[i], p, sizeof p);
            /* the mtime again: a commit that reuses the object refreshes it (object_put) */
            if (lstat(p, &sb) == 0 && sb.st_mtime <= newest && unlink(p) == 0) (*removed)++, *freed += (uint64_t)sb.st_size;
        }
        repo_objects_sync(objdir, NULL);
    }
    for (int i = 0; i < c.ndebris && st == STATUS_OK; i++) {
        struct stat sb;
        if (lstat(c.debris[i], &sb) == 0 && sb.st_mtime <= newest && unlink(c.debris[i]) == 0)
            (*removed)++, *freed += (uint64_t)sb.st_size;
    }
    census_free(&c);
    repo_unlock(lock);
    return st;
}
