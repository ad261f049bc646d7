/* repo_commit — commit objects: their JSON, their lineage, and committing a checkpoint
 * on top of a branch.
 *
 * The one design decision: the lineage is taken from what the checkpoint and its run
 * directory themselves hold (the config text stored in state.h5, the data files it names,
 * the metrics record of that step, the writer's version), never from the command line of
 * the commit, so a commit made hours later or by another person says what trained it. */
#include "repo_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/path.h"

char *repo_commit_dump(const repo_commit *c)
{
    char hex[33];
    json_t *parents = json_array();
    for (int i = 0; i < c->nparents; i++) {
        repo_id_hex(&c->parents[i], hex);
        json_array_append_new(parents, json_string(hex));
    }
    repo_id_hex(&c->manifest, hex);
    json_t *j = json_pack("{s:s, s:i, s:s, s:o, s:s, s:s, s:I, s:O}", "format", "nebula-model-commit", "version", 1,
                          "manifest", hex, "parents", parents, "message", c->message ? c->message : "", "author",
                          c->author, "time", (json_int_t)c->time, "lineage", c->lineage ? c->lineage : json_null());
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    CHECK(text, "out of memory writing a commit");
    return text;
}

void repo_commit_free(repo_commit *c)
{
    free(c->message);
    json_decref(c->lineage);
    memset(c, 0, sizeof *c);
}

status repo_commit_parse(const char *text, size_t n, repo_commit *c, char *why, size_t len)
{
    memset(c, 0, sizeof *c);
    json_error_t e;
    json_t *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &e);
    json_t *parents = j ? json_object_get(j, "parents") : NULL;
    const char *msg = j ? json_string_value(json_object_get(j, "message")) : NULL;
    const char *author = j ? json_string_value(json_object_get(j, "author")) : NULL;
    const char *man = j ? json_string_value(json_object_get(j, "manifest")) : NULL;
    if (!j) {
        snprintf(why, len, "not JSON (line %d: %s)", e.line, e.text);
        return STATUS_CORRUPT;
    }
    status st = STATUS_CORRUPT;
    if (!json_is_object(j) || strcmp(json_string_value(json_object_get(j, "format")) ?: "", "nebula-model-commit") ||
        json_integer_value(json_object_get(j, "version")) != 1)
        snprintf(why, len, "not a version 1 nebula-model commit");
    else if (!msg || !author || strlen(author) >= sizeof c->author || !man || strlen(man) != 32 ||
             !repo_id_parse(man, &c->manifest) || !json_is_array(parents) || json_array_size(parents) > 2 ||
             !json_is_integer(json_object_get(j, "time")))
        snprintf(why, len, "a commit field is missing or bad (manifest, parents, message, author, time)");
    else
        st = STATUS_OK;
    for (size_t i = 0; st == STATUS_OK && i < json_array_size(parents); i++) {
        const char *p = json_string_value(json_array_get(parents, i));
        if (!p || strlen(p) != 32 || !repo_id_parse(p, &c->parents[c->nparents++])) {
            snprintf(why, len, "parent %zu is not a commit id", i);
            st = STATUS_CORRUPT;
        }
    }
    if (st == STATUS_OK) {
        c->message = strdup(msg);
        snprintf(c->author, sizeof c->author, "%s", author);
        c->time = json_integer_value(json_object_get(j, "time"));
        c->lineage = json_incref(json_object_get(j, "lineage"));
    }
    json_decref(j);
    if (st != STATUS_OK) repo_commit_free(c);
    return st;
}

status repo_commit_load(const char *objdir, const repo_id *id, repo_commit *c, char *why, size_t len)
{
    void *text = NULL;
    size_t n = 0;
    memset(c, 0, sizeof *c);
    TRY(repo_object_get(objdir, id, REPO_KIND_COMMIT, &text, &n, why, len));
    char sub[300];
    status st = repo_commit_parse(text, n, c, sub, sizeof sub);
    if (st != STATUS_OK) {
        char hex[33];
        repo_id_hex(id, hex);
        snprintf(why, len, "commit %s: %s", hex, sub);
    }
    free(text);
    return st;
}

/* ---- lineage ---------------------------------------------------------------------- */

