/* convert — checkpoints to and from the ecosystem's model files: safetensors under the
 * tensors' Hugging Face / torchvision names (what PyTorch users load), and llm.c's
 * GPT-2 model file (libcore/safetensors, libcore/llmc).
 *
 *   --to safetensors|llmc --out FILE    a committed checkpoint's parameters (and
 *                                       batch-norm buffers) to a file
 *   --to hf --out DIR                   a transformers model directory (GPT-2, BERT:
 *                                       model.safetensors, config.json, tokenizer;
 *                                       libcore/ckpt/tool/hf.h)
 *   --from safetensors|llmc|hf --out DIR
 *                                       a file (hf: a model directory) to
 *                                       DIR/step_00000000, a checkpoint nebula-train
 *                                       resumes from: the parameters, zero moments
 *                                       (AdamW's m and v; SGD takes m), the loader at
 *                                       the first sample
 *
 * The one design decision: GPT-2's embedding has padded_vocab_size rows in Nebula (a
 * multiple of 128) and vocab_size rows in Hugging Face's GPT-2. A safetensors file
 * gets the vocab_size real rows, so GPT2LMHeadModel loads it as it is; reading one
 * back fills the padding rows with zeros, and reads Nebula's own padded rows as they
 * are. The architecture of a file Nebula wrote travels in its metadata
 * (nebula_config: the [model] section); other files need --model NAME (and --set
 * model.KEY=VALUE for sizes that differ from the preset), llm.c files carry their
 * sizes in their header. */
#include <inttypes.h>
#include <math.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "ckpt_tool.h"
#include "comm/ctl.h"
#include "data/data.h"
#include "ckpt/tool/hf.h"
#include "ckpt/tool/llmc.h"
#include "ckpt/tool/safetensors.h"

#define BCAST_FLOATS ((size_t)1 << 28)  /* floats per MPI_Bcast: counts are ints */

/* ---- to a file ------------------------------------------------------------------ */

/* The metadata Nebula's files carry: the model's [model] section travels with it. */
static char *file_meta(const tool_model *tm, const ckpt_catalog *cat)
{
    char step[32];
    snprintf(step, sizeof step, "%" PRId64, cat->h.step);
    json_t *meta = json_pack("{s:s, s:s, s:s, s:s}", "format", "pt", "nebula_model", cat->h.model, "nebula_step", step,
                             "nebula_config", tm->ini);
    char *text = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    CHECK(text, "out of memory building safetensors metadata");
    return text;
}

static status write_safetensors(const tool_model *tm, const ckpt_catalog *cat, const char *out, int *n)
{
    const model *m = &tm->m;
    const param_table *pt = model_params((model *)m), *bt = model_state_table(m);
    int cap = pt->count + (bt ? bt->count : 0);
    st_tensor *t = calloc((size_t)cap, sizeof *t);
    st_name *names = calloc((size_t)cap, sizeof *names);
    CHECK(t && names, "out of memory converting a checkpoint");
    *n = st_add_table(t, 0, names, pt, "", model_buffers((model *)m)->params);
    if (bt) *n = st_add_table(t, *n, names, bt, "", model_state((model *)m));
    for (int i = 0; i < pt->count; i++)
        if (pt->entries[i].ndim) t[i].shape[0] = hf_file_rows(&m->spec, &pt->entries[i]);
    char *text = file_meta(tm, cat);
    status st = st_write(out, t, *n, text);
    free(text);
    free(t);
    free(names);
    return st;
}

static status write_llmc(const tool_model *tm, const char *out)
{
    const model *m = &tm->m;
    if (m->spec.family != MODEL_FAMILY_GPT2) {
        log_error0("llm.c model files hold GPT-2 models; this checkpoint is %s (--to safetensors takes any model)",
                   m->spec.name);
        return STATUS_INPUT;
    }
    llmc_model lm;
    TRY(llmc_from_table(&lm, model_gpt2_config(&m->spec), model_params((model *)m), model_buffers((model *)m)->params));
    status st = llmc_write(&lm, out, LLMC_VERSION_FP32);
    llmc_free(&lm);
    return st;
}

/* NaN or Inf weights are a run that diverged: converted, they would pass on silently to
 * whatever loads the file. STATUS_INPUT, logged naming the first tensor and its count. */
