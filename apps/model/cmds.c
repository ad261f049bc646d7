/* cmds — nebula-model's local commands: init, commit, checkout, branch, tag, rollback,
 * status, fsck, gc. What they print is here; what they do is libcore/model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_app.h"

void model_short(const repo_id *id, char out[13])
{
    char hex[33];
    repo_id_hex(id, hex);
    snprintf(out, 13, "%.12s", hex);
}

int model_exit(status st)
{
    return st == STATUS_CORRUPT ? 2 : status_exit_code(st);
}

int model_open(const model_args *a, repo *r)
{
    const char *dir = config_str(a->cfg, "repo.dir");
    char root[REPO_PATH_MAX];
    if (!dir[0]) {
        if (!repo_find(".", root, sizeof root)) {
            log_error0("not in a repository (no " REPO_DIR "/ here or above); HINT: --repo DIR, or nebula-model init");
            return 2;
        }
        dir = root;
    }
    return model_exit(repo_open(r, dir));
}

static double mb(uint64_t b)
{
    return (double)b / 1e6;
}

int model_init(const model_args *a)
{
    const char *dir = a->nargs ? a->args[0] : ".", *branch = config_str(a->cfg, "repo.branch");
    if (!branch[0]) branch = "main";
    bool bare = config_bool(a->cfg, "repo.bare");
    status st = repo_init(dir, bare, branch);
    if (st == STATUS_OK)
        printf("initialised an empty %srepository in %s/" REPO_DIR " (branch %s)\n", bare ? "bare " : "", dir, branch);
    return model_exit(st);
}

int model_commit(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    const char *msg = config_str(a->cfg, "repo.message"), *branch = config_str(a->cfg, "repo.branch");
    const char *author = config_str(a->cfg, "repo.author");
    if (!msg[0]) {
        log_error0("commit needs a message: -m MSG (--message)");
        return 2;
    }
    if (r.bare && !a->nargs) {
        log_error0("%s is a bare repository (no work tree): name the checkpoint to commit", r.root);
        return 2;
    }
    repo_commit_opts o = { .message = msg, .author = author[0] ? author : NULL, .branch = branch[0] ? branch : NULL,
                           .delta = config_bool(a->cfg, "repo.delta") };
    repo_id id;
    repo_put_stats ps;
    status st = repo_commit_path(&r, a->nargs ? a->args[0] : r.root, &o, &id, &ps);
    if (st != STATUS_OK) return model_exit(st);
    char head[REPO_NAME_MAX], s[13];
    repo_id hid;
    bool born;
    repo_head(&r, head, sizeof head, &hid, &born);
    model_short(&id, s);
    if (ps.unchanged) {
        printf("nothing to commit: the checkpoint is the one of %s (%s)\n", branch[0] ? branch : head[0] ? head : "HEAD", s);
        return 0;
    }
    printf("[%s %s] %s\n", branch[0] ? branch : head[0] ? head : "detached HEAD", s, msg);
    printf("  %d datasets, %" PRIu64 " chunks: %" PRIu64 " new (%" PRIu64 " as deltas), %" PRIu64
           " already stored; checkpoint %.2f MB, new tensor bytes %" PRIu64 ", store +%.2f MB\n",
           ps.tensors, ps.chunks, ps.chunks_new, ps.deltas, ps.chunks - ps.chunks_new, mb(ps.raw_bytes),
           ps.new_tensor, mb(ps.stored));
    return 0;
}

int model_checkout(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    const char *name = a->args[0], *newb = config_str(a->cfg, "repo.branch");
    repo_id id, tmp;
    bool found, is_branch = false;
    char ref[REPO_NAME_MAX + 16], path[REPO_PATH_MAX] = "", s[13];
    status st = repo_resolve(&r, name, &id);
    if (st != STATUS_OK) return model_exit(st);
    if (repo_name_ok(name)) {
        snprintf(ref, sizeof ref, "refs/heads/%s", name);
        if (repo_ref_read(r.dir, ref, &tmp, &found) == STATUS_OK) is_branch = found;
    }
    if (newb[0]) {  /* checked before the work tree changes */
        snprintf(ref, sizeof ref, "refs/heads/%s", newb);
        if (!repo_name_ok(newb)) {
            log_error0("'%s' is not a valid branch name (letters, digits, '.', '_', '-', '/')", newb);
            return 2;
        }
        if (repo_ref_read(r.dir, ref, &tmp, &found) != STATUS_OK || found) {
            log_error0("branch '%s' exists; HINT: nebula-model checkout %s", newb, newb);
            return 2;
        }
    }
    st = repo_work_checkout(&r, &id, config_bool(a->cfg, "repo.force"), path, sizeof path);
    if (st != STATUS_OK) return model_exit(st);
    char why[REPO_NAME_MAX * 2 + 32];
    snprintf(why, sizeof why, "checkout: moving to %s", name);
    if (newb[0]) {
        st = repo_ref_update(r.dir, ref, NULL, false, &id, why, 30, &r.chaos);
        if (st == STATUS_OK) st = repo_head_set(&r, newb, &id, why);
    } else {
        st = repo_head_set(&r, is_branch ? name : NULL, &id, why);
    }
    if (st != STATUS_OK) return model_exit(st);
    model_short(&id, s);
    if (newb[0]) printf("switched to a new branch '%s' at %s\n", newb, s);
    else if (is_branch) printf("switched to branch '%s' (%s)\n", name, s);
    else printf("HEAD is now at %s (detached: commits go to no branch; checkout -b NAME keeps them)\n", s);
    if (path[0]) printf("checkpoint: %s (checksums verified)\n", path);
    return 0;
}

