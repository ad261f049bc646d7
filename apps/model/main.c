/* nebula-model — version control of checkpoints: commits, branches and tags, checkout,
 * tensor-aware diff, rollback, push and pull between repositories (docs/model.md).
 *
 *   nebula-model init my_model && cd my_model
 *   nebula-model commit -m "baseline" ../runs/gpt2/ckpt/step_00001000
 *   nebula-model checkout main -b experimental
 *   nebula-model push origin experimental
 *
 * main() reads like a script: subcommand -> its arguments -> options -> runtime -> run. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/runtime.h"
#include "model_app.h"

static const config_key model_schema[] = {
    { "repo", "dir", CONFIG_TYPE_STRING, "",
      .help = "the repository directory (empty: the one holding the current directory, as git finds .git)" },
    { "repo", "message", CONFIG_TYPE_STRING, "", .help = "commit: the commit message (-m)" },
    { "repo", "branch", CONFIG_TYPE_STRING, "",
      .help = "init: the first branch (empty: main); checkout: create this branch at NAME and switch to it (-b); "
              "commit: commit on this branch instead of HEAD's" },
    { "repo", "delta", CONFIG_TYPE_BOOL, "false",
      .help = "commit: store each new chunk as the XOR with the parent commit's chunk when that compresses smaller "
              "(checkpoints few steps apart or at a low learning rate; a decode and a second compression per chunk)" },
    { "repo", "author", CONFIG_TYPE_STRING, "", .help = "commit: the author (empty: $NEBULA_AUTHOR, else user@host)" },
    { "repo", "bare", CONFIG_TYPE_BOOL, "false", .help = "init, clone: a repository without a work tree (a remote)" },
    { "repo", "force", CONFIG_TYPE_BOOL, "false",
      .help = "checkout, rollback: discard uncommitted checkpoints of the work tree; push: replace a remote branch "
              "that is not an ancestor" },
    { "repo", "delete", CONFIG_TYPE_BOOL, "false", .help = "branch, tag: delete NAME" },
    { "repo", "graph", CONFIG_TYPE_BOOL, "false", .help = "log: every branch and tag, drawn as a graph" },
    { "repo", "json", CONFIG_TYPE_BOOL, "false", .help = "log, show, diff, status: one JSON document on stdout" },
    { "repo", "max_count", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 30, .help = "log: at most this many (0: all)" },
    { "repo", "grace", CONFIG_TYPE_INT, "3600", .min = 0, .max = 1 << 30,
      .help = "gc: seconds an unreachable object or temporary file must have existed before it is removed (a "
              "commit or push running meanwhile has written objects nothing names yet)" },
    { "repo", "prune_reflog", CONFIG_TYPE_BOOL, "false",
      .help = "gc: also remove what only the reflog still names (commits left by a rollback)" },
};

static const cli_option model_options[] = {
    { "repo", "repo.dir", NULL },
    { "message", "repo.message", NULL },
    { "branch", "repo.branch", NULL },
    { "author", "repo.author", NULL },
    { "delta", "repo.delta", "true" },
    { "bare", "repo.bare", "true" },
    { "force", "repo.force", "true" },
    { "delete", "repo.delete", "true" },
    { "graph", "repo.graph", "true" },
    { "json", "repo.json", "true" },
    { "max-count", "repo.max_count", NULL },
    { "prune-reflog", "repo.prune_reflog", "true" },
    { "grace", "repo.grace", NULL },
};

static const char usage[] =
    "usage: nebula-model init [DIR] [--bare] [--branch B]   a repository (DIR/.nebula-model) on branch B (main)\n"
    "       nebula-model commit -m MSG [PATH] [--branch B] [--author A] [--delta]\n"
    "                                          the checkpoint PATH (a checkpoint directory, or a run directory: its\n"
    "                                          newest committed checkpoint; default: the work tree's newest) as a\n"
    "                                          commit on HEAD's branch, with its lineage (run, config, data, metrics)\n"
    "       nebula-model checkout NAME [-b BRANCH] [--force]\n"
    "                                          NAME's checkpoint into the work tree (ckpt/step_N, verified by its\n"
    "                                          checksums); a branch is switched to, anything else detaches HEAD;\n"
    "                                          -b creates BRANCH at NAME and switches to it\n"
    "       nebula-model branch [NAME [START]] [--delete]   list, create (at START, default HEAD) or delete\n"
    "       nebula-model tag [NAME [REF]] [--delete]        list, create (tags never move) or delete\n"
    "       nebula-model log [REF] [--graph] [--max-count N] [--json]\n"
    "       nebula-model show [REF] [--json]  a commit: lineage, tensors, chunks shared with its parent\n"
    "       nebula-model diff A B [--json]    per tensor: chunks changed, max|a-b|, relative L2, cosine (as\n"
    "                                          nebula-ckpt diff); config and metrics differences\n"
    "       nebula-model rollback [REF] [--force]\n"
    "                                          moves HEAD's branch back to REF (default HEAD~1) and checks it out\n"
    "       nebula-model status [--json]      HEAD, and which checkpoints of the work tree are committed\n"
    "       nebula-model fsck                 every object against its hash, every ref, commit and manifest\n"
    "       nebula-model gc [--prune-reflog] [--grace S]\n"
    "                                          removes objects no ref (or reflog entry) reaches, and debris, older\n"
    "                                          than S seconds (3600)\n"
    "       nebula-model remote [add NAME PATH]\n"
    "       nebula-model push [REMOTE [BRANCH]] [--force]   only the objects the remote lacks\n"
    "       nebula-model pull [REMOTE [BRANCH]]             fast-forward only\n"
    "       nebula-model clone SRC DIR [--bare]\n"
    "NAME and REF: a branch, a tag, REMOTE/BRANCH, a commit id or a unique prefix (4+ hex digits), HEAD,\n"
    "each with ~N for N first parents back. -m and -b are accepted for --message and --branch, as in git.\n"
    "--repo DIR names the repository; without it, the one holding the current directory is used.\n"
    "Exit: 0 ok, 1 damaged, rejected (push), different (diff) or failed, 2 usage or input error.";

typedef struct model_cmd {
    const char *name;
    int min, max;               /* positional arguments */
    const char *takes;          /* config keys it reads, space-separated (repo.dir: every command) */
    int (*run)(const model_args *a);
} model_cmd;

