/* repo_remote — push, pull and clone between repositories on a shared file system (the
 * cluster case: a project directory every node mounts).
 *
 * The one design decision: objects move before refs, dependencies before what names
 * them (chunks and skeleton, manifest, commit; parents before children), each by
 * temporary file and rename, and a remote branch then moves by compare-and-swap under its
 * lock from the value the pusher checked to be its ancestor — so any number of concurrent
 * pushers leave a store where every ref reaches only complete commits, and all but one
 * of those that raced for one branch are rejected as non-fast-forward. */
#include "repo_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Copies one commit's objects (its parents' are there already). */
static status copy_commit(const char *from, const char *to, const repo_id *id, fault_plan *chaos, uint64_t *copied,
                          uint64_t *bytes, uint64_t *present)
{
    repo_commit c;
    repo_manifest m;
    char why[512];
    if (repo_commit_load(from, id, &c, why, sizeof why) != STATUS_OK ||
        repo_manifest_load(from, &c.manifest, &m, why, sizeof why) != STATUS_OK) {
        log_error("cannot send a commit: %s", why);
        return STATUS_CORRUPT;
    }
    status st = STATUS_OK;
    uint8_t touched[256] = { 0 };  /* objects/xx directories copied into */
    for (int k = 0; k < m.n && st == STATUS_OK; k++)
        for (int i = 0; i < m.items[k].nchunks && st == STATUS_OK; i++) {
            if (repo_object_has(to, &m.items[k].chunks[i])) (*present)++;
            else st = repo_object_copy(from, to, &m.items[k].chunks[i], chaos, copied, bytes);
            touched[m.items[k].chunks[i].b[0]] = 1;  /* a delta's base: its copy syncs its own name */
        }
    touched[m.skeleton.b[0]] = 1;
    if (st == STATUS_OK) st = repo_object_copy(from, to, &m.skeleton, chaos, copied, bytes);
    if (st == STATUS_OK) repo_objects_sync(to, touched);  /* their names, before the manifest names them */
    if (st == STATUS_OK) st = repo_object_copy(from, to, &c.manifest, chaos, copied, bytes);
    if (st == STATUS_OK) st = repo_object_copy(from, to, id, chaos, copied, bytes);
    repo_manifest_free(&m);
    repo_commit_free(&c);
    return st;
}

status repo_transfer(const char *from, const char *to, const repo_id *tip, fault_plan *chaos, uint64_t *copied,
                     uint64_t *bytes, uint64_t *present)
{
    /* the commits `to` lacks, newest first (breadth-first from the tip); a commit `to`
     * holds brings all its history, so the walk stops there */
    int n = 0, cap = 16, scan = 0;
    repo_id *todo = malloc((size_t)cap * sizeof *todo);
    CHECK(todo, "out of memory");
    status st = STATUS_OK;
    if (repo_object_has(to, tip)) (*present)++;
    else todo[n++] = *tip;
    for (; scan < n && st == STATUS_OK; scan++) {
        repo_commit c;
        char why[512];
        if (repo_commit_load(from, &todo[scan], &c, why, sizeof why) != STATUS_OK) {
            log_error("cannot read a commit to send: %s", why);
            st = STATUS_CORRUPT;
            break;
        }
        for (int i = 0; i < c.nparents; i++) {
            bool seen = repo_object_has(to, &c.parents[i]);
            for (int j = 0; j < n && !seen; j++) seen = repo_id_eq(&todo[j], &c.parents[i]);
            if (seen) continue;
            if (n == cap) {
                cap *= 2;
                todo = realloc(todo, (size_t)cap * sizeof *todo);
                CHECK(todo, "out of memory");
            }
            todo[n++] = c.parents[i];
        }
        repo_commit_free(&c);
    }
    /* oldest first: reversed, the breadth-first list sends parents before children */
    for (int i = n - 1; i >= 0 && st == STATUS_OK; i--) st = copy_commit(from, to, &todo[i], chaos, copied, bytes, present);
    free(todo);
    return st;
}

