/* nebula-ckpt — inspect, verify, compare, reshard, upgrade and convert checkpoints.
 *
 *   nebula-ckpt info runs/x/ckpt/step_00000600 --json
 *   mpirun -np 8 nebula-ckpt reshard runs/x/ckpt/step_00000600 --dp 64 --out runs/y/ckpt
 *   nebula-ckpt convert runs/x/ckpt/step_00000600 --to safetensors --out model.safetensors
 *
 * main() reads like a script: subcommand -> its paths -> options -> runtime -> run. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "ckpt_tool.h"

static const config_key tool_schema[] = {
    { "ckpt", "json", CONFIG_TYPE_BOOL, "false", .help = "info, diff: one JSON document on stdout" },
    { "ckpt", "dp", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 24,
      .help = "reshard: the data-parallel size of the grid to rewrite the per-rank state for" },
    { "ckpt", "tp", CONFIG_TYPE_INT, "1", .min = 1, .max = 4096,
      .help = "reshard: the tensor-parallel size of the grid to resume on (ranks = tp x pp x dp)" },
    { "ckpt", "pp", CONFIG_TYPE_INT, "1", .min = 1, .max = 4096,
      .help = "reshard: the pipeline stages of the grid to resume on" },
    { "ckpt", "ranks_per_node", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 24,
      .help = "reshard: ranks per node to record (0: the writer's, at most --dp)" },
    { "ckpt", "out", CONFIG_TYPE_STRING, "",
      .help = "reshard, upgrade: commit the result as OUT/step_N (empty: replace the checkpoint itself); "
              "convert: the file (--to), the model directory (--to hf) or the checkpoint directory (--from) to "
              "write" },
    { "ckpt", "to", CONFIG_TYPE_ENUM, "none", .choices = "none|safetensors|llmc|hf",
      .help = "convert: a checkpoint to this format (hf: a transformers model directory)" },
    { "ckpt", "from", CONFIG_TYPE_ENUM, "none", .choices = "none|safetensors|llmc|hf",
      .help = "convert: a file (hf: a transformers model directory) of this format to a checkpoint" },
    { "ckpt", "dtype", CONFIG_TYPE_ENUM, "none", .choices = "none|bf16|fp16|fp32",
      .help = "convert: a copy of the checkpoint (--out DIR) with every tensor stored in this type, for export "
              "(bf16/fp16 round to nearest; training checkpoints stay fp32 for an exact resume)" },
    MODEL_CONFIG_KEYS,
};

static const cli_option tool_options[] = {
    { "json", "ckpt.json", "true" },
    { "dp", "ckpt.dp", NULL },
    { "tp", "ckpt.tp", NULL },
    { "pp", "ckpt.pp", NULL },
    { "ranks-per-node", "ckpt.ranks_per_node", NULL },
    { "out", "ckpt.out", NULL },
    { "to", "ckpt.to", NULL },
    { "from", "ckpt.from", NULL },
    { "dtype", "ckpt.dtype", NULL },
    { "model", "model.name", NULL },
};

static const char usage[] =
    "usage: nebula-ckpt info PATH [--json]     format and version, step, model and config, world layout, every\n"
    "                                          tensor and blob, the run's state (optimizer, loader, DGC-Pro, RNG),\n"
    "                                          commit status\n"
    "       nebula-ckpt verify PATH            every checksum, the commit marker, the parameter table against\n"
    "                                          the stored config; names the dataset, rank row and file offset\n"
    "       nebula-ckpt diff A B [--json]      per tensor max |a-b|, relative L2 and cosine; exit 0 only if identical\n"
    "       nebula-ckpt reshard PATH --dp N [--tp T] [--pp P] [--ranks-per-node K] [--out DIR]\n"
    "                                          the per-rank state for a run of T x P x N ranks (tp x pp x dp), as\n"
    "                                          nebula-train's load on that grid would see it\n"
    "       nebula-ckpt upgrade PATH [--out DIR]\n"
    "                                          an older format version to the current one, saying what changed\n"
    "       nebula-ckpt convert PATH --to safetensors|llmc --out FILE\n"
    "       nebula-ckpt convert FILE --from safetensors|llmc [--model NAME] [--set model.KEY=V] --out DIR\n"
    "                                          the parameters to Hugging Face / llm.c files, or such a file to\n"
    "                                          DIR/step_00000000 (zero moments) that nebula-train resumes from;\n"
    "                                          names may carry module., transformer. or bert. prefixes and\n"
    "                                          tied copies (lm_head, cls.predictions.decoder), which must match\n"
    "       nebula-ckpt convert PATH --to hf --out HFDIR\n"
    "       nebula-ckpt convert HFDIR --from hf --out DIR\n"
    "                                          GPT-2 / BERT to and from a transformers directory\n"
    "                                          (model.safetensors, config.json, tokenizer files), as\n"
    "                                          GPT2LMHeadModel / BertForMaskedLM save_pretrained it\n"
    "       nebula-ckpt convert PATH --dtype bf16|fp16|fp32 --out DIR\n"
    "                                          a copy with its tensors stored in that type (export; fp32 widens)\n"
    "PATH is a checkpoint directory (RUN/ckpt/step_N) or its state.h5. reshard and upgrade commit their\n"
    "result like a save: in place, or as DIR/step_N with --out DIR. Large checkpoints: mpirun -np P\n"
    "nebula-ckpt ... reads and writes with parallel HDF5. Exit: 0 ok, 1 damaged, different (diff) or failed,\n"
    "2 usage or input error.";

typedef struct tool_cmd {
    const char *name;
    int npaths;                 /* positional paths after the name */
    const char *takes;          /* the config keys it reads ("model": the whole section), space-separated */
    int (*run)(const tool_args *a);
} tool_cmd;