/* The value of section.key in the INI text of a resolved config, or "". */
static void config_value(const char *text, const char *section, const char *key, char *out, size_t len)
{
    char cur[64] = "";
    out[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char l[4096];
        snprintf(l, sizeof l, "%.*s", (int)(n < sizeof l ? n : sizeof l - 1), line);
        char *s = l + strspn(l, " \t");
        if (s[0] == '[') {
            char *close = strchr(s, ']');
            if (close) snprintf(cur, sizeof cur, "%.*s", (int)(close - s - 1), s + 1);
        } else if (!strcmp(cur, section) && !strncmp(s, key, strlen(key))) {
            char *eq = s + strlen(key);
            eq += strspn(eq, " \t");
            if (*eq == '=') {
                eq++;
                eq += strspn(eq, " \t");
                size_t m = strlen(eq);
                while (m && (eq[m - 1] == ' ' || eq[m - 1] == '\t' || eq[m - 1] == '\r')) eq[--m] = '\0';
                snprintf(out, len, "%s", eq);
            }
        }
        line = end ? end + 1 : NULL;
    }
}

/* {path, bytes, xxh3} of a data file; a directory or a missing file says so. */
static json_t *data_file(const char *path)
{
    struct stat sb;
    int fd;
    char why[256];
    if (stat(path, &sb) != 0) return json_pack("{s:s, s:s}", "path", path, "missing", "not found from here");
    if (S_ISDIR(sb.st_mode)) return json_pack("{s:s, s:s}", "path", path, "kind", "directory");
    if (path_open_regular(path, &fd, &sb, 0, why, sizeof why) != 0) return json_pack("{s:s, s:s}", "path", path, "missing", why);
    XXH3_state_t *h = XXH3_createState();
    char *buf = malloc(1 << 20);
    CHECK(h && buf, "out of memory hashing a data file");
    XXH3_128bits_reset(h);
    uint64_t off = 0, n = (uint64_t)sb.st_size;
    bool ok = true;
    while (off < n && ok) {
        uint64_t k = n - off < (1 << 20) ? n - off : (1 << 20);
        ok = path_read_all_at(fd, buf, k, off) == 0;
        XXH3_128bits_update(h, buf, k);
        off += k;
    }
    close(fd);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h));
    XXH3_freeState(h);
    free(buf);
    repo_id id;
    memcpy(id.b, c.digest, 16);
    char hex[33];
    repo_id_hex(&id, hex);
    return ok ? json_pack("{s:s, s:I, s:s}", "path", path, "bytes", (json_int_t)n, "xxh3", hex)
              : json_pack("{s:s, s:s}", "path", path, "missing", "cannot be read");
}

/* The run's metrics at the checkpoint's step: the last train and eval records at or before it. */
static json_t *metrics_at(const char *run, int64_t step)
{
    char p[REPO_PATH_MAX + 32], why[256], *text = NULL;
    size_t n;
    snprintf(p, sizeof p, "%s/metrics.jsonl", run);
    json_t *out = json_object();
    if (repo_read_file(p, (uint64_t)1 << 30, &text, &n, why, sizeof why) != STATUS_OK) return out;
    for (char *line = text, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        if (end) *end = '\0';
        json_t *j = json_loads(line, 0, NULL);
        const char *kind = json_string_value(json_object_get(j, "kind"));
        json_t *st = json_object_get(j, "step");
        if (kind && json_is_integer(st) && json_integer_value(st) <= step &&
            (!strcmp(kind, "train") || !strcmp(kind, "eval"))) {
            bool train = !strcmp(kind, "train");
            json_t *loss = json_object_get(j, "loss");
            if (loss) json_object_set(out, train ? "loss" : "val_loss", loss);
            json_object_set(out, train ? "loss_step" : "val_step", st);
            if (train && json_object_get(j, "lr")) json_object_set(out, "lr", json_object_get(j, "lr"));
        }
        json_decref(j);
    }
    free(text);
    return out;
}

json_t *repo_lineage(const repo_scan *s)
{
    char run[REPO_PATH_MAX], abs[REPO_PATH_MAX], hex[33];
    if (!realpath(s->dir, abs)) snprintf(abs, sizeof abs, "%s", s->dir);
    snprintf(run, sizeof run, "%s", abs);
    /* RUN/ckpt/step_N: the run directory is two levels up */
    char *slash = strrchr(run, '/');
    if (slash) *slash = '\0';
    slash = strrchr(run, '/');
    if (slash && !strcmp(slash, "/ckpt")) *slash = '\0';
    else snprintf(run, sizeof run, "%s", abs);
    repo_id ch = repo_hash(s->m.config ? s->m.config : "", s->m.config ? strlen(s->m.config) : 0);
    repo_id_hex(&ch, hex);
    json_t *data = json_array();
    const char *keys[] = { "train", "val", "tokenizer" };
    for (int k = 0; k < 3; k++) {
        char v[4096];
        config_value(s->m.config ? s->m.config : "", "data", keys[k], v, sizeof v);
        if (v[0] && strcmp(v, "synthetic") != 0) {
            json_t *f = data_file(v);
            json_object_set_new(f, "key", json_sprintf("data.%s", keys[k]));
            json_array_append_new(data, f);
        }
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:s, s:o}", "run_dir", run, "checkpoint", abs, "step",
                     (json_int_t)s->m.h.step, "config_hash", hex, "data", data, "code_version", s->m.h.nebula_version,
                     "metrics", metrics_at(run, s->m.h.step));
}

