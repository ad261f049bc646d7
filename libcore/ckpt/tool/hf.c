/* hf — see hf.h: the tensor names both ways and the directory writer; config.json and
 * the weights file of a directory are in hf_config.c. */
#include "hf.h"
#include "hf_impl.h"
#include "base/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A tied copy that transformers keeps under a second name: `alias` reads as `twin`. */
typedef struct hf_tie {
    model_family family;
    const char *alias;   /* the head's name in the file (after the prefixes) */
    const char *twin;    /* Nebula's tensor */
} hf_tie;

static const hf_tie hf_ties[] = {
    { MODEL_FAMILY_GPT2, "lm_head.weight", "wte.weight" },
    { MODEL_FAMILY_BERT, "cls.predictions.decoder.weight", "embeddings.word_embeddings.weight" },
    { MODEL_FAMILY_BERT, "cls.predictions.decoder.bias", "cls.predictions.bias" },
};
#define HF_NTIES (int)(sizeof hf_ties / sizeof hf_ties[0])

/* The model prefix transformers puts before the encoder's names, and the names outside it. */
static const char *hf_prefix(model_family f)
{
    return f == MODEL_FAMILY_GPT2 ? "transformer." : f == MODEL_FAMILY_BERT ? "bert." : "";
}

/* The name transformers' state dict gives Nebula's tensor `name`. */
static void hf_export_name(const model_spec *s, const char *name, char *out, size_t len)
{
    bool head = s->family == MODEL_FAMILY_BERT && !strncmp(name, "cls.", 4);
    snprintf(out, len, "%s%s", head ? "" : hf_prefix(s->family), name);
}

/* The name a file's tensor has in Nebula: "module." (DDP) then the family's prefix off. */
static const char *hf_strip(const model_spec *s, const char *name)
{
    if (!strncmp(name, "module.", 7)) name += 7;
    const char *p = hf_prefix(s->family);
    if (p[0] && !strncmp(name, p, strlen(p))) name += strlen(p);
    return name;
}

int64_t hf_file_rows(const model_spec *s, const param_entry *e)
{
    if (s->family == MODEL_FAMILY_GPT2 && !strcmp(e->name, "wte.weight")) return model_vocab_size(s);
    return e->ndim ? (int64_t)e->shape[0] : 1;
}

static void shape_text(char *out, size_t len, int ndim, const int64_t *shape)
{
    int n = snprintf(out, len, "(");
    for (int d = 0; d < ndim && n < (int)len; d++)
        n += snprintf(out + n, len - (size_t)n, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (n < (int)len) snprintf(out + n, len - (size_t)n, ")");
}

/* t's shape against e's as an ecosystem file holds it (hf_file_rows); logged when not. */
static status check_shape(const st_file *f, const model_spec *s, const param_entry *e, const st_info *t)
{
    int64_t want[PARAM_MAX_DIMS];
    for (int d = 0; d < e->ndim; d++) want[d] = (int64_t)e->shape[d];
    bool same = t->ndim == e->ndim, rows = t->ndim == e->ndim && e->ndim > 0;
    for (int d = 0; d < e->ndim && (same || rows); d++) {
        same = same && t->shape[d] == want[d];
        rows = rows && t->shape[d] == (d ? want[d] : hf_file_rows(s, e));
    }
    if (same || rows) return STATUS_OK;
    char got_s[160], want_s[160];
    shape_text(got_s, sizeof got_s, t->ndim, t->shape);
    if (e->ndim) want[0] = hf_file_rows(s, e);
    shape_text(want_s, sizeof want_s, e->ndim, want);
    log_error("%s: tensor '%s' is %s in the file; %s's is %s (--set model.KEY=VALUE for other sizes; --from hf: "
              "config.json's)", f->path, t->name, got_s, s->name, want_s);
    return STATUS_INPUT;
}

/* The file tensor holding e (its rows as the file has them) into dst. */
static status read_into(const st_file *f, const model_spec *s, const param_entry *e, const st_info *t, float *dst)
{
    TRY(check_shape(f, s, e, t));
    return st_read_f32(f, t, dst, (size_t)t->numel);
}

/* One entry of a table and the file tensor that fills it. */
typedef struct hf_slot {
    const param_entry *e;   /* Nebula's tensor */
    float *dst;             /* its place in the flat buffer */
    int from;               /* index into f->tensors, -1 none yet */
} hf_slot;

static int find_slot(const hf_slot *slots, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(slots[i].e->name, name)) return i;
    return -1;
}

