/* optim_cuda — libcore's optimizer types as kernels/cuda/optim.h takes them: one range
 * per tensor or per ZeRO range, and the hyper-parameters. The kernels know nothing of
 * libcore's tables, so the bridge lives here, above both. */
#ifndef NEBULA_OPTIM_CUDA_H
#define NEBULA_OPTIM_CUDA_H

#include "cuda/optim.h"
#include "optim.h"

/* One range per tensor of the table (the whole-buffer step); plain: per entry or
 * NULL (sgd_hparams.plain). out: pt->count ranges. Returns the count. */
static inline int cuda_optim_ranges_from_table(const param_table *pt, const uint8_t *plain, cuda_optim_range *out)
{
    for (int e = 0; e < pt->count; e++)
        out[e] = (cuda_optim_range){ .offset = pt->entries[e].offset, .count = pt->entries[e].count,
                                     .packed = pt->entries[e].offset, .decay = pt->entries[e].decay,
                                     .plain = plain && plain[e] };
    return pt->count;
}

/* ZeRO's ranges (optim.h optim_range): the flags come from each range's tensor. */
static inline int cuda_optim_ranges_from_optim(const param_table *pt, const optim_range *r, int n,
                                               const uint8_t *plain, cuda_optim_range *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (cuda_optim_range){ .offset = r[i].offset, .count = r[i].count, .packed = r[i].packed,
                                     .decay = pt->entries[r[i].entry].decay,
                                     .plain = plain && plain[r[i].entry] };
    return n;
}

static inline cuda_adamw_hparams cuda_adamw_hparams_from(const adamw_hparams *hp)
{
    return (cuda_adamw_hparams){ hp->beta1, hp->beta2, hp->eps, hp->weight_decay };
}

static inline cuda_sgd_hparams cuda_sgd_hparams_from(const sgd_hparams *hp)
{
    return (cuda_sgd_hparams){ hp->momentum, hp->nesterov, hp->weight_decay };
}
#endif
