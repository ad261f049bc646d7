/* test_ckpt_logits — the Nebula side of validation/cli/test_ckpt_torch.sh: a
 * committed checkpoint loaded the way nebula-train resumes (ckpt_load, every
 * checksum verified, the model and table hash checked), one forward pass of a fixed
 * synthetic batch, and a safetensors dump of that batch and the logits for the
 * PyTorch reference (validation/reference/ckpt_torch_ref.py) to recompute.
 *
 *     test_ckpt_logits CKPT_DIR OUT.safetensors [B [T]]
 *
 * The model is the one the checkpoint's stored [model] section describes, so the
 * program needs no options of its own (GPT-2 and ResNet: the models with a PyTorch
 * reference here); B defaults to 2 and T (GPT-2) to 32, at most the model's
 * max_seq_len. The batch is model_batch_synthetic's (seed 1234): token ids and
 * next-token targets, or images in [-0.5, 0.5) and labels. The forward pass is
 * the evaluation one (ResNet: running statistics). The dump holds in.tokens and
 * in.targets (B, T), or in.images (B, 3, H, W) and in.labels (B), as float32 (exact:
 * ids < 2^24); out.logits (B, T, Vp) or (B, classes); out.loss (1); the metadata
 * model, family, layers, heads and vocab_size, or arch (torchvision's name), stem and
 * num_classes, as strings.
 * Exit 0 when the dump is written, 1 on any failure (logged), 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/tool/offline.h"
#include "base/config.h"
#include "nn/model.h"
#include "base/runtime.h"
#include "ckpt/tool/safetensors.h"

enum { BATCH_SEED = 1234 };

/* The architecture the checkpoint at `dir` stores, checked against its model attribute. */
static status spec_of_checkpoint(const char *dir, model_spec *spec)
{
    ckpt_catalog cat;
    TRY(ckpt_catalog_open(&cat, dir));
    config mc;
    status st = STATUS_OK;
    if (model_config_from_ini(&mc, cat.config) != STATUS_OK || model_spec_from_config(spec, &mc) != STATUS_OK ||
        strcmp(spec->name, cat.h.model) != 0) {
        log_error0("%s: its stored [model] section does not describe the model '%s' it holds", dir, cat.h.model);
        st = STATUS_INPUT;
    }
    ckpt_catalog_free(&cat);
    return st;
}

/* One float32 tensor of the dump from int32 values (ids and labels < 2^24: exact). */
static float *as_float(const int32_t *v, size_t n)
{
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; f && i < n; i++) f[i] = (float)v[i];
    return f;
}

static status dump(const model *m, const model_batch *b, const char *out)
{
    const model_spec *s = &m->spec;
    int B = m->B, T = m->T, nt = 0;
    st_tensor t[4];
    float *ids = NULL, *tgt = NULL, loss = model_loss(m);
    char meta[512];
    if (s->family == MODEL_FAMILY_RESNET) {
        int HW = s->image_size, K = s->resnet.num_classes;
        tgt = as_float(b->targets, (size_t)B);
        t[nt++] = (st_tensor){ "in.images", 4, { B, 3, HW, HW }, b->images };
        t[nt++] = (st_tensor){ "in.labels", 1, { B }, tgt };
        t[nt++] = (st_tensor){ "out.logits", 2, { B, K }, m->resnet.acts.logits };
        snprintf(meta, sizeof meta,
                 "{\"model\":\"%s\",\"family\":\"resnet\",\"arch\":\"%.*s\",\"stem\":\"%s\",\"num_classes\":\"%d\"}",
                 s->name, (int)strcspn(s->name, "-"), s->name, resnet_stem_name(s->resnet.stem), K);
    } else {
        const gpt2_config *c = &s->gpt2;
        ids = as_float(b->ids, (size_t)B * T);
        tgt = as_float(b->targets, (size_t)B * T);
        t[nt++] = (st_tensor){ "in.tokens", 2, { B, T }, ids };
        t[nt++] = (st_tensor){ "in.targets", 2, { B, T }, tgt };
        t[nt++] = (st_tensor){ "out.logits", 3, { B, T, c->padded_vocab_size }, m->gpt2.acts.logits };
        snprintf(meta, sizeof meta,
                 "{\"model\":\"%s\",\"family\":\"gpt2\",\"layers\":\"%d\",\"heads\":\"%d\",\"vocab_size\":\"%d\"}",
                 s->name, c->num_layers, c->num_heads, c->vocab_size);
    }
    t[nt++] = (st_tensor){ "out.loss", 1, { 1 }, &loss };
    status st = (s->family == MODEL_FAMILY_GPT2 && !ids) || !tgt ? STATUS_NOMEM : st_write(out, t, nt, meta);
    free(ids);
    free(tgt);
    return st;
}

static status run(const runtime *rt, const char *dir, const char *out, int B, int T)
{
    model_spec spec;
    TRY(spec_of_checkpoint(dir, &spec));
    if (spec.family == MODEL_FAMILY_BERT) {
        log_error0("%s: %s has no PyTorch reference here (GPT-2 and ResNet have)", dir, spec.name);
        return STATUS_INPUT;
    }
    if (spec.family == MODEL_FAMILY_RESNET) T = 0;
    else if (T > spec.gpt2.max_seq_len) T = spec.gpt2.max_seq_len;
    model m;
    memset(&m, 0, sizeof m);
    TRY(model_init(&m, &spec, B, T, 0, false));
    ckpt_content c = { .model = spec.name, .table_hash = param_table_hash(model_params(&m)) };
    c.groups[c.ngroups++] = (ckpt_tensors){ "params", model_params(&m), model_buffers(&m)->params, false };
    if (model_state_table(&m))
        c.groups[c.ngroups++] = (ckpt_tensors){ "buffers", model_state_table(&m), model_state(&m), false };
    ckpt_info info;
    model_batch b;
    status st = ckpt_load(rt->world, NULL, dir, &c, &info);
    if (st == STATUS_OK) st = model_batch_init(&b, &m);
    if (st == STATUS_OK) {
        model_batch_synthetic(&b, &m, BATCH_SEED);
        st = model_forward(&m, &b, false);
        if (st == STATUS_OK && rt->rank == 0) st = dump(&m, &b, out);
        char batch[64];
        if (T) snprintf(batch, sizeof batch, "%d sequences of %d tokens", B, T);
        else snprintf(batch, sizeof batch, "%d images %dx%d", B, spec.image_size, spec.image_size);
        if (st == STATUS_OK && rt->rank == 0)
            printf("%s: %s at step %lld, %s, loss %.6f -> %s\n", dir, spec.name, (long long)info.step, batch,
                   model_loss(&m), out);
        model_batch_free(&b);
    }
    model_free(&m);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s CKPT_DIR OUT.safetensors [B [T]]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *out = argv[2];
    int B = argc > 3 ? atoi(argv[3]) : 2, T = argc > 4 ? atoi(argv[4]) : 32;
    if (B < 1 || T < 1) {
        fprintf(stderr, "%s: B and T must be positive\n", argv[0]);
        return 2;
    }
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    st = run(&rt, dir, out, B, T);
    if (st != STATUS_OK) log_error0("no logits for %s: %s", dir, status_str(st));
    runtime_free(&rt);
    return st == STATUS_OK ? 0 : 1;
}
