/* commands — the subcommands of nebula-ckpt: each opens its checkpoints, calls
 * libcore/ckpt and says what it found or did, on rank 0. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tool.h"
#include "comm/ctl.h"

#define CHANGES_MAX 8192  /* bytes of the lines an upgrade reports */

int tool_info(const tool_args *a)
{
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    if (a->rt->rank == 0) tool_print_info(&cat, config_bool(a->cfg, "ckpt.json"));
    ckpt_catalog_free(&cat);
    return 0;
}

/* ---- verify ------------------------------------------------------------------------ */

/* Rank 0: the parameter tables of the model the stored config describes against the file. */
static status verify_tables(const ckpt_catalog *cat, char *line, size_t len)
{
    tool_model tm;
    ckpt_content c;
    status st = tool_model_from_ini(&tm, cat->config, cat->file, cat->h.model, cat->file_bytes);
    if (st != STATUS_OK) return st;
    st = tool_content(&c, cat, &tm.m, false, true);
    if (st == STATUS_OK) st = ckpt_check_tables(cat, &c);
    if (st == STATUS_OK)
        snprintf(line, len, "%d groups match the tables of %s as the stored config describes it (table_hash "
                 "%016" PRIx64 ")", c.ngroups, cat->h.model, c.table_hash);
    tool_model_free(&tm);
    return st;
}

int tool_verify(const tool_args *a)
{
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    int rank = a->rt->rank, nbad = 0, problems = 0;
    ckpt_damage first;
    char tables[512] = "";
    if (cat.commit != CKPT_COMMIT_YES) {
        log_error0("%s is not committed (%s): loaders do not trust it", cat.dir,
                   cat.commit == CKPT_COMMIT_NO ? "no COMMITTED marker: its save did not finish"
                                                : "its COMMITTED marker is damaged or names another step");
        problems++;
    }
    train_ckpt_checks_register();  /* the same value checks as a load, the reload history's among them */
    status sums = ckpt_verify(a->rt->world, &cat, train_ckpt_check_values, &nbad, &first);
    if (sums == STATUS_IO) {
        ckpt_catalog_free(&cat);
        return 1;
    }
    problems += nbad;
    int st_tables = rank == 0 ? (int)verify_tables(&cat, tables, sizeof tables) : STATUS_OK;
    if (comm_ctl_bcast(comm_ctl_make(a->rt->world, 0), &st_tables, 1, MPI_INT, 0) != STATUS_OK) {  /* offline: no deadline */
        ckpt_catalog_free(&cat);
        return 1;
    }
    problems += st_tables != STATUS_OK;
    if (rank == 0) {
        uint64_t bytes = 0;
        for (int k = 0; k < cat.n; k++) bytes += cat.items[k].bytes;
        printf("verify %s (step %" PRId64 ", %s, %d ranks)\n", cat.dir, cat.h.step, cat.h.model, cat.h.world_size);
        printf("  commit     %s\n", cat.commit == CKPT_COMMIT_YES ? "committed" : "NOT committed");
        const char *stored = "float32";  /* the tensors' type: an export copy's 16 bits */
        for (int k = 0; k < cat.n; k++)
            if (!cat.items[k].blob && strcmp(cat.items[k].dtype, "float32") != 0) stored = cat.items[k].dtype;
        printf("  format     version %d, grid dp %d x tp %d x pp %d, ZeRO stage %d%s, tensors %s\n", cat.h.version,
               cat.h.layout.dp, cat.h.layout.tp, cat.h.layout.pp, cat.h.layout.zero_stage,
               cat.h.layout_recorded ? "" : " (implied: version 1 records none)", stored);
        printf("  checksums  %d datasets, %" PRIu64 " bytes: %s\n", cat.n, bytes,
               nbad ? "MISMATCH (see above)" : "every CRC-32 matches, blob rows included");
        printf("  tables     %s\n", st_tables == STATUS_OK ? tables : "MISMATCH (see above)");
        char row[48] = "";
        if (first.row >= 0) snprintf(row, sizeof row, " row %d (rank %d's bytes)", first.row, first.row);
        if (nbad)
            printf("FAILED: %d problem%s; the first in the file: %s%s at file offset %" PRIu64 " (0x%" PRIx64 "), %"
                   PRIu64 " bytes\n", problems, problems > 1 ? "s" : "", first.path, row, first.offset, first.offset,
                   first.bytes);
        else if (problems)
            printf("FAILED: %d problem%s (see above)\n", problems, problems > 1 ? "s" : "");
        else
            printf("ok\n");
    }
    ckpt_catalog_free(&cat);
    return problems ? 1 : 0;
}

