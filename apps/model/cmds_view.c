/* cmds_view — nebula-model log, show and diff: history, one commit, two commits compared. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_app.h"

typedef struct refs_view {
    char (*names)[256];
    repo_id *ids;
    int n;
    char head[REPO_NAME_MAX];
    repo_id head_id;
    bool born;
} refs_view;

static void refs_load(const repo *r, refs_view *v)
{
    v->n = repo_refs_list(r->dir, "refs", &v->names, &v->ids);
    if (repo_head(r, v->head, sizeof v->head, &v->head_id, &v->born) != STATUS_OK) v->born = false;
}

/* " (HEAD -> main, tag: v1, origin/main)" or "" */
static void decorate(const refs_view *v, const repo_id *id, char *out, size_t len)
{
    size_t u = 0;
    out[0] = '\0';
    if (v->born && !v->head[0] && repo_id_eq(&v->head_id, id)) u += (size_t)snprintf(out + u, len - u, "HEAD");
    for (int i = 0; i < v->n && u < len; i++) {
        if (!repo_id_eq(&v->ids[i], id)) continue;
        const char *nm = v->names[i];
        char item[300];
        if (!strncmp(nm, "refs/heads/", 11))
            snprintf(item, sizeof item, "%s%s", !strcmp(nm + 11, v->head) ? "HEAD -> " : "", nm + 11);
        else if (!strncmp(nm, "refs/tags/", 10)) snprintf(item, sizeof item, "tag: %s", nm + 10);
        else snprintf(item, sizeof item, "%s", nm + 13);
        u += (size_t)snprintf(out + u, len - u, "%s%s", u ? ", " : "", item);
    }
    if (out[0]) {
        char t[1024];
        snprintf(t, sizeof t, " (%s)", out);
        snprintf(out, len, "%s", t);
    }
}

static void date_str(int64_t t, char out[32])
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%d %H:%M", &tm)) snprintf(out, 32, "time %lld", (long long)t);
}

/* One log line: id, date, step, loss, message, decorations. */
static void log_line(const refs_view *v, const repo_id *id, const repo_commit *c, const char *graph)
{
    char s[13], d[32], deco[1024];
    model_short(id, s);
    date_str(c->time, d);
    decorate(v, id, deco, sizeof deco);
    json_t *m = json_object_get(c->lineage, "metrics");
    json_t *loss = json_object_get(m, "loss"), *val = json_object_get(m, "val_loss");
    printf("%s%s %s step %-7" JSON_INTEGER_FORMAT, graph, s, d, json_integer_value(json_object_get(c->lineage, "step")));
    if (json_is_number(loss)) printf(" loss %.4f", json_number_value(loss));
    if (json_is_number(val)) printf(" val %.4f", json_number_value(val));
    printf("  %.*s%s\n", (int)strcspn(c->message, "\n"), c->message, deco);
}

