/* device_impl — the CUDA half of the device module (device_cuda.c), called by
 * device.c; compiled only with NEBULA_CUDA. Never included from apps/. */
#ifndef NEBULA_DEVICE_IMPL_H
#define NEBULA_DEVICE_IMPL_H

#include "device.h"

/* The kernel table of a precision. */
const nn_ops *device_cuda_ops(precision_kind p);
/* The optimizer's per-tensor plan on the GPU (decay flags), uploaded once. */
status device_cuda_optim_init(void **plan, const param_table *pt);
void device_cuda_optim_free(void *plan);
void device_cuda_adamw_step(void *plan, param_buffers *w, const adamw_hparams *hp, double lr, long t);
/* grads *= inv_scale; true when any was inf or NaN (flag_dev: one device int). */
bool device_cuda_unscale(float *grads, size_t n, float inv_scale, int *flag_dev);

#endif