/* "a, b, c ... (N in all)" of the non-NULL name(ctx, i), each between `quote`s. */
static void name_list(char *out, size_t len, int n, const char *(*name)(const void *, int), const void *ctx,
                      const char *quote)
{
    size_t at = 0;
    int listed = 0, total = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *s = name(ctx, i);
        if (!s) continue;
        total++;
        if (at + strlen(s) + 24 < len) {
            at += (size_t)snprintf(out + at, len - at, "%s%s%s%s", listed ? ", " : "", quote, s, quote);
            listed++;
        }
    }
    if (listed < total) snprintf(out + at, len - at, " ... (%d in all)", total);
}

typedef struct hf_lists {
    const st_file *f;
    const bool *taken;      /* [f->count] */
    const hf_slot *slots;
} hf_lists;

static const char *untaken_name(const void *ctx, int i)
{
    const hf_lists *l = ctx;
    return l->taken[i] ? NULL : l->f->tensors[i].name;
}

static const char *missing_name(const void *ctx, int i)
{
    const hf_lists *l = ctx;
    return l->slots[i].from < 0 ? l->slots[i].e->name : NULL;
}

/* The tie's copy in the file (index a) against the twin just read: the same values. */
static status check_tie(const st_file *f, const model_spec *s, const hf_slot *twin, int a)
{
    const st_info *t = &f->tensors[a], *tw = &f->tensors[twin->from];
    TRY(check_shape(f, s, twin->e, t));
    size_t n = (size_t)t->numel;
    if (n != tw->numel) {
        log_error("%s: '%s' is tied to '%s' (the same tensor in transformers) but they have %zu and %" PRIu64
                  " elements", f->path, t->name, tw->name, n, tw->numel);
        return STATUS_INPUT;
    }
    float *copy = malloc(n * sizeof *copy);
    if (!copy) {
        log_error("out of memory comparing '%s' with '%s'", t->name, tw->name);
        return STATUS_NOMEM;
    }
    status st = st_read_f32(f, t, copy, n);
    size_t differ = 0, first = 0;
    for (size_t i = 0; st == STATUS_OK && i < n; i++)
        if (memcmp(&copy[i], &twin->dst[i], sizeof(float)) != 0 && !differ++) first = i;
    if (st == STATUS_OK && differ) {
        log_error("%s: '%s' and '%s' are one tied tensor in %s, but they differ in %zu of %zu values (first at "
                  "element %zu: %.9g vs %.9g): the file is not a tied model; nothing converted", f->path, t->name,
                  tw->name, s->name, differ, n, first, copy[first], twin->dst[first]);
        st = STATUS_INPUT;
    }
    free(copy);
    return st;
}

/* Each file tensor onto the slot of its stripped name; two onto one is an error. */
static status assign(const st_file *f, const model_spec *s, hf_slot *slots, int nslots, bool *taken)
{
    for (int i = 0; i < f->count; i++) {
        int k = find_slot(slots, nslots, hf_strip(s, f->tensors[i].name));
        if (k < 0) continue;
        if (slots[k].from >= 0) {
            log_error("%s: '%s' and '%s' both name %s's tensor '%s' (prefixes module., %sare dropped): keep one",
                      f->path, f->tensors[slots[k].from].name, f->tensors[i].name, s->name, slots[k].e->name,
                      hf_prefix(s->family));
            return STATUS_INPUT;
        }
        slots[k].from = i;
        taken[i] = true;
    }
    return STATUS_OK;
}

/* The ties: a copy beside its twin is checked against it, a copy alone stands in for it. */
static status resolve_ties(const st_file *f, const model_spec *s, hf_slot *slots, int nslots, bool *taken,
                           bool check)
{
    for (int i = 0; i < f->count; i++) {
        if (taken[i]) continue;
        const char *name = hf_strip(s, f->tensors[i].name);
        for (int k = 0; k < HF_NTIES; k++) {
            int twin = hf_ties[k].family == s->family && !strcmp(hf_ties[k].alias, name)
                           ? find_slot(slots, nslots, hf_ties[k].twin) : -1;
            if (twin < 0) continue;
            if (!check && slots[twin].from < 0) {
                slots[twin].from = i;
                taken[i] = true;
            } else if (check && slots[twin].from != i) {
                TRY(check_tie(f, s, &slots[twin], i));
                taken[i] = true;
            }
        }
    }
    return STATUS_OK;
}

