/* act16 — the element-wise passes and layout conversions of a CNN whose activations
 * and activation gradients are bf16 (--precision bf16 on the CPU, as under PyTorch's
 * CPU autocast, where convolution outputs are bf16 and batch norm, ReLU and the
 * residual sums take them as they come).
 *
 * Each pass reads its bf16 operands exactly into fp32, does the fp32 operation of its
 * fp32 counterpart (relu.h, residual.h, dnn.h's converters) and rounds the result once
 * to bf16, to nearest even (bf16_from_f32's rule, NaN kept quiet): the result is the
 * fp32 counterpart's, rounded. Activations are blocked (dnn.h), C % dnn_block() == 0.
 * Arrays are uint16_t bit patterns. */
#ifndef NEBULA_KERNELS_ACT16_H
#define NEBULA_KERNELS_ACT16_H

#include <stddef.h>
#include <stdint.h>

/* out = max(out + identity, 0): a residual block's end. */
void act16_add_relu(uint16_t *out, const uint16_t *identity, size_t n);
/* dinp += (out > 0 ? dout : 0), out the ReLU's output (relu_backward's contract). */
void act16_relu_backward(uint16_t *dinp, const uint16_t *out, const uint16_t *dout, size_t n);
/* da += dout: two gradient branches meeting. */
void act16_add(uint16_t *da, const uint16_t *dout, size_t n);
/* Blocked bf16 <-> NCHW fp32 (N, C, HW): the edges where fp32 kernels take over. */
void act16_to_nchw(float *dst, const uint16_t *src, int N, int C, int HW);
void act16_from_nchw(uint16_t *dst, const float *src, int N, int C, int HW);

#endif