static const model_cmd cmds[] = {
    { "init", 0, 1, "repo.bare repo.branch", model_init },
    { "commit", 0, 1, "repo.message repo.branch repo.author repo.delta", model_commit },
    { "checkout", 1, 1, "repo.branch repo.force", model_checkout },
    { "branch", 0, 2, "repo.delete", model_branch },
    { "tag", 0, 2, "repo.delete", model_tag },
    { "log", 0, 1, "repo.graph repo.max_count repo.json", model_log },
    { "show", 0, 1, "repo.json", model_show },
    { "diff", 2, 2, "repo.json", model_diff },
    { "rollback", 0, 1, "repo.force", model_rollback },
    { "status", 0, 0, "repo.json", model_status },
    { "fsck", 0, 0, "", model_fsck },
    { "gc", 0, 0, "repo.prune_reflog repo.grace", model_gc },
    { "remote", 0, 3, "", model_remote },
    { "push", 0, 2, "repo.force", model_push },
    { "pull", 0, 2, "", model_pull },
    { "clone", 2, 2, "repo.bare", model_clone },
};
#define NCMDS (int)(sizeof cmds / sizeof cmds[0])
#define NOPTS (int)(sizeof model_options / sizeof model_options[0])
#define NKEYS (int)(sizeof model_schema / sizeof model_schema[0])

static bool takes(const model_cmd *cmd, const char *key)
{
    char list[160], word[128];
    snprintf(list, sizeof list, " %s repo.dir ", cmd->takes);
    if (snprintf(word, sizeof word, " %s ", key) >= (int)sizeof word) return false;
    return strstr(list, word) != NULL;
}

