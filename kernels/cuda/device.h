/* device — the CUDA runtime calls libcore needs, behind a C interface so that
 * libcore compiles with mpicc and links libkernels_cuda only when nvcc is present. */
#ifndef NEBULA_KERNELS_CUDA_DEVICE_H
#define NEBULA_KERNELS_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no device. */
int cuda_device_count(void);

/* dst[i] += src[i] for i < n on device pointers, on the default stream; returns 0 or a CUDA error code. */
int cuda_reduce_sum_f32(float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
