/* layernorm — layer normalisation over the last axis (Ba, Kiros, Hinton 2016),
 * with PyTorch nn.LayerNorm semantics: biased variance, rstd = 1 / sqrt(var + eps).
 *
 * The one design decision: the backward's dweight/dbias reduction over rows is
 * partitioned by the data, not by the threads. Rows are cut into fixed chunks of
 * LAYERNORM_CHUNK_ROWS; each chunk's partial sums are formed in row order and the
 * chunks are added in chunk order, so gradients are bit-identical for any
 * OMP_NUM_THREADS (runs on different machines and restarts agree bit for bit).
 * The price is one scratch buffer of 2 * C floats per chunk, allocated per call. */
#ifndef NEBULA_KERNELS_LAYERNORM_H
#define NEBULA_KERNELS_LAYERNORM_H

/* Rows per chunk of the backward reduction; part of the numerical result. */
#define LAYERNORM_CHUNK_ROWS 32

/* out = (inp - mean) * rstd * weight + bias, row by row. mean and rstd are saved
 * for backward; either may be NULL (inference). */
void layernorm_forward(float *out,          /* (BT, C) */
                       float *mean,         /* (BT) or NULL */
                       float *rstd,         /* (BT) or NULL */
                       const float *inp,    /* (BT, C) */
                       const float *weight, /* (C) */
                       const float *bias,   /* (C) */
                       int BT, int C, float eps);

/* Adds the gradients of inp, weight and bias (all required) given dout and the
 * mean/rstd saved by layernorm_forward. */
void layernorm_backward(float *dinp,         /* (BT, C) */
                        float *dweight,      /* (C) */
                        float *dbias,        /* (C) */
                        const float *dout,   /* (BT, C) */
                        const float *inp,    /* (BT, C) */
                        const float *weight, /* (C) */
                        const float *mean,   /* (BT) */
                        const float *rstd,   /* (BT) */
                        int BT, int C);

/* The specification, in double with plain loops. */
void layernorm_forward_ref(double *out,          /* (BT, C) */
                           double *mean,         /* (BT) or NULL */
                           double *rstd,         /* (BT) or NULL */
                           const double *inp,    /* (BT, C) */
                           const double *weight, /* (C) */
                           const double *bias,   /* (C) */
                           int BT, int C, double eps);
void layernorm_backward_ref(double *dinp,         /* (BT, C) */
                            double *dweight,      /* (C) */
                            double *dbias,        /* (C) */
                            const double *dout,   /* (BT, C) */
                            const double *inp,    /* (BT, C) */
                            const double *weight, /* (C) */
                            const double *mean,   /* (BT) */
                            const double *rstd,   /* (BT) */
                            int BT, int C);

#endif
