/* batch — the batch arithmetic (global = micro-batch x accumulation x ranks), the
 * loaders of a run, and filling one micro-batch: tokens, images, or BERT's masked
 * tokens. BERT's masking is keyed by each sample's index in the file and the epoch,
 * so that it depends on neither the rank that reads it nor the world size. */
#include <stdio.h>
#include <string.h>

#include "data/tokenizer.h"
#include "core.h"

status train_batch_resolve(train_batch *tb, const config *cfg, int world)
{
    long b = config_int(cfg, "train.micro_batch"), A = config_int(cfg, "train.accum");
    long GB = config_int(cfg, "train.global_batch");
    int given = (b > 0) + (A > 0) + (GB > 0);
    if (given == 0) {
        log_error0("train.micro_batch or train.global_batch must be set (global batch = micro_batch x accum x %d "
                   "ranks; give any two)", world);
        return STATUS_INPUT;
    }
    if (given == 1 && A == 0) A = 1;
    if (b > 0 && A > 0 && GB > 0 && b * A * world != GB) {
        log_error0("train.global_batch = %ld but train.micro_batch x train.accum x ranks = %ld x %ld x %d = %ld; "
                   "give any two of the three", GB, b, A, world, b * A * world);
        return STATUS_INPUT;
    }
    if (GB == 0) GB = b * A * world;
    if (b == 0 || A == 0) {
        long known = b ? b : A, per = (long)world * known;
        if (GB % per != 0) {
            log_error0("train.global_batch = %ld is not a multiple of train.%s x ranks = %ld x %d = %ld", GB,
                       b ? "micro_batch" : "accum", known, world, per);
            return STATUS_INPUT;
        }
        if (b == 0) b = GB / per;
        else A = GB / per;
    }
    tb->micro_batch = (int)b, tb->accum = (int)A, tb->global_batch = (int)GB;
    return STATUS_OK;
}

/* "0.49,0.48,0.45" into three floats. */
/* BERT's special ids: those of the WordPiece tokenizer beside the training data (or
 * data.tokenizer), so a vocabulary the tokenizers library trained ([PAD] 0 .. [MASK] 4)
 * masks as bert-base's does ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), its
 * ids without a tokenizer or with another kind. */
static status bert_specials(train_run *r, const char *path)
{
    r->bert_special = BERT_SPECIAL_TOKENS_UNCASED;
    tok *t = NULL;
    TRY(tok_find(&t, config_str(r->cfg, "data.tokenizer"), path));
    status st = STATUS_OK;
    if (tok_get_kind(t) == TOK_KIND_WORDPIECE) {
        const char *names[5] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
        int32_t id[5];
        for (int i = 0; i < 5 && st == STATUS_OK; i++) {
            id[i] = tok_token_id(t, names[i]);
            if (id[i] < 0 || id[i] >= model_vocab_size(&r->spec)) {
                char at[32] = "no id";
                if (id[i] >= 0) snprintf(at, sizeof at, "id %d", id[i]);
                log_error("the WordPiece tokenizer of %s gives %s %s: BERT's masked LM needs all of [PAD] [UNK] [CLS] "
                          "[SEP] [MASK] inside model.vocab_size = %d", path, names[i], at, model_vocab_size(&r->spec));
                st = STATUS_INPUT;
            }
        }
        if (st == STATUS_OK) r->bert_special = (bert_special_tokens){ id[0], id[1], id[2], id[3], id[4] };
    }
    tok_free(t);
    return st;
}