/* ---- commit ----------------------------------------------------------------------- */

status repo_commit_scan(repo *r, repo_scan *s, const repo_commit_opts *o, repo_id *out, repo_put_stats *st)
{
    char objdir[REPO_PATH_MAX], branch[REPO_NAME_MAX], ref[REPO_NAME_MAX + 16], why[512];
    repo_objdir(r->dir, objdir, sizeof objdir);
    repo_id tip;
    bool born = false;
    if (o->branch) {
        if (!repo_name_ok(o->branch)) {
            log_error("'%s' is not a valid branch name", o->branch);
            return STATUS_INPUT;
        }
        snprintf(branch, sizeof branch, "%s", o->branch);
        snprintf(ref, sizeof ref, "refs/heads/%s", branch);
        TRY(repo_ref_read(r->dir, ref, &tip, &born));
    } else {
        TRY(repo_head(r, branch, sizeof branch, &tip, &born));
        snprintf(ref, sizeof ref, "refs/heads/%s", branch);
    }
    repo_manifest parent = { 0 };
    repo_id parent_manifest = { { 0 } };
    bool have_parent = false;
    if (born) {  /* a tip that cannot be read is damage: nothing is committed on top of it */
        repo_commit pc;
        status ps = repo_commit_load(objdir, &tip, &pc, why, sizeof why);
        if (ps == STATUS_OK) {
            parent_manifest = pc.manifest;
            ps = repo_manifest_load(objdir, &pc.manifest, &parent, why, sizeof why);
            have_parent = ps == STATUS_OK;
            repo_commit_free(&pc);
        }
        if (ps != STATUS_OK) {
            log_error("%s: the branch's tip is damaged (%s); HINT: nebula-model fsck", branch[0] ? branch : "HEAD", why);
            return STATUS_CORRUPT;
        }
    }
    repo_commit c = { 0 };
    status rc = repo_put(r, s, have_parent && o->delta ? &parent : NULL, &c.manifest, st);
    if (have_parent) repo_manifest_free(&parent);
    TRY(rc);
    if (have_parent && repo_id_eq(&c.manifest, &parent_manifest)) {  /* the same checkpoint: nothing to commit */
        st->unchanged = true;
        *out = tip;
        return STATUS_OK;
    }
    if (born) c.parents[c.nparents++] = tip;
    c.message = (char *)(o->message ? o->message : "");
    if (o->author) snprintf(c.author, sizeof c.author, "%s", o->author);
    else repo_default_author(c.author, sizeof c.author);
    c.time = (int64_t)time(NULL);
    c.lineage = repo_lineage(s);
    char *text = repo_commit_dump(&c);
    json_decref(c.lineage);
    bool added;
    uint64_t stored;
    rc = repo_object_put(r, REPO_KIND_COMMIT, text, strlen(text), NULL, NULL, out, &added, &stored);
    free(text);
    TRY(rc);
    st->stored += stored;
    char what[300];
    snprintf(what, sizeof what, "commit: %s", o->message ? o->message : "");
    what[strcspn(what, "\n")] = '\0';
    if (branch[0]) TRY(repo_ref_update(r->dir, ref, born ? &tip : NULL, false, out, what, 30, &r->chaos));
    else TRY(repo_head_set(r, NULL, out, what));  /* detached HEAD moves itself */
    /* a checkpoint of the work tree (ROOT/ckpt/NAME) is now committed */
    char abs[REPO_PATH_MAX], ck[REPO_PATH_MAX + 8];
    snprintf(ck, sizeof ck, "%s/ckpt/", r->root);
    if (!r->bare && realpath(s->dir, abs) && !strncmp(abs, ck, strlen(ck)) && !strchr(abs + strlen(ck), '/'))
        TRY(repo_work_record(r, abs + strlen(ck), &s->m));
    return STATUS_OK;
}

status repo_commit_path(repo *r, const char *path, const repo_commit_opts *o, repo_id *out, repo_put_stats *st)
{
    repo_scan s;
    TRY(repo_scan_open(&s, path));
    status rc = repo_commit_scan(r, &s, o, out, st);
    repo_scan_close(&s);
    return rc;
}