static const tool_cmd cmds[] = {
    { "info", 1, "ckpt.json", tool_info },
    { "verify", 1, "", tool_verify },
    { "diff", 2, "ckpt.json", tool_diff },
    { "reshard", 1, "ckpt.dp ckpt.tp ckpt.pp ckpt.ranks_per_node ckpt.out", tool_reshard },
    { "upgrade", 1, "ckpt.out", tool_upgrade },
    { "convert", 1, "ckpt.to ckpt.from ckpt.dtype ckpt.out model", tool_convert },
};
#define NCMDS (int)(sizeof cmds / sizeof cmds[0])
#define NOPTS (int)(sizeof tool_options / sizeof tool_options[0])
#define NKEYS (int)(sizeof tool_schema / sizeof tool_schema[0])

/* Whether cmd reads the key "section.name". */
static bool takes(const tool_cmd *cmd, const char *key)
{
    char list[128], word[96], section[40];
    snprintf(list, sizeof list, " %s ", cmd->takes);
    snprintf(word, sizeof word, " %s ", key);
    snprintf(section, sizeof section, " %.*s ", (int)strcspn(key, "."), key);
    return strstr(list, word) || strstr(list, section);
}

/* An option (or --set key) the user gave that the subcommand does not read is an
 * error, not ignored. */
static status check_options(const config *cfg, const tool_cmd *cmd)
{
    char flags[160] = "";
    for (int i = 0; i < NOPTS; i++)
        if (takes(cmd, tool_options[i].key))
            snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s--%s", flags[0] ? ", " : "",
                     tool_options[i].flag);
    for (int k = 0; k < NKEYS; k++) {
        char key[96];
        snprintf(key, sizeof key, "%s.%s", tool_schema[k].section, tool_schema[k].name);
        if (!strcmp(config_origin(cfg, key), "default") || takes(cmd, key)) continue;
        const char *flag = key;
        for (int i = 0; i < NOPTS; i++)
            if (!strcmp(tool_options[i].key, key)) flag = tool_options[i].flag;
        log_error0("%s%s does not apply to '%s' (%s%s)", flag == key ? "--set " : "--", flag, cmd->name,
                   flags[0] ? "it takes " : "it takes no options", flags);
        return STATUS_USAGE;
    }
    return STATUS_OK;
}

/* The subcommand and its paths; 2 with a message when they are not there. */
static const tool_cmd *parse_command(int argc, char **argv, tool_args *a)
{
    const char *name = argv[1];
    int c = 0;
    while (c < NCMDS && strcmp(cmds[c].name, name) != 0) c++;
    if (c == NCMDS) {
        log_error0("unknown subcommand '%s'; expected info, verify, diff, reshard, upgrade or convert (--help)", name);
        return NULL;
    }
    for (int i = 0; i < cmds[c].npaths; i++) {
        if (2 + i >= argc || !strncmp(argv[2 + i], "--", 2)) {
            log_error0("%s needs %s; --help shows the usage", name,
                       cmds[c].npaths == 2 ? "two checkpoints A and B" : "a PATH (a checkpoint directory or its "
                       "state.h5; for convert --from, the file)");
            return NULL;
        }
        a->paths[i] = argv[2 + i];
    }
    return &cmds[c];
}

/* --help and --version anywhere answer before the subcommand's paths are looked for. */
static bool asks_only(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--version")) return true;
    return argc < 2 || !strncmp(argv[1], "--", 2);
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    config cfg;
    config_init(&cfg, tool_schema, NKEYS);
    cli_action action;
    if (asks_only(argc, argv)) {
        status st = cli_parse(&cfg, tool_options, NOPTS, argc, argv, 1, usage, &action);
        if (st == STATUS_OK && action == CLI_ACTION_EXIT) return 0;
        if (st == STATUS_OK) log_error0("missing subcommand: info, verify, diff, reshard, upgrade or convert (--help)");
        return 2;
    }
    tool_args a = { 0 };
    const tool_cmd *cmd = parse_command(argc, argv, &a);
    if (!cmd) return 2;
    status st = cli_parse(&cfg, tool_options, NOPTS, argc, argv, 2 + cmd->npaths, usage, &action);
    if (st == STATUS_OK && action == CLI_ACTION_EXIT) return 0;
    if (st == STATUS_OK) st = check_options(&cfg, cmd);
    if (st != STATUS_OK) return status_exit_code(st);

    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };  /* a tool: no core binding */
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    a.rt = &rt;
    a.cfg = &cfg;
    int code = cmd->run(&a);
    /* Every subcommand's outcome was agreed by all ranks: a plain exit, never an abort. */
    fflush(stdout);
    runtime_free(&rt);
    return code;
}