/* branch and tag: list, create, delete. */
static int refs_cmd(const model_args *a, const char *kind, const char *prefix)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char head[REPO_NAME_MAX], s[13], ref[REPO_NAME_MAX + 16], why[REPO_NAME_MAX + 32];
    repo_id hid, id;
    bool born, found;
    repo_head(&r, head, sizeof head, &hid, &born);
    bool tag = !strcmp(kind, "tag");
    if (!a->nargs) {
        char (*names)[256];
        repo_id *ids;
        int n = repo_refs_list(r.dir, prefix, &names, &ids);
        for (int i = 0; i < n; i++) {
            const char *nm = names[i] + strlen(prefix) + 1;
            model_short(&ids[i], s);
            printf("%s %-24s %s\n", !tag && !strcmp(nm, head) ? "*" : " ", nm, s);
        }
        free(names);
        free(ids);
        return 0;
    }
    const char *name = a->args[0];
    if (!repo_name_ok(name)) {
        log_error0("'%s' is not a valid %s name (letters, digits, '.', '_', '-', '/'; no '..', no leading '-' or '.')",
                   name, kind);
        return 2;
    }
    snprintf(ref, sizeof ref, "%s/%s", prefix, name);
    if (repo_ref_read(r.dir, ref, &id, &found) != STATUS_OK) return 2;
    if (config_bool(a->cfg, "repo.delete")) {
        if (!found) {
            log_error0("no %s '%s'", kind, name);
            return 2;
        }
        if (!tag && !strcmp(name, head)) {
            log_error0("branch '%s' is checked out: switch to another before deleting it", name);
            return 2;
        }
        snprintf(why, sizeof why, "%s: delete", kind);
        status st = repo_ref_update(r.dir, ref, &id, false, NULL, why, 30, &r.chaos);
        model_short(&id, s);
        if (st == STATUS_OK) printf("deleted %s '%s' (was %s)\n", kind, name, s);
        return model_exit(st);
    }
    if (found) {
        log_error0("%s '%s' exists%s", kind, name, tag ? " (tags never move; --delete it first)" : "");
        return 2;
    }
    status st = repo_resolve(&r, a->nargs > 1 ? a->args[1] : "HEAD", &id);
    if (st != STATUS_OK) return model_exit(st);
    snprintf(why, sizeof why, "%s: created", kind);
    st = repo_ref_update(r.dir, ref, NULL, false, &id, why, 30, &r.chaos);
    model_short(&id, s);
    if (st == STATUS_OK) printf("%s '%s' at %s\n", kind, name, s);
    return model_exit(st);
}

int model_branch(const model_args *a)
{
    return refs_cmd(a, "branch", "refs/heads");
}

int model_tag(const model_args *a)
{
    return refs_cmd(a, "tag", "refs/tags");
}