/* ---- diff -------------------------------------------------------------------------- */

static const char *kind_str(ckpt_diff_kind k)
{
    static const char *s[] = { "same", "values", "shape", "only_a", "only_b" };
    return s[k];
}

/* The header fields that must agree for two checkpoints to be identical; the config,
 * the writer's version and the process grid (parallel_*, zero_stage: how the ranks held
 * the state, which the files store layout-independently) are shown but do not count (a
 * run directory is part of the config). Returns how many counted fields differ. */
static int diff_header(const ckpt_catalog *a, const ckpt_catalog *b, json_t *out)
{
    const ckpt_header *x = &a->h, *y = &b->h;
    struct { const char *name; long long va, vb; } f[] = {
        { "format_version", x->version, y->version }, { "step", x->step, y->step },
        { "world_size", x->world_size, y->world_size }, { "resharded_from", x->resharded_from, y->resharded_from },
        { "table_hash", (long long)x->table_hash, (long long)y->table_hash },
        { "parallel_dp", x->layout.dp, y->layout.dp }, { "parallel_tp", x->layout.tp, y->layout.tp },
        { "parallel_pp", x->layout.pp, y->layout.pp }, { "zero_stage", x->layout.zero_stage, y->layout.zero_stage },
    };
    const size_t counted = 5; /* the fields before the grid */
    int n = 0;
    if (strcmp(x->model, y->model) != 0) {
        json_object_set_new(out, "model", json_pack("[s, s]", x->model, y->model));
        n++;
    }
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].va != f[i].vb) {
            json_object_set_new(out, f[i].name, json_pack("[I, I]", (json_int_t)f[i].va, (json_int_t)f[i].vb));
            n += i < counted;
        }
    return n;
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();  /* JSON has no inf or NaN */
}

static void print_diff_text(const ckpt_diff_row *rows, int n, json_t *header, int nheader, bool config_differs)
{
    const char *key;
    json_t *v;
    json_object_foreach(header, key, v) {
        char *x = json_dumps(json_array_get(v, 0), JSON_ENCODE_ANY);
        char *y = json_dumps(json_array_get(v, 1), JSON_ENCODE_ANY);
        bool grid = !strncmp(key, "parallel_", 9) || !strcmp(key, "zero_stage");
        printf("header %-15s %s in A, %s in B%s\n", key, x, y,
               grid ? " (the grid it was written at; not counted: the data is layout-independent)" : "");
        free(x);
        free(y);
    }
    if (config_differs) printf("header %-15s differs (not counted: run directories are part of it)\n", "config");
    printf("%-56s %-7s %12s %12s %14s %10s\n", "dataset", "result", "max|a-b|", "rel_L2", "cosine", "differ");
    int same = 0;
    for (int i = 0; i < n; i++) {
        const ckpt_diff_row *r = &rows[i];
        same += r->kind == CKPT_DIFF_KIND_SAME;
        printf("%-56s %-7s", r->path, kind_str(r->kind));
        if (r->kind == CKPT_DIFF_KIND_VALUES && !isnan(r->max_abs))
            printf(" %12.5g %12.5g %14.10f %10" PRIu64, r->max_abs, r->rel_l2, r->cosine, r->differ);
        else if (r->kind == CKPT_DIFF_KIND_VALUES)
            printf(" %12s %12s %14s %10" PRIu64, "-", "-", "-", r->differ);
        printf("\n");
    }
    bool identical = same == n && nheader == 0;
    printf("%s: %d of %d datasets identical%s\n", identical ? "identical" : "different", same, n,
           nheader ? ", header differs" : "");
}