status hf_read_tensors(model *m, const st_file *f, hf_read_report *r)
{
    memset(r, 0, sizeof *r);
    const model_spec *s = &m->spec;
    const param_table *tabs[2] = { model_params(m), model_state_table(m) };
    float *bufs[2] = { model_buffers(m)->params, model_state(m) };
    int nslots = tabs[0]->count + (tabs[1] ? tabs[1]->count : 0), n = 0;
    hf_slot *slots = calloc((size_t)nslots, sizeof *slots);
    bool *taken = calloc((size_t)f->count + 1, sizeof *taken);
    if (!slots || !taken) {
        free(slots);
        free(taken);
        log_error("out of memory matching the tensors of %s", f->path);
        return STATUS_NOMEM;
    }
    for (int k = 0; k < 2 && tabs[k]; k++)
        for (int i = 0; i < tabs[k]->count; i++)
            slots[n++] = (hf_slot){ &tabs[k]->entries[i], bufs[k] + tabs[k]->entries[i].offset, -1 };
    hf_lists lists = { f, taken, slots };
    status st = assign(f, s, slots, nslots, taken);
    if (st == STATUS_OK) st = resolve_ties(f, s, slots, nslots, taken, false);
    char names[2048];
    /* A reshaped tensor first: it says the sizes differ, which also explains blocks that are missing. */
    for (int i = 0; i < nslots && st == STATUS_OK; i++)
        if (slots[i].from >= 0) st = check_shape(f, s, slots[i].e, &f->tensors[slots[i].from]);
    if (st == STATUS_OK) {
        int missing = 0;
        for (int i = 0; i < nslots; i++) missing += slots[i].from < 0;
        if (missing) {
            name_list(names, sizeof names, nslots, missing_name, &lists, "'");
            log_error("%s holds no tensor %s (%d of %s's tensors; names are matched with and without the prefixes "
                      "module.%s%s: a file of another model, or a truncated save)", f->path, names, missing, s->name,
                      hf_prefix(s->family)[0] ? " and " : "", hf_prefix(s->family));
            st = STATUS_INPUT;
        }
    }
    for (int i = 0; i < nslots && st == STATUS_OK; i++) st = read_into(f, s, slots[i].e, &f->tensors[slots[i].from],
                                                                      slots[i].dst);
    if (st == STATUS_OK) st = resolve_ties(f, s, slots, nslots, taken, true);
    if (st == STATUS_OK) {
        for (int i = 0; i < f->count; i++) r->used += taken[i];
        r->skipped = f->count - r->used;
        name_list(r->skipped_names, sizeof r->skipped_names, f->count, untaken_name, &lists, "");
    }
    free(slots);
    free(taken);
    return st;
}

/* ---- the directory ------------------------------------------------------------------ */

bool hf_family_supported(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 || s->family == MODEL_FAMILY_BERT;
}

/* Whether dir holds only regular files (and how many, and whether config.json is one). */
static bool only_files(const char *dir, int *files, bool *config)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool ok = true;
    struct dirent *de;
    *files = 0;
    *config = false;
    while (ok && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[PATH_MAX_HF];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        ok = lstat(p, &sb) == 0 && S_ISREG(sb.st_mode);
        *config |= !strcmp(de->d_name, "config.json");
        ++*files;
    }
    closedir(d);
    return ok;
}