/* Every commit reachable from the refs and HEAD, newest first, each after its children. */
static int collect_all(const char *objdir, const refs_view *v, repo_id **out, repo_commit **cs)
{
    int n = 0, cap = 64;
    repo_id *ids = malloc((size_t)cap * sizeof *ids);
    CHECK(ids, "out of memory");
    for (int i = -1; i < v->n; i++) {
        repo_id cur = i < 0 ? v->head_id : v->ids[i];
        if (i < 0 && !v->born) continue;
        for (;;) {
            bool seen = false;
            for (int j = 0; j < n && !seen; j++) seen = repo_id_eq(&ids[j], &cur);
            repo_commit c;
            char why[512];
            if (seen || repo_commit_load(objdir, &cur, &c, why, sizeof why) != STATUS_OK) break;
            if (n == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            CHECK(ids, "out of memory");
            ids[n++] = cur;
            bool root = c.nparents == 0;
            if (!root) cur = c.parents[0];
            repo_commit_free(&c);
            if (root) break;
        }
    }
    *cs = calloc((size_t)n + 1, sizeof **cs);
    CHECK(*cs, "out of memory");
    for (int i = 0; i < n; i++) {
        char why[512];
        repo_commit_load(objdir, &ids[i], &(*cs)[i], why, sizeof why);
    }
    /* newest first, a child always before its parent (times can tie or go back) */
    for (int i = 0; i < n; i++) {
        int best = -1;
        for (int j = i; j < n; j++) {
            bool child_left = false;  /* a commit j still has an unprinted child */
            for (int k = i; k < n && !child_left; k++)
                child_left = k != j && (*cs)[k].nparents && repo_id_eq(&(*cs)[k].parents[0], &ids[j]);
            if (!child_left && (best < 0 || (*cs)[j].time > (*cs)[best].time)) best = j;
        }
        if (best < 0) best = i;
        repo_id ti = ids[i];
        repo_commit tc = (*cs)[i];
        ids[i] = ids[best], (*cs)[i] = (*cs)[best];
        ids[best] = ti, (*cs)[best] = tc;
    }
    *out = ids;
    return n;
}

/* log --graph: one lane per line of history still open. */
static void print_graph(const char *objdir, const refs_view *v, long max)
{
    repo_id *ids, lanes[64];
    repo_commit *cs;
    int n = collect_all(objdir, v, &ids, &cs), nl = 0;
    for (int i = 0; i < n && (max == 0 || i < max); i++) {
        int col = -1;
        for (int l = 0; l < nl && col < 0; l++)
            if (repo_id_eq(&lanes[l], &ids[i])) col = l;
        if (col < 0 && nl < 60) lanes[col = nl++] = ids[i];
        if (col < 0) {  /* more lines of history open than lanes drawn: listed without one */
            log_line(v, &ids[i], &cs[i], "  ");
            continue;
        }
        char g[160] = "";
        for (int l = 0; l < nl && l < 60; l++) strcat(g, l == col ? "* " : "| ");
        log_line(v, &ids[i], &cs[i], g);
        /* lanes that waited for this commit (branches forked from it) join its lane */
        for (int l = nl - 1; l > col; l--) {
            if (!repo_id_eq(&lanes[l], &ids[i])) continue;
            char j[160] = "";
            for (int k = 0; k < nl && k < 60; k++) strcat(j, k == l ? "/ " : k < l ? "| " : " ");
            printf("%s\n", j);
            memmove(&lanes[l], &lanes[l + 1], (size_t)(nl - l - 1) * sizeof *lanes);
            nl--;
        }
        if (cs[i].nparents) lanes[col] = cs[i].parents[0];
        else memmove(&lanes[col], &lanes[col + 1], (size_t)(nl-- - col - 1) * sizeof *lanes);
    }
    for (int i = 0; i < n; i++) repo_commit_free(&cs[i]);
    free(cs);
    free(ids);
}

int model_log(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char objdir[REPO_PATH_MAX];
    repo_objdir(r.dir, objdir, sizeof objdir);
    refs_view v;
    refs_load(&r, &v);
    long max = (long)config_int(a->cfg, "repo.max_count");
    bool json = config_bool(a->cfg, "repo.json");
    if (config_bool(a->cfg, "repo.graph") && !json) {
        print_graph(objdir, &v, max);
        free(v.names), free(v.ids);
        return 0;
    }
    repo_id cur;
    status st = repo_resolve(&r, a->nargs ? a->args[0] : "HEAD", &cur);
    if (st != STATUS_OK) {
        free(v.names), free(v.ids);
        return model_exit(st);
    }
    json_t *arr = json_array();
    for (long i = 0; max == 0 || i < max; i++) {
        repo_commit c;
        char why[512], hex[33];
        if (repo_commit_load(objdir, &cur, &c, why, sizeof why) != STATUS_OK) {
            log_error0("%s", why);
            code = 2;
            break;
        }
        repo_id_hex(&cur, hex);
        if (json)
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I, s:O?}", "commit", hex, "message", c.message,
                                                 "author", c.author, "time", (json_int_t)c.time, "lineage", c.lineage));
        else log_line(&v, &cur, &c, "");
        bool root = c.nparents == 0;
        if (!root) cur = c.parents[0];
        repo_commit_free(&c);
        if (root) break;
    }
    if (json) {
        json_dumpf(arr, stdout, JSON_INDENT(1));
        printf("\n");
    }
    json_decref(arr);
    free(v.names), free(v.ids);
    return code;
}

/* Chunks of m that the parent's manifest p holds at the same tensor and index. */
static uint64_t shared_chunks(const repo_manifest *m, const repo_manifest *p, uint64_t *total)
{
    uint64_t same = 0;
    *total = 0;
    for (int k = 0; k < m->n; k++) {
        const repo_item *it = &m->items[k], *pi = NULL;
        for (int j = 0; p && j < p->n && !pi; j++)
            if (!strcmp(p->items[j].path, it->path)) pi = &p->items[j];
        *total += (uint64_t)it->nchunks;
        for (int c = 0; pi && c < it->nchunks && c < pi->nchunks; c++) same += repo_id_eq(&it->chunks[c], &pi->chunks[c]);
    }
    return same;
}