static void print_diff_json(const ckpt_diff_row *rows, int n, json_t *header, int nheader, bool config_differs)
{
    json_t *ds = json_array();
    int same = 0;
    for (int i = 0; i < n; i++) {
        const ckpt_diff_row *r = &rows[i];
        same += r->kind == CKPT_DIFF_KIND_SAME;
        json_array_append_new(ds, json_pack("{s:s, s:s, s:o, s:o, s:o, s:I}", "name", r->path, "result",
                                            kind_str(r->kind), "max_abs", num(r->max_abs), "rel_l2", num(r->rel_l2),
                                            "cosine", num(r->cosine), "differ", (json_int_t)r->differ));
    }
    json_t *j = json_pack("{s:b, s:O, s:b, s:o}", "identical", same == n && nheader == 0, "header", header,
                          "config_differs", config_differs, "datasets", ds);
    json_dumpf(j, stdout, JSON_INDENT(1));
    printf("\n");
    json_decref(j);
}

int tool_diff(const tool_args *a)
{
    ckpt_catalog ca, cb;
    status st = ckpt_catalog_open(&ca, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    if ((st = ckpt_catalog_open(&cb, a->paths[1])) != STATUS_OK) {
        ckpt_catalog_free(&ca);
        return status_exit_code(st);
    }
    ckpt_diff_row *rows = calloc((size_t)(ca.n + cb.n) + 1, sizeof *rows);
    CHECK(rows, "out of memory comparing checkpoints");
    int n = 0, code = 1;
    st = ckpt_diff(a->rt->world, &ca, &cb, rows, &n);
    if (st == STATUS_OK) {
        json_t *header = json_object();
        int nheader = diff_header(&ca, &cb, header), same = 0;
        bool config_differs = strcmp(ca.config, cb.config) != 0;
        for (int i = 0; i < n; i++) same += rows[i].kind == CKPT_DIFF_KIND_SAME;
        if (a->rt->rank == 0)
            (config_bool(a->cfg, "ckpt.json") ? print_diff_json : print_diff_text)(rows, n, header, nheader,
                                                                                  config_differs);
        code = same == n && nheader == 0 ? 0 : 1;
        json_decref(header);
    }
    free(rows);
    ckpt_catalog_free(&ca);
    ckpt_catalog_free(&cb);
    return code;
}

/* ---- reshard and upgrade ------------------------------------------------------------ */

/* What becomes of each blob at the new size, in nebula-train's terms. */
static void print_blob_rules(const ckpt_catalog *cat, int world)
{
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        if (!d->blob) continue;
        printf("  %-14s %d rows, each rank 0's: ", d->path, world);
        if (!strcmp(d->path, "/rank/" TRAIN_CKPT_LOADER))
            printf("the loader position is global (epoch, next global sample), the same on every rank\n");
        else if (!strcmp(d->path, "/rank/" TRAIN_CKPT_DGC))
            printf("DGC-Pro's residuals and velocities belong to the %d-rank layout's slices and cannot be mapped; "
                   "nebula-train resets them on resume (resharded_from) and keeps the on/off decision, as when it "
                   "loads the original at %d ranks\n", cat->h.world_size, world);
        else
            printf("what nebula-train's load at another world size gives every rank\n");
    }
    if (!ckpt_catalog_find(cat, "/rank/rng"))
        printf("  %-14s not stored: every stream is counter-based on (seed, rank, purpose, step), so rank r "
               "draws rank r's\n", "rng");
}

