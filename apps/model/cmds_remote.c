/* cmds_remote — nebula-model remote, push, pull and clone: repositories on a shared file
 * system exchanging only the objects the other side lacks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_app.h"

int model_remote(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    if (a->nargs == 0) {
        json_t *rem = repo_remotes(&r), *v;
        const char *k;
        json_object_foreach(rem, k, v) printf("%-16s %s\n", k, json_is_string(v) ? json_string_value(v) : "(not a path)");
        json_decref(rem);
        return 0;
    }
    if (strcmp(a->args[0], "add") != 0 || a->nargs != 3) {
        log_error0("usage: nebula-model remote [add NAME PATH]");
        return 2;
    }
    status st = repo_remote_add(&r, a->args[1], a->args[2], false);
    if (st == STATUS_OK) printf("remote '%s': %s\n", a->args[1], a->args[2]);
    return model_exit(st);
}

/* REMOTE and BRANCH of push and pull: origin and HEAD's branch by default. */
static int remote_branch(const model_args *a, const repo *r, const char **remote, char *branch, size_t len)
{
    *remote = a->nargs > 0 ? a->args[0] : "origin";
    if (a->nargs > 1) {
        snprintf(branch, len, "%s", a->args[1]);
        return 0;
    }
    repo_id id;
    bool born;
    if (repo_head(r, branch, len, &id, &born) != STATUS_OK) return 1;
    if (!branch[0]) {
        log_error0("HEAD is detached: name the branch (nebula-model push REMOTE BRANCH)");
        return 2;
    }
    return 0;
}

int model_push(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    const char *remote;
    char branch[REPO_NAME_MAX];
    if ((code = remote_branch(a, &r, &remote, branch, sizeof branch)) != 0) return code;
    uint64_t copied = 0, bytes = 0, present = 0;
    status st = repo_push(&r, remote, branch, config_bool(a->cfg, "repo.force"), &copied, &bytes, &present);
    printf("push %s %s: %" PRIu64 " objects sent (%.2f MB), %" PRIu64 " already there%s\n", remote, branch, copied,
           (double)bytes / 1e6, present, st == STATUS_OK ? "" : st == STATUS_PEER ? "; rejected" : "; failed");
    return model_exit(st);
}

int model_pull(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    const char *remote;
    char branch[REPO_NAME_MAX];
    if ((code = remote_branch(a, &r, &remote, branch, sizeof branch)) != 0) return code;
    uint64_t copied = 0, bytes = 0, present = 0;
    status st = repo_pull(&r, remote, branch, &copied, &bytes, &present);
    printf("pull %s %s: %" PRIu64 " objects received (%.2f MB), %" PRIu64 " already here%s\n", remote, branch, copied,
           (double)bytes / 1e6, present, st == STATUS_OK ? "" : "; not updated");
    return model_exit(st);
}

int model_clone(const model_args *a)
{
    uint64_t copied = 0, bytes = 0;
    status st = repo_clone(a->args[0], a->args[1], config_bool(a->cfg, "repo.bare"), &copied, &bytes);
    if (st == STATUS_OK)
        printf("cloned %s into %s: %" PRIu64 " objects (%.2f MB)\n", a->args[0], a->args[1], copied, (double)bytes / 1e6);
    return model_exit(st);
}