int model_rollback(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char head[REPO_NAME_MAX], ref[REPO_NAME_MAX + 16], path[REPO_PATH_MAX] = "", s0[13], s1[13];
    repo_id cur, to;
    bool born;
    if (repo_head(&r, head, sizeof head, &cur, &born) != STATUS_OK) return 2;
    if (!born) {
        log_error0("nothing to roll back: the branch has no commit");
        return 2;
    }
    const char *target = a->nargs ? a->args[0] : "HEAD~1";
    status st = repo_resolve(&r, target, &to);
    if (st != STATUS_OK) return model_exit(st);
    st = repo_work_checkout(&r, &to, config_bool(a->cfg, "repo.force"), path, sizeof path);
    char why[300];
    model_short(&cur, s0);
    model_short(&to, s1);
    snprintf(why, sizeof why, "rollback: from %s to %s", s0, s1);
    snprintf(ref, sizeof ref, "refs/heads/%s", head);
    if (st == STATUS_OK) st = head[0] ? repo_ref_update(r.dir, ref, &cur, false, &to, why, 30, &r.chaos)
                                      : repo_head_set(&r, NULL, &to, why);
    if (st != STATUS_OK) return model_exit(st);
    printf("%s: %s -> %s (rolled back to %s; the reflog keeps %s: nebula-model checkout %s -b NAME restores it)\n",
           head[0] ? head : "HEAD", s0, s1, target, s0, s0);
    if (path[0]) printf("checkpoint: %s (checksums verified)\n", path);
    return 0;
}

int model_status(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char head[REPO_NAME_MAX], s[13] = "none";
    repo_id id;
    bool born;
    if (repo_head(&r, head, sizeof head, &id, &born) != STATUS_OK) return 2;
    if (born) model_short(&id, s);
    repo_status ws;
    if (repo_work_status(&r, &ws) != STATUS_OK) return 1;
    if (config_bool(a->cfg, "repo.json")) {
        json_t *clean = json_array(), *dirty = json_array();
        for (int i = 0; i < ws.nclean; i++) json_array_append_new(clean, json_string(ws.clean[i]));
        for (int i = 0; i < ws.ndirty; i++) json_array_append_new(dirty, json_string(ws.dirty[i]));
        json_t *j = json_pack("{s:s, s:s?, s:o, s:o, s:b}", "branch", head, "commit", born ? s : NULL, "committed",
                              clean, "uncommitted", dirty, "bare", r.bare);
        json_dumpf(j, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(j);
        return 0;
    }
    if (head[0]) printf("on branch %s (%s)\n", head, born ? s : "no commit yet");
    else printf("HEAD detached at %s\n", s);
    if (r.bare) printf("bare repository: no work tree\n");
    for (int i = 0; i < ws.nclean; i++) printf("  committed    ckpt/%s\n", ws.clean[i]);
    for (int i = 0; i < ws.ndirty; i++) printf("  uncommitted  ckpt/%s\n", ws.dirty[i]);
    if (!r.bare && ws.nclean + ws.ndirty == 0) printf("work tree empty (ckpt/ holds no checkpoint)\n");
    if (ws.ndirty) printf("(nebula-model commit -m MSG ckpt/NAME records one)\n");
    return 0;
}

int model_fsck(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    repo_fsck_report rep;
    status st = repo_fsck(&r, &rep);
    printf("%" PRIu64 " objects checked: %" PRIu64 " damaged, %" PRIu64 " missing, %" PRIu64
           " unreachable (gc removes them), %" PRIu64 " debris\n",
           rep.objects, rep.bad, rep.missing, rep.unreachable, rep.debris);
    printf("%s\n", st == STATUS_OK ? "fsck: ok" : "fsck: the repository is damaged (see the errors above)");
    return st == STATUS_OK ? 0 : 1;
}

int model_gc(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    uint64_t removed = 0, freed = 0;
    status st = repo_gc(&r, !config_bool(a->cfg, "repo.prune_reflog"), (double)config_int(a->cfg, "repo.grace"), &removed,
                        &freed);
    if (st == STATUS_OK) printf("gc: removed %" PRIu64 " files, %.2f MB\n", removed, mb(freed));
    return model_exit(st);
}