status hf_dir_check(const char *dir, const char *flag)
{
    char what[PATH_MAX_HF + 128];
    bool self;
    if (strlen(dir) + 32 >= PATH_MAX_HF) {
        log_error0("%s %s: the path is too long", flag, dir);
        return STATUS_INPUT;
    }
    if (path_in_run_state(dir, what, sizeof what, &self)) {
        log_error0("%s %s would write into %s; a model directory goes elsewhere (e.g. next to the run directory)",
                   flag, dir, what);
        return STATUS_INPUT;
    }
    struct stat sb;
    if (lstat(dir, &sb) != 0) return STATUS_OK;  /* a new name */
    int files;
    bool config;
    if (!S_ISDIR(sb.st_mode)) {
        log_error0("%s %s: %s stands there; a model directory is written there (remove it or choose another name)",
                   flag, dir, path_kind(sb.st_mode));
        return STATUS_INPUT;
    }
    if (!only_files(dir, &files, &config) || (files && !config)) {
        log_error0("%s %s holds files that are not an earlier model export (no config.json, or subdirectories, "
                   "or links): not replaced; remove it or choose another directory", flag, dir);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* Removes a directory of regular files (an earlier export, or our own temporary): a
 * link at that name is never followed, entries go by unlinkat on the directory opened
 * with O_NOFOLLOW, so a link planted under the name cannot aim the removal elsewhere. */
static void remove_files_dir(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) unlinkat(dfd, de->d_name, 0);
    closedir(d);
    rmdir(dir);
}

/* The parent directory of path into out ("." for a bare name), for its fsync. */
static void parent_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - path), path);
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* tmp (complete, its files fsync'd) becomes dir. An earlier export is exchanged with
 * it in one step (renameat2 RENAME_EXCHANGE), so dir is always the old export or the
 * whole new one, and the old one, now at tmp, is removed; where the file system cannot
 * exchange, the old one is moved aside first (a crash between the two renames leaves
 * it at DIR.old.PID). */
static status commit_dir(const char *tmp, const char *dir)
{
    char old[PATH_MAX_HF + 32], parent[PATH_MAX_HF];
    snprintf(old, sizeof old, "%s.old.%ld", dir, (long)getpid());
    bool had = access(dir, F_OK) == 0, exchanged = false;
    if (had && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        exchanged = true;
    } else {
        if (had && rmdir(dir) != 0 && rename(dir, old) != 0) {  /* an empty one simply goes */
            log_error("cannot move the earlier %s aside to %s: %s", dir, old, log_errno_str());
            return STATUS_IO;
        }
        if (rename(tmp, dir) != 0) {
            log_error("cannot rename %s to %s: %s", tmp, dir, log_errno_str());
            if (had) rename(old, dir);
            return STATUS_IO;
        }
    }
    parent_of(dir, parent, sizeof parent);
    if (fsync_dir(parent) != 0) {
        log_error("cannot fsync %s after renaming %s into it: %s", parent, dir, log_errno_str());
        return STATUS_IO;
    }
    if (exchanged) remove_files_dir(tmp);
    else if (had) remove_files_dir(old);
    return STATUS_OK;
}

typedef struct hf_text {
    const char *text;  /* whole file */
} hf_text;

static int fill_text(void *ctx, int fd)
{
    const hf_text *t = ctx;
    return path_write_all(fd, t->text, strlen(t->text));
}

/* model.safetensors under transformers' names: GPT-2's wte without its padding rows. */
static status write_weights(const model *m, const char *path, const char *meta_json)
{
    const param_table *pt = model_params((model *)m);
    st_tensor *t = calloc((size_t)pt->count, sizeof *t);
    st_name *names = calloc((size_t)pt->count, sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        log_error("out of memory for the table of %d tensors", pt->count);
        return STATUS_NOMEM;
    }
    st_add_table(t, 0, names, pt, "", model_buffers((model *)m)->params);
    for (int i = 0; i < pt->count; i++) {
        hf_export_name(&m->spec, pt->entries[i].name, names[i], sizeof names[i]);
        if (pt->entries[i].ndim) t[i].shape[0] = hf_file_rows(&m->spec, &pt->entries[i]);
    }
    status st = st_write(path, t, pt->count, meta_json);
    free(t);
    free(names);
    return st;
}

status hf_write_dir(const model *m, const char *run_ini, const char *meta_json, const char *dir,
                    const char **tok_kind_out)
{
    if (!hf_family_supported(&m->spec)) {
        log_error("%s has no transformers class here (GPT-2 and BERT have); --to safetensors writes it under "
                  "torchvision's names", m->spec.name);
        return STATUS_INPUT;
    }
    tok *tk = NULL;
    int32_t bos = -1, eos = -1;
    TRY(hf_run_tokenizer(&tk, run_ini, &m->spec, &bos, &eos));
    *tok_kind_out = tok_kind_name(tok_get_kind(tk));
    char out[PATH_MAX_HF], tmp[PATH_MAX_HF + 32], path[PATH_MAX_HF + 64];
    size_t n = (size_t)snprintf(out, sizeof out, "%s", dir);
    while (n > 1 && out[n - 1] == '/') out[--n] = '\0';  /* DIR/ : the temporary goes beside DIR, not into it */
    dir = out;
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dir);  /* a fresh name: nothing planted there is used */
    status st = STATUS_OK;
    char *config = NULL;
    if (!mkdtemp(tmp) || chmod(tmp, 0755) != 0) {
        log_error("cannot create the temporary directory %s: %s", tmp, log_errno_str());
        st = STATUS_IO;
        goto free_tok;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    st = write_weights(m, path, meta_json);
    if (st == STATUS_OK && tok_get_kind(tk) != TOK_KIND_BYTES) st = tok_save(tk, tmp);
    if (st == STATUS_OK && !(config = hf_config_json(&m->spec, bos, eos))) st = STATUS_NOMEM;
    if (st == STATUS_OK) {
        snprintf(path, sizeof path, "%s/config.json", tmp);
        st = path_write_atomic(path, "config.json", fill_text, &(hf_text){ config });
    }
    if (st == STATUS_OK) st = commit_dir(tmp, dir);
    if (st != STATUS_OK) remove_files_dir(tmp);
    free(config);
free_tok:
    tok_free(tk);
    return st;
}