static status check_finite(model *m, const char *origin)
{
    const param_table *pt = model_params(m);
    const float *p = model_buffers(m)->params;
    for (int e = 0; e < pt->count; e++) {
        size_t bad = 0;
        for (size_t i = 0; i < pt->entries[e].count; i++) bad += !isfinite(p[pt->entries[e].offset + i]);
        if (!bad) continue;
        log_error0("%s: %s holds %zu NaN or Inf value(s) of %zu: not converted (the weights of a run that had "
                   "diverged)", origin, pt->entries[e].name, bad, pt->entries[e].count);
        log_error0("HINT: convert an earlier checkpoint, from before the loss became NaN");
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* The transformers directory (hf.h); what it holds, in one line. */
static status write_hf(const tool_model *tm, const ckpt_catalog *cat, const char *out, char *what, size_t len)
{
    const char *kind = "bytes";
    char *meta = file_meta(tm, cat);
    status st = hf_write_dir(&tm->m, cat->config, meta, out, &kind);
    free(meta);
    const bool gpt2 = tm->m.spec.family == MODEL_FAMILY_GPT2;
    snprintf(what, len, " (transformers %s: model.safetensors, config.json%s)", gpt2 ? "GPT2LMHeadModel" :
             "BertForMaskedLM", !strcmp(kind, "bytes") ? "; a byte tokenizer, no tokenizer files" : ", tokenizer files");
    return st;
}

/* The architectures --to hf writes; checked before the checkpoint's tensors are read. */
static status check_hf_family(const tool_model *tm, const char *format)
{
    if (strcmp(format, "hf") != 0 || hf_family_supported(&tm->m.spec)) return STATUS_OK;
    if (tm->m.spec.family == MODEL_FAMILY_MLP)
        log_error0("--to hf writes transformers' GPT-2 and BERT; %s is an MLP: --to safetensors writes it under the "
                   "names of a PyTorch nn.Sequential of Linear and ReLU modules (layers.0.weight, ...), which loads strictly",
                   tm->m.spec.name);
    else
        log_error0("--to hf writes transformers' GPT-2 and BERT; %s is a torchvision ResNet: --to safetensors writes "
                   "it under torchvision's names, which torchvision's resnet loads strictly", tm->m.spec.name);
    return STATUS_INPUT;
}

static int convert_to(const tool_args *a, const char *format, const char *out)
{
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    const char *inputs[] = { a->paths[0], cat.file };
    /* every rank: the same file system */
    st = !strcmp(format, "hf") ? hf_dir_check(out, "--out") : path_output_check(out, "--out", inputs, 2);
    if (st != STATUS_OK) {
        ckpt_catalog_free(&cat);
        return status_exit_code(st);
    }
    tool_model tm;
    ckpt_content c;
    st = tool_model_from_ini(&tm, cat.config, cat.file, cat.h.model, cat.file_bytes);
    if (st == STATUS_OK && (st = check_hf_family(&tm, format)) != STATUS_OK) tool_model_free(&tm);
    if (st == STATUS_OK) {
        st = tool_content(&c, &cat, &tm.m, true, false);
        if (st == STATUS_OK) st = ckpt_catalog_load(a->rt->world, &cat, &c);
        if (st == STATUS_OK) st = check_finite(&tm.m, cat.file);  /* every rank loaded the same values */
        int n = 0;
        char what[160] = " (llm.c GPT-2 model file, fp32)";
        if (st == STATUS_OK && a->rt->rank == 0) {
            if (!strcmp(format, "hf")) st = write_hf(&tm, &cat, out, what, sizeof what);
            else if (!strcmp(format, "safetensors")) st = write_safetensors(&tm, &cat, out, &n);
            else st = write_llmc(&tm, out);
        }
        if (!strcmp(format, "safetensors")) snprintf(what, sizeof what, " (safetensors, float32)");
        if (comm_ctl_bcast(comm_ctl_make(a->rt->world, 0), &st, 1, MPI_INT, 0) != STATUS_OK) st = STATUS_PEER;
        if (st == STATUS_OK && a->rt->rank == 0)
            printf("converted %s (%s, step %" PRId64 ") to %s%s%s\n", cat.dir, cat.h.model, cat.h.step, out, what,
                   strcmp(format, "llmc") && tm.m.spec.family == MODEL_FAMILY_GPT2 && model_padded_vocab_size(&tm.m.spec)
                   != model_vocab_size(&tm.m.spec) ? "; wte.weight without its padding rows, as Hugging Face's GPT-2" : "");
        tool_content_free(&c, &tm.m);
        tool_model_free(&tm);
    }
    ckpt_catalog_free(&cat);
    return status_exit_code(st);
}

/* ---- from a file ------------------------------------------------------------------ */

/* The model: --model (and --set model.*) when given, else the metadata Nebula wrote. */
static status model_for_safetensors(tool_model *tm, const st_file *f, const tool_args *a, const char *path)
{
    if (strcmp(config_origin(a->cfg, "model.name"), "default") != 0) return tool_model_from_config(tm, a->cfg, path, 0);  /* the user's sizes: a mismatch is named per tensor */
    const char *ini = st_meta_get(f, "nebula_config");
    if (ini) return tool_model_from_ini(tm, ini, path, NULL, f->size);
    log_error0("%s does not say which model it holds (no nebula_config metadata): give --model NAME, and --set "
               "model.KEY=VALUE for sizes other than the preset's", path);
    return STATUS_INPUT;
}

/* A safetensors file, or a transformers directory (hf: its config.json gives the model),
 * read by name through hf_read_tensors: prefixes, tied copies and extra buffers allowed. */
static status read_safetensors(tool_model *tm, const tool_args *a, const char *path, bool hf, int *ignored)
{
    st_file f;
    config mc;
    const char *want = strcmp(config_origin(a->cfg, "model.name"), "default") ? config_str(a->cfg, "model.name") : NULL;
    if (hf) {
        static const char *const sizes[] = { "model.n_layer", "model.n_head", "model.n_embd", "model.max_seq_len",
                                             "model.vocab_size" };
        for (int k = 0; k < 5; k++)
            if (strcmp(config_origin(a->cfg, sizes[k]), "default") != 0) {
                log_error0("--set %s does not apply to --from hf: the sizes come from %s/config.json", sizes[k], path);
                return STATUS_USAGE;
            }
        TRY(hf_config_read(&mc, path, want));
    }
    TRY(hf ? hf_open_weights(&f, path) : st_open(&f, path));
    status st = hf ? tool_model_from_config(tm, &mc, f.path, f.size) : model_for_safetensors(tm, &f, a, path);
    if (st == STATUS_OK) {
        hf_read_report r;
        st = hf_read_tensors(&tm->m, &f, &r);
        *ignored = r.skipped;
        if (st == STATUS_OK && r.skipped)
            log_info0("%s: %d tensor%s without a counterpart in %s skipped: %s", f.path, r.skipped,
                      r.skipped > 1 ? "s" : "", tm->m.spec.name, r.skipped_names);
        if (st != STATUS_OK) tool_model_free(tm);
    }
    st_close(&f);
    return st;
}

/* The llm.c header's sizes over --model's preset (gpt2 when not given). */
static status read_llmc(tool_model *tm, const tool_args *a, const char *path)
{
    llmc_model lm;
    TRY(llmc_read(&lm, path));
    config mc;
    tool_model_config(&mc);
    char set[6][96];
    const gpt2_config *g = &lm.cfg;
    snprintf(set[0], sizeof set[0], "model.name=%s",
             strcmp(config_origin(a->cfg, "model.name"), "default") ? config_str(a->cfg, "model.name") : "gpt2");
    snprintf(set[1], sizeof set[1], "model.n_layer=%d", g->num_layers);
    snprintf(set[2], sizeof set[2], "model.n_head=%d", g->num_heads);
    snprintf(set[3], sizeof set[3], "model.n_embd=%d", g->channels);
    snprintf(set[4], sizeof set[4], "model.max_seq_len=%d", g->max_seq_len);
    snprintf(set[5], sizeof set[5], "model.vocab_size=%d", g->vocab_size);
    status st = STATUS_OK;
    for (int i = 0; i < 6 && st == STATUS_OK; i++) st = config_set(&mc, set[i]);
    if (st == STATUS_OK) st = tool_model_from_config(tm, &mc, path, 0);  /* llmc_read matched the header to the file's size */
    if (st == STATUS_OK && (st = llmc_to_table(&lm, model_params(&tm->m), model_buffers(&tm->m)->params)) != STATUS_OK)
        tool_model_free(tm);
    llmc_free(&lm);
    return st;
}

/* Rank 0 read the file: every rank gets the flat buffers. */
static void bcast_floats(float *p, size_t n, MPI_Comm comm)
{
    for (size_t at = 0; at < n; at += BCAST_FLOATS)
        CHECK(comm_ctl_bcast(comm_ctl_make(comm, 0), p + at, (int)(n - at < BCAST_FLOATS ? n - at : BCAST_FLOATS), MPI_FLOAT, 0) == STATUS_OK, "see the MPI error above");
}

/* step 0 of DIR: parameters (and buffers), zero moments, the loader at its start. */
static status write_checkpoint(tool_model *tm, MPI_Comm comm, const char *dir)
{
    model *m = &tm->m;
    const param_table *pt = model_params(m);
    float *mm = tool_zeros(pt), *mv = tool_zeros(pt);
    data_state loader = { 0, 0 };
    ckpt_content c;
    train_ckpt_model_content(&c, m, mm, mv, &loader, tm->ini);
    status st = STATUS_OK;
    if (!mm || !mv) {
        log_error0("cannot allocate 2 x %zu bytes for the optimizer moments", pt->total * sizeof(float));
        st = STATUS_NOMEM;
    }
    ckpt_writer *w = NULL;
    if (st == STATUS_OK) st = ckpt_writer_init(&w, comm, dir, 1, false, &c);
    if (st == STATUS_OK) st = ckpt_save(w, &c);
    if (w) ckpt_writer_free(w);
    tool_content_free(&c, m);
    return st;
}

static int convert_from(const tool_args *a, const char *format, const char *out)
{
    tool_model tm;
    int ignored = 0, rank = a->rt->rank;
    MPI_Comm comm = a->rt->world;
    status st = ckpt_out_check_step(out, 0, NULL);  /* every rank: the same file system */
    if (st != STATUS_OK) return status_exit_code(st);
    if (rank == 0)
        st = !strcmp(format, "llmc") ? read_llmc(&tm, a, a->paths[0])
                                     : read_safetensors(&tm, a, a->paths[0], !strcmp(format, "hf"), &ignored);
    if (rank == 0 && st == STATUS_OK && (st = check_finite(&tm.m, a->paths[0])) != STATUS_OK) tool_model_free(&tm);
    if (comm_ctl_bcast(comm_ctl_make(comm, 0), &st, 1, MPI_INT, 0) != STATUS_OK) st = STATUS_PEER;
    if (st != STATUS_OK) return status_exit_code(st);
    if (comm_ctl_bcast(comm_ctl_make(comm, 0), tm.ini, (int)sizeof tm.ini, MPI_CHAR, 0) != STATUS_OK) return 1;
    if (rank != 0) st = tool_model_from_ini(&tm, tm.ini, a->paths[0], NULL, 0);  /* rank 0 checked it */
    int failed = st != STATUS_OK, any;  /* rank 0 built this model: only memory can fail here */
    if (comm_ctl_allreduce(comm_ctl_make(comm, 0), &failed, &any, 1, MPI_INT, MPI_MAX) != STATUS_OK) return 1;
    if (any) {
        if (!failed) tool_model_free(&tm);
        return 1;
    }
    bcast_floats(model_buffers(&tm.m)->params, model_params(&tm.m)->total, comm);
    if (model_state_table(&tm.m)) bcast_floats(model_state(&tm.m), model_state_table(&tm.m)->total, comm);
    st = write_checkpoint(&tm, comm, out);
    if (st == STATUS_OK && rank == 0) {
        printf("converted %s (%s) to %s/step_00000000: %s, %d rank%s", a->paths[0], format, out, tm.m.spec.name,
               a->rt->size, a->rt->size > 1 ? "s" : "");
        if (ignored) printf("; %d tensor%s of the file that %s does not have ignored", ignored,
                            ignored > 1 ? "s" : "", tm.m.spec.name);
        printf("\n  moments start at zero and the loader at the first sample: nebula-train --resume %s/step_00000000 "
               "fine-tunes from these weights\n", out);
    }
    tool_model_free(&tm);
    return status_exit_code(st);
}

/* A copy of a checkpoint with its tensors in another element type (ckpt_export). */
static int convert_dtype(const tool_args *a, const char *dtype, const char *out)
{
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, a->paths[0]);
    if (st != STATUS_OK) return status_exit_code(st);
    st = ckpt_out_check_step(out, cat.h.step, NULL);
    if (st == STATUS_OK) st = ckpt_export(a->rt->world, &cat, dtype, out);
    if (st == STATUS_OK && a->rt->rank == 0)
        printf("converted %s to %s tensors, committed as %s/step_%08" PRId64 "\n", cat.dir, dtype, out, cat.h.step);
    ckpt_catalog_free(&cat);
    return status_exit_code(st);
}

int tool_convert(const tool_args *a)
{
    const char *to = config_str(a->cfg, "ckpt.to"), *from = config_str(a->cfg, "ckpt.from");
    const char *out = config_str(a->cfg, "ckpt.out"), *dtype = config_str(a->cfg, "ckpt.dtype");
    bool to_file = strcmp(to, "none") != 0;
    if (strcmp(dtype, "none") != 0) {
        if (to_file || strcmp(from, "none") != 0 || !out[0]) {
            log_error0("convert --dtype %s takes a checkpoint and --out DIR (the copy goes to DIR/step_N), and "
                       "neither --to nor --from", dtype);
            return 2;
        }
        return convert_dtype(a, dtype, out);
    }
    if (to_file == (strcmp(from, "none") != 0)) {
        log_error0("convert needs one of --to FORMAT (a checkpoint to a file) and --from FORMAT (a file to a "
                   "checkpoint); FORMAT is safetensors, llmc or hf (a transformers model directory)");
        return 2;
    }
    if (!out[0]) {
        log_error0("convert needs --out %s", !strcmp(to, "hf") ? "DIR, the model directory to write"
                                             : to_file ? "FILE, the file to write" : "DIR, where DIR/step_00000000 goes");
        return 2;
    }
    return to_file ? convert_to(a, to, out) : convert_from(a, from, out);
}