int model_show(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char objdir[REPO_PATH_MAX], why[512], hex[33], d[32], mhex[33];
    repo_objdir(r.dir, objdir, sizeof objdir);
    repo_id id;
    status st = repo_resolve(&r, a->nargs ? a->args[0] : "HEAD", &id);
    if (st != STATUS_OK) return model_exit(st);
    repo_commit c, pc;
    repo_manifest m, pm;
    bool have_parent = false;
    if (repo_commit_load(objdir, &id, &c, why, sizeof why) != STATUS_OK ||
        repo_manifest_load(objdir, &c.manifest, &m, why, sizeof why) != STATUS_OK) {
        log_error0("%s", why);
        return 2;
    }
    if (c.nparents && repo_commit_load(objdir, &c.parents[0], &pc, why, sizeof why) == STATUS_OK) {
        have_parent = repo_manifest_load(objdir, &pc.manifest, &pm, why, sizeof why) == STATUS_OK;
        repo_commit_free(&pc);
    }
    uint64_t total, same = shared_chunks(&m, have_parent ? &pm : NULL, &total);
    repo_id_hex(&id, hex);
    repo_id_hex(&c.manifest, mhex);
    if (config_bool(a->cfg, "repo.json")) {
        json_t *parents = json_array();
        for (int i = 0; i < c.nparents; i++) {
            char p[33];
            repo_id_hex(&c.parents[i], p);
            json_array_append_new(parents, json_string(p));
        }
        json_t *j = json_pack("{s:s, s:s, s:o, s:s, s:s, s:I, s:O?, s:{s:s, s:I, s:i, s:i, s:I, s:I, s:I}}", "commit",
                              hex, "manifest", mhex, "parents", parents, "message", c.message, "author", c.author,
                              "time", (json_int_t)c.time, "lineage", c.lineage, "checkpoint", "model", m.h.model,
                              "step", (json_int_t)m.h.step, "world_size", m.h.world_size, "datasets", m.n, "bytes",
                              (json_int_t)m.file_bytes, "chunks", (json_int_t)total, "chunks_shared_with_parent",
                              (json_int_t)same);
        json_dumpf(j, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(j);
    } else {
        date_str(c.time, d);
        printf("commit   %s\n", hex);
        for (int i = 0; i < c.nparents; i++) {
            char p[33];
            repo_id_hex(&c.parents[i], p);
            printf("parent   %s\n", p);
        }
        printf("author   %s\ndate     %s UTC\n\n    %s\n\n", c.author, d, c.message);
        printf("checkpoint  %s step %" PRId64 ", written by %d ranks (dp %d, tp %d, pp %d, ZeRO %d), %d datasets, "
               "%.2f MB\n", m.h.model, m.h.step, m.h.world_size, m.h.layout.dp, m.h.layout.tp, m.h.layout.pp,
               m.h.layout.zero_stage, m.n, (double)m.file_bytes / 1e6);
        printf("chunks      %" PRIu64 ", %" PRIu64 " the same as the parent's\n", total, same);
        const char *k;
        json_t *v;
        json_object_foreach(c.lineage, k, v) {
            char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            printf("lineage     %-13s %s\n", k, s);
            free(s);
        }
    }
    repo_commit_free(&c);
    repo_manifest_free(&m);
    if (have_parent) repo_manifest_free(&pm);
    return 0;
}

/* Lines of text a has that b does not (config keys changed), printed with `sign`. */
static int config_lines(const char *a, const char *b, char sign)
{
    int n = 0;
    for (const char *line = a; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        bool found = false;
        for (const char *o = b; o && *o && !found;) {
            const char *oe = strchr(o, '\n');
            size_t ol = oe ? (size_t)(oe - o) : strlen(o);
            found = ol == len && !strncmp(o, line, len);
            o = oe ? oe + 1 : NULL;
        }
        if (!found && len && line[0] != '#' && line[0] != ';' && line[0] != '[') {
            printf("config  %c %.*s\n", sign, (int)len, line);
            n++;
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

static const char *kind_str(ckpt_diff_kind k)
{
    static const char *const names[] = { "same", "values", "shape", "only-A", "only-B" };
    return names[k];
}

int model_diff(const model_args *a)
{
    repo r;
    int code = model_open(a, &r);
    if (code) return code;
    char objdir[REPO_PATH_MAX], why[512];
    repo_objdir(r.dir, objdir, sizeof objdir);
    repo_id ia, ib;
    repo_commit ca, cb;
    repo_manifest ma, mb;
    if (repo_resolve(&r, a->args[0], &ia) != STATUS_OK || repo_resolve(&r, a->args[1], &ib) != STATUS_OK) return 2;
    if (repo_commit_load(objdir, &ia, &ca, why, sizeof why) != STATUS_OK ||
        repo_manifest_load(objdir, &ca.manifest, &ma, why, sizeof why) != STATUS_OK ||
        repo_commit_load(objdir, &ib, &cb, why, sizeof why) != STATUS_OK ||
        repo_manifest_load(objdir, &cb.manifest, &mb, why, sizeof why) != STATUS_OK) {
        log_error0("%s", why);
        return 2;
    }
    if (repo_manifest_check(objdir, &ma, why, sizeof why) != STATUS_OK ||
        repo_manifest_check(objdir, &mb, why, sizeof why) != STATUS_OK) {  /* before reading a lying tensor whole */
        log_error0("%s", why);
        repo_commit_free(&ca), repo_commit_free(&cb), repo_manifest_free(&ma), repo_manifest_free(&mb);
        return 2;
    }
    ckpt_diff_row *rows = calloc((size_t)(ma.n + mb.n) + 1, sizeof *rows);
    uint64_t *changed = calloc((size_t)(ma.n + mb.n) + 1, sizeof *changed);
    CHECK(rows && changed, "out of memory");
    int n = 0, same = 0;
    status st = repo_diff(objdir, &ma, &mb, rows, changed, &n);
    for (int i = 0; i < n; i++) same += rows[i].kind == CKPT_DIFF_KIND_SAME;
    bool json = config_bool(a->cfg, "repo.json");
    if (st == STATUS_OK && json) {
        json_t *ds = json_array();
        for (int i = 0; i < n; i++) {
            const ckpt_diff_row *w = &rows[i];
            json_array_append_new(ds, json_pack("{s:s, s:s, s:o, s:o, s:o, s:I, s:I}", "name", w->path, "result",
                                                kind_str(w->kind), "max_abs", isnan(w->max_abs) ? json_null() : json_real(w->max_abs),
                                                "rel_l2", isnan(w->rel_l2) || isinf(w->rel_l2) ? json_null() : json_real(w->rel_l2),
                                                "cosine", isnan(w->cosine) ? json_null() : json_real(w->cosine),
                                                "differ", (json_int_t)w->differ, "chunks_changed", (json_int_t)changed[i]));
        }
        json_t *j = json_pack("{s:b, s:b, s:O?, s:O?, s:o}", "identical", same == n, "config_differs",
                              strcmp(ma.config, mb.config) != 0, "metrics_a", json_object_get(ca.lineage, "metrics"),
                              "metrics_b", json_object_get(cb.lineage, "metrics"), "datasets", ds);
        json_dumpf(j, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(j);
    } else if (st == STATUS_OK) {
        printf("%-56s %-7s %8s %12s %12s %14s %10s\n", "dataset", "result", "chunks", "max|a-b|", "rel_L2", "cosine",
               "differ");
        for (int i = 0; i < n; i++) {
            const ckpt_diff_row *w = &rows[i];
            printf("%-56s %-7s %8" PRIu64, w->path, kind_str(w->kind), changed[i]);
            if (w->kind == CKPT_DIFF_KIND_VALUES && !isnan(w->max_abs))
                printf(" %12.5g %12.5g %14.10f %10" PRIu64, w->max_abs, w->rel_l2, w->cosine, w->differ);
            else if (w->kind == CKPT_DIFF_KIND_VALUES)
                printf(" %12s %12s %14s %10" PRIu64, "-", "-", "-", w->differ);
            printf("\n");
        }
        int nc = config_lines(ma.config, mb.config, '-');
        nc += config_lines(mb.config, ma.config, '+');
        const char *k;
        json_t *va, *ma_m = json_object_get(ca.lineage, "metrics"), *mb_m = json_object_get(cb.lineage, "metrics");
        json_object_foreach(ma_m, k, va) {
            json_t *vb = json_object_get(mb_m, k);
            if (json_is_number(va) && json_is_number(vb) && !json_equal(va, vb))
                printf("metrics %-10s %.6g in A, %.6g in B\n", k, json_number_value(va), json_number_value(vb));
        }
        printf("%s: %d of %d datasets identical, step %" PRId64 " vs %" PRId64 ", %d config line(s) differ\n",
               same == n ? "identical" : "different", same, n, ma.h.step, mb.h.step, nc);
    }
    free(rows);
    free(changed);
    repo_commit_free(&ca);
    repo_commit_free(&cb);
    repo_manifest_free(&ma);
    repo_manifest_free(&mb);
    return st != STATUS_OK ? model_exit(st) : same == n ? 0 : 1;
}
