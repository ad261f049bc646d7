/* model_app — nebula-model's commands (cmds.c, cmds_remote.c) and what main.c gives them. */
#ifndef NEBULA_MODEL_APP_H
#define NEBULA_MODEL_APP_H

#include "base/config.h"
#include "base/log.h"
#include "model/repo.h"

#define MODEL_ARGS_MAX 4

typedef struct model_args {
    const config *cfg;          /* the [repo] options */
    const char *args[MODEL_ARGS_MAX]; /* positional arguments after the subcommand */
    int nargs;
} model_args;

/* Each returns the exit code: 0 ok, 1 failure (damage found, a rejected push, a diff
 * that differs), 2 usage or input error. */
int model_init(const model_args *a);
int model_commit(const model_args *a);
int model_checkout(const model_args *a);
int model_branch(const model_args *a);
int model_tag(const model_args *a);
int model_log(const model_args *a);
int model_show(const model_args *a);
int model_diff(const model_args *a);
int model_rollback(const model_args *a);
int model_status(const model_args *a);
int model_gc(const model_args *a);
int model_fsck(const model_args *a);
int model_remote(const model_args *a);
int model_push(const model_args *a);
int model_pull(const model_args *a);
int model_clone(const model_args *a);

/* Opens the repository of --repo, else the one holding the current directory: 2 when none. */
int model_open(const model_args *a, repo *r);
/* The exit code of a status: a repository that is damaged or lies (STATUS_CORRUPT) is
 * input the command refuses, 2, as any bad input is; only fsck reports damage as 1. */
int model_exit(status st);
/* 12 hex digits of an id (a static buffer per call site is the caller's) */
void model_short(const repo_id *id, char out[13]);

#endif