/* An option the subcommand does not read is an error, not ignored. */
static status check_options(const config *cfg, const model_cmd *cmd)
{
    for (int k = 0; k < NKEYS; k++) {
        char key[96];
        snprintf(key, sizeof key, "%s.%s", model_schema[k].section, model_schema[k].name);
        if (!strcmp(config_origin(cfg, key), "default") || takes(cmd, key)) continue;
        const char *flag = key;
        for (int i = 0; i < NOPTS; i++)
            if (!strcmp(model_options[i].key, key)) flag = model_options[i].flag;
        log_error0("--%s does not apply to '%s'", flag, cmd->name);
        return STATUS_USAGE;
    }
    return STATUS_OK;
}

/* Whether --flag takes a value (so the next word is not a positional argument). */
static bool takes_value(const char *arg)
{
    if (strchr(arg, '=')) return false;
    if (!strcmp(arg, "--config") || !strcmp(arg, "--set")) return true;
    for (int i = 0; i < NOPTS; i++)
        if (!strcmp(arg + 2, model_options[i].flag)) return model_options[i].value == NULL;
    return false;
}

/* The index of the subcommand: the first word that is neither an option nor an option's
 * value (options may come before it: nebula-model --repo R log); 0 when there is none. */
static int find_command(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-') return i;
        if (takes_value(argv[i]) || !strcmp(argv[i], "-m") || !strcmp(argv[i], "-b")) i++;
    }
    return 0;
}

/* Splits argv into positional arguments and options (git's -m and -b become --message
 * and --branch); *opts gets argv[0] and the options, for cli_parse. */
static const model_cmd *parse_command(int argc, char **argv, int at, model_args *a, char **opts, int *nopts)
{
    int c = 0;
    while (c < NCMDS && strcmp(cmds[c].name, argv[at]) != 0) c++;
    if (c == NCMDS) {
        log_error0("unknown subcommand '%s'; expected init, commit, checkout, branch, tag, log, show, diff, rollback, "
                   "status, fsck, gc, remote, push, pull or clone (--help)", argv[at]);
        return NULL;
    }
    opts[(*nopts)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (i == at) continue;
        char *w = argv[i];
        if (!strcmp(w, "-m")) w = "--message";
        else if (!strcmp(w, "-b")) w = "--branch";
        if (w[0] == '-' && w[1]) {
            opts[(*nopts)++] = w;
            if (takes_value(w) && i + 1 < argc) opts[(*nopts)++] = argv[++i];
        } else if (a->nargs < MODEL_ARGS_MAX) {
            a->args[a->nargs++] = w;
        } else {
            log_error0("%s: too many arguments (--help shows the usage)", cmds[c].name);
            return NULL;
        }
    }
    if (a->nargs < cmds[c].min || a->nargs > cmds[c].max) {
        log_error0("%s takes %d to %d argument(s), %d given; --help shows the usage", cmds[c].name, cmds[c].min,
                   cmds[c].max, a->nargs);
        return NULL;
    }
    return &cmds[c];
}

/* --help and --version anywhere answer before the subcommand's arguments are looked at. */
static bool asks_only(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--version")) return true;
    return find_command(argc, argv) == 0;
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    config cfg;
    config_init(&cfg, model_schema, NKEYS);
    cli_action action;
    if (asks_only(argc, argv)) {
        status st = cli_parse(&cfg, model_options, NOPTS, argc, argv, 1, usage, &action);
        if (st == STATUS_OK && action == CLI_ACTION_EXIT) return 0;
        if (st == STATUS_OK) log_error0("missing subcommand: init, commit, checkout, log, diff, push, ... (--help)");
        return 2;
    }
    model_args a = { 0 };
    char **opts = calloc((size_t)argc + 1, sizeof *opts);
    int nopts = 0;
    const model_cmd *cmd = parse_command(argc, argv, find_command(argc, argv), &a, opts, &nopts);
    if (!cmd) return 2;
    status st = cli_parse(&cfg, model_options, NOPTS, nopts, opts, 1, usage, &action);
    if (st == STATUS_OK && action == CLI_ACTION_EXIT) return 0;
    if (st == STATUS_OK) st = check_options(&cfg, cmd);
    if (st != STATUS_OK) return status_exit_code(st);

    /* One process, no MPI (its start-up is a third of a second per command): the store is
     * plain files, and a checkpoint's catalog is read with HDF5's serial driver. */
    a.cfg = &cfg;
    int code = cmd->run(&a);
    fflush(stdout);
    free(opts);
    return code;
}