int tool_reshard(const tool_args *a)
{
    int dp = (int)config_int(a->cfg, "ckpt.dp"), tp = (int)config_int(a->cfg, "ckpt.tp");
    int pp = (int)config_int(a->cfg, "ckpt.pp");
    if (dp < 1) {
        log_error0("reshard needs --dp N, the data-parallel size (replicas) to rewrite the checkpoint for "
                   "(the ranks are --tp x --pp x --dp)");
        return 2;
    }
    if ((long)tp * pp * dp > 1 << 24) {
        log_error0("reshard: --tp %d x --pp %d x --dp %d is more than %d ranks", tp, pp, dp, 1 << 24);
        return 2;
    }
    int world = tp * pp * dp;
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    tool_model tm;
    ckpt_content c;
    const char *out = config_str(a->cfg, "ckpt.out");
    if (out[0]) st = ckpt_out_check_step(out, cat.h.step, cat.dir);  /* every rank: the same file system */
    if (st == STATUS_OK) st = tool_model_from_ini(&tm, cat.config, cat.file, cat.h.model, cat.file_bytes);
    bool built = st == STATUS_OK;
    if (st == STATUS_OK) st = model_spec_check_grid(&tm.m.spec, tp, pp);  /* names parallel.tp / parallel.pp */
    if (st == STATUS_OK) {
        st = tool_content(&c, &cat, &tm.m, true, true);
        c.layout = (ckpt_layout){ dp, tp, pp, cat.h.layout.zero_stage };  /* the grid it is rewritten for */
        if (st == STATUS_OK)
            st = ckpt_reshard(a->rt->world, &cat, &c, world, (int)config_int(a->cfg, "ckpt.ranks_per_node"), out);
        if (st == STATUS_OK && a->rt->rank == 0) {
            char step[32];
            snprintf(step, sizeof step, "step_%08" PRId64, cat.h.step);
            char shape[64] = "";
            if (tp > 1 || pp > 1) snprintf(shape, sizeof shape, " (tp%d x pp%d x dp%d)", tp, pp, dp);
            printf("resharded %s from %d to %d ranks%s, committed as %s%s%s\n", cat.dir, cat.h.world_size, world,
                   shape, out[0] ? out : "itself", out[0] ? "/" : "", out[0] ? step : "");
            printf("  tensors        %d groups unchanged: a checkpoint holds the whole model's tensors at every grid "
                   "(each shard and stage reads its pieces; read and checked by nebula-train's reader, written by its "
                   "saver)\n", c.ngroups);
            print_blob_rules(&cat, world);
            char grid[96] = "";
            if (tp > 1 || pp > 1) snprintf(grid, sizeof grid, " --set parallel.tp=%d --set parallel.pp=%d", tp, pp);
            printf("resume with: mpirun -np %d nebula-train ...%s --resume %s%s%s\n", world, grid,
                   out[0] ? out : cat.dir, out[0] ? "/" : "", out[0] ? step : "");
        }
        tool_content_free(&c, &tm.m);
    }
    if (built) tool_model_free(&tm);
    ckpt_catalog_free(&cat);
    return status_exit_code(st);
}

int tool_upgrade(const tool_args *a)
{
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    char changes[CHANGES_MAX];
    const char *out = config_str(a->cfg, "ckpt.out");
    if (out[0] && cat.h.version != CKPT_FORMAT_VERSION) st = ckpt_out_check_step(out, cat.h.step, cat.dir);
    if (st == STATUS_OK) st = ckpt_upgrade(a->rt->world, &cat, out, changes, sizeof changes);
    if (st == STATUS_OK && a->rt->rank == 0) {
        if (cat.h.version == CKPT_FORMAT_VERSION)
            printf("%s: format version %d is current: nothing to change\n", cat.dir, cat.h.version);
        else
            printf("upgraded %s from format version %d to %d, committed as %s:\n%s", cat.dir, cat.h.version,
                   CKPT_FORMAT_VERSION, out[0] ? out : "itself", changes);
    }
    ckpt_catalog_free(&cat);
    return status_exit_code(st);
}