/* Opens the remote repository at path, saying why it is not one (a FIFO, a link loop, ...). */
static status open_remote(const char *path, repo *rr)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        log_error("remote %s cannot be used: %s", path, log_errno_str());
        return STATUS_INPUT;
    }
    if (!S_ISDIR(sb.st_mode)) {
        log_error("remote %s is not a directory: a remote is a repository directory (nebula-model init --bare DIR)",
                  path);
        return STATUS_INPUT;
    }
    return repo_open(rr, path);
}

status repo_push(repo *r, const char *remote, const char *branch, bool force, uint64_t *copied, uint64_t *bytes,
                 uint64_t *present)
{
    char path[REPO_PATH_MAX], ref[REPO_NAME_MAX * 2 + 32], from[REPO_PATH_MAX], to[REPO_PATH_MAX];
    if (!repo_name_ok(branch)) {
        log_error("'%s' is not a valid branch name", branch);
        return STATUS_INPUT;
    }
    TRY(repo_remote_path(r, remote, path, sizeof path));
    repo rr;
    TRY(open_remote(path, &rr));
    snprintf(ref, sizeof ref, "refs/heads/%s", branch);
    repo_id tip, old;
    bool found, had;
    TRY(repo_ref_read(r->dir, ref, &tip, &found));
    if (!found) {
        log_error("no local branch '%s' to push", branch);
        return STATUS_INPUT;
    }
    char rbranch[REPO_NAME_MAX];
    repo_id rhead;
    bool rborn;
    TRY(repo_head(&rr, rbranch, sizeof rbranch, &rhead, &rborn));
    if (!rr.bare && !strcmp(rbranch, branch)) {
        log_error("%s has branch '%s' checked out in its work tree: a push would leave that tree behind its HEAD; "
                  "HINT: push to a bare repository (nebula-model init --bare DIR, or clone --bare)", path, branch);
        return STATUS_INPUT;
    }
    repo_objdir(r->dir, from, sizeof from);
    repo_objdir(rr.dir, to, sizeof to);
    TRY(repo_transfer(from, to, &tip, &r->chaos, copied, bytes, present));
    TRY(repo_ref_read(rr.dir, ref, &old, &had));
    char a[33], b[33], why[300];
    repo_id_hex(&tip, b);
    if (had && !force && !repo_is_ancestor(to, &old, &tip)) {
        repo_id_hex(&old, a);
        log_error("push rejected: %s:%s is at %.12s, which %.12s does not contain (non-fast-forward); HINT: "
                  "nebula-model pull %s %s first, or push --force to replace it", remote, branch, a, b, remote, branch);
        return STATUS_PEER;
    }
    if (snprintf(why, sizeof why, "push from %s", r->root) >= (int)sizeof why) why[sizeof why - 1] = 0;
    status st = repo_ref_update(rr.dir, ref, had ? &old : NULL, false, &tip, why, 30, &r->chaos);
    if (st == STATUS_PEER)
        log_error("push rejected: %s:%s moved while this push checked it (a concurrent push won); HINT: "
                  "nebula-model pull %s %s, then push again", remote, branch, remote, branch);
    TRY(st);
    snprintf(ref, sizeof ref, "refs/remotes/%s/%s", remote, branch);
    if (!strchr(remote, '/')) TRY(repo_ref_update(r->dir, ref, NULL, true, &tip, "push", 30, &r->chaos));
    return STATUS_OK;
}