status train_open_data(train_run *r, data_loader **out, const char *path, bool train)
{
    if (train && r->spec.family == MODEL_FAMILY_BERT) TRY(bert_specials(r, path));
    const config *cfg = r->cfg;
    if (!strcmp(path, TRAIN_DATA_SYNTHETIC_FIXED)) {
        if (!train) {
            log_error0("data.val = %s (%s): evaluating on the one batch the model trains on measures nothing; use "
                       "data.val = synthetic (held-out synthetic samples), a file, or leave data.val empty",
                       path, config_origin(cfg, "data.val"));
            return STATUS_INPUT;
        }
        r->fixed_batch = true;
        path = "synthetic";  /* the position advances over the synthetic stream; its samples are not read */
    }
    data_config dc;
    memset(&dc, 0, sizeof dc);
    dc.path = path;
    dc.images = model_spec_images(&r->spec);
    dc.vocab_size = model_vocab_size(&r->spec);
    dc.T = r->T;
    dc.H = dc.W = r->spec.image_size;
    dc.num_classes = model_num_classes(&r->spec);
    dc.pad_crop = train ? (int)config_int(cfg, "data.pad_crop") : 0;
    dc.flip = train && config_bool(cfg, "data.flip");
    TRY(config_floats(cfg, "data.mean", dc.mean, 3));
    TRY(config_floats(cfg, "data.std", dc.std, 3));
    dc.micro_batch = r->tb.micro_batch;
    dc.accum = train ? r->tb.accum : 1;
    dc.dp_rank = train_dp_rank(r);  /* the ranks of one replica (its tp shards) read the same samples */
    dc.dp_size = train_dp_size(r);
    dc.seed = r->seed;
    dc.shuffle = train && config_bool(cfg, "data.shuffle");
    return data_open(out, &dc);
}

status train_open_data_agreed(train_run *r, data_loader **out, const char *path, bool train)
{
    char why[2048];
    log_capture_held(why, sizeof why);  /* every rank opens the file; the reason is printed once, below */
    status mine = train_open_data(r, out, path, train);
    log_capture(NULL, 0);
    int rank = r->rt->rank, size = r->rt->size, failed[2] = { mine != STATUS_OK ? rank : size, mine != STATUS_OK },
        agreed[2];
    comm_ctl ctl = train_ctl(r);
    TRY(comm_ctl_allreduce(ctl, &failed[0], &agreed[0], 1, MPI_INT, MPI_MIN));  /* the first rank that failed */
    TRY(comm_ctl_allreduce(ctl, &failed[1], &agreed[1], 1, MPI_INT, MPI_SUM));  /* and how many did */
    if (agreed[0] == size) return STATUS_OK;
    int code = (int)mine;
    TRY(comm_ctl_bcast(ctl, &code, 1, MPI_INT, agreed[0]));
    TRY(comm_ctl_bcast(ctl, why, (int)sizeof why, MPI_CHAR, agreed[0]));
    data_free(*out);
    *out = NULL;
    if (rank == 0 && agreed[1] == size)  /* the same file on every rank: one reason for all */
        log_error("%s", why[0] ? why : status_str((status)code));
    else if (rank == 0)
        log_error("rank %d (%d of %d ranks failed): %s", agreed[0], agreed[1], size, why[0] ? why : status_str((status)code));
    return (status)code;
}

/* Fills the model's micro-batch a of the current step. */
status train_fill(train_run *r, data_loader *d, int a)
{
    return train_fill_into(r, d, a, &r->batch);
}

status train_fill_into(train_run *r, data_loader *d, int a, model_batch *b)
{
    if (r->fixed_batch && d == r->train_data) return STATUS_OK;  /* synthetic-fixed: filled at setup, never changed */
    if (model_spec_images(&r->spec)) return data_next_images(d, a, b->images, b->targets);
    if (r->spec.family == MODEL_FAMILY_GPT2) return data_next_tokens(d, a, b->ids, b->targets);
    /* BERT: masked LM over the raw tokens, each sample's masking keyed by its index
     * in the file and the epoch, so that it depends on neither the rank that reads
     * it nor the world size. */
    TRY(data_next_tokens(d, a, r->raw_ids, NULL));
    data_batch_samples(d, a, r->samples);
    bert_special_tokens sp = r->bert_special;
    uint64_t epoch = data_get_state(d).epoch;
    for (int i = 0, n = data_micro_batch_size(d, a); i < n; i++) {  /* a share's last micro-batch may hold fewer */
        size_t at = (size_t)i * (size_t)r->T;
        bert_mask_tokens(b->ids + at, b->targets + at, r->raw_ids + at, b->mask + at, 1, r->T,
                         model_vocab_size(&r->spec), &sp, r->seed, (uint32_t)r->samples[i], epoch);
    }
    return STATUS_OK;
}

/* The share sched.c assigned, as the loader splits it (the whole b x A without one). */
int train_micro_batches(const train_run *r)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? r->tb.accum : data_micro_batches(r->train_data);
}

int train_micro_batch_size(const train_run *r, int a)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? r->tb.micro_batch : data_micro_batch_size(r->train_data, a);
}