status repo_pull(repo *r, const char *remote, const char *branch, uint64_t *copied, uint64_t *bytes,
                 uint64_t *present)
{
    char path[REPO_PATH_MAX], ref[REPO_NAME_MAX + 16], from[REPO_PATH_MAX], to[REPO_PATH_MAX];
    if (!repo_name_ok(branch)) {
        log_error("'%s' is not a valid branch name", branch);
        return STATUS_INPUT;
    }
    TRY(repo_remote_path(r, remote, path, sizeof path));
    repo rr;
    TRY(open_remote(path, &rr));
    snprintf(ref, sizeof ref, "refs/heads/%s", branch);
    repo_id tip, mine;
    bool found, have;
    TRY(repo_ref_read(rr.dir, ref, &tip, &found));
    if (!found) {
        log_error("remote %s (%s) has no branch '%s'", remote, path, branch);
        return STATUS_INPUT;
    }
    repo_objdir(rr.dir, from, sizeof from);
    repo_objdir(r->dir, to, sizeof to);
    TRY(repo_transfer(from, to, &tip, &r->chaos, copied, bytes, present));
    char tref[REPO_NAME_MAX * 2 + 32];
    snprintf(tref, sizeof tref, "refs/remotes/%s/%s", remote, branch);
    if (!strchr(remote, '/')) TRY(repo_ref_update(r->dir, tref, NULL, true, &tip, "pull", 30, &r->chaos));
    TRY(repo_ref_read(r->dir, ref, &mine, &have));
    if (have && repo_id_eq(&mine, &tip)) return STATUS_OK;
    if (have && repo_is_ancestor(to, &tip, &mine)) {
        log_info("%s is ahead of %s/%s: nothing to update", branch, remote, branch);
        return STATUS_OK;
    }
    if (have && !repo_is_ancestor(to, &mine, &tip)) {
        log_error("%s and %s/%s have diverged: a pull only fast-forwards; HINT: nebula-model checkout %s/%s -b NEW "
                  "to keep both lines", branch, remote, branch, remote, branch);
        return STATUS_PEER;
    }
    char head[REPO_NAME_MAX], pathout[REPO_PATH_MAX];
    repo_id hid;
    bool born;
    TRY(repo_head(r, head, sizeof head, &hid, &born));
    bool current = !strcmp(head, branch) && !r->bare;
    if (current) {  /* refuses before anything moves when the work tree holds uncommitted checkpoints */
        repo_status ws;
        TRY(repo_work_status(r, &ws));
        if (ws.ndirty) {
            log_error("the work tree holds uncommitted checkpoints (%s, ...): commit them before a pull moves %s",
                      ws.dirty[0], branch);
            return STATUS_INPUT;
        }
    }
    TRY(repo_ref_update(r->dir, ref, have ? &mine : NULL, false, &tip, "pull: fast-forward", 30, &r->chaos));
    if (current) TRY(repo_work_checkout(r, &tip, false, pathout, sizeof pathout));
    return STATUS_OK;
}

status repo_clone(const char *src, const char *root, bool bare, uint64_t *copied, uint64_t *bytes)
{
    repo rs, r;
    TRY(open_remote(src, &rs));
    char branch[REPO_NAME_MAX], from[REPO_PATH_MAX], to[REPO_PATH_MAX];
    repo_id head;
    bool born;
    TRY(repo_head(&rs, branch, sizeof branch, &head, &born));
    if (!branch[0]) snprintf(branch, sizeof branch, "main");
    TRY(repo_init(root, bare, branch));
    TRY(repo_open(&r, root));
    TRY(repo_remote_add(&r, "origin", rs.root, false));
    repo_objdir(rs.dir, from, sizeof from);
    repo_objdir(r.dir, to, sizeof to);
    char (*names)[256];
    repo_id *ids;
    uint64_t present = 0;
    status st = STATUS_OK;
    int n = repo_refs_list(rs.dir, "refs/heads", &names, &ids);
    for (int i = 0; i < n && st == STATUS_OK; i++) {
        char ref[REPO_NAME_MAX + 300];
        st = repo_transfer(from, to, &ids[i], &r.chaos, copied, bytes, &present);
        snprintf(ref, sizeof ref, "refs/remotes/origin/%s", names[i] + strlen("refs/heads/"));
        if (st == STATUS_OK) st = repo_ref_update(r.dir, ref, NULL, true, &ids[i], "clone", 30, &r.chaos);
        if (st == STATUS_OK && !strcmp(names[i] + strlen("refs/heads/"), branch))
            st = repo_ref_update(r.dir, names[i], NULL, true, &ids[i], "clone", 30, &r.chaos);
    }
    free(names);
    free(ids);
    n = repo_refs_list(rs.dir, "refs/tags", &names, &ids);
    for (int i = 0; i < n && st == STATUS_OK; i++) {
        st = repo_transfer(from, to, &ids[i], &r.chaos, copied, bytes, &present);
        if (st == STATUS_OK) st = repo_ref_update(r.dir, names[i], NULL, true, &ids[i], "clone", 30, &r.chaos);
    }
    free(names);
    free(ids);
    char path[REPO_PATH_MAX];
    if (st == STATUS_OK && born && !bare) st = repo_work_checkout(&r, &head, false, path, sizeof path);
    return st;
}
