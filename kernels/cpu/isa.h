/* isa — the CPU's vector instruction sets, detected once per process, and the level
 * the CPU kernels use.
 *
 * Levels, each containing the one before:
 *   base         x86-64 (SSE2), or another architecture: its baseline (aarch64: NEON,
 *                which the optimizer and DGC-Pro loops use; see docs/portability.md)
 *   avx2         AVX2 + FMA
 *   avx512       AVX-512 F, BW, VL, DQ (oneDNN's avx512_core): 16-float vectors
 *   avx512_bf16  + AVX512_VNNI and AVX512_BF16 (bf16 dot products)
 *   amx          + AMX-TILE, AMX-BF16, AMX-INT8 with the kernel's permission to use
 *                the tile state (Linux arch_prctl ARCH_REQ_XCOMP_PERM)
 * A level counts only when the OS saves its registers (XCR0; __builtin_cpu_supports
 * checks it).
 *
 * The one design decision: the kernels run at one level for the whole process — the
 * machine's best, or lower when the environment variable NEBULA_CPU_ISA names one
 * (auto, base, avx2, avx512, avx512_bf16, amx), as oneDNN's ONEDNN_MAX_CPU_ISA and
 * OpenBLAS's OPENBLAS_CORETYPE do. The tests force each path the machine has this
 * way; a user compares paths the same way. What the level chooses: oneDNN's highest
 * ISA, the channel block of blocked activations (16 from avx512 on, 8 below: one
 * vector of floats), the hand-written AVX2 loops (optimizer, DGC-Pro selection), and
 * which build of the compiler-vectorised loops runs (GELU, softmax, layer norm,
 * cross-entropy: isa_variant.h). */
#ifndef NEBULA_KERNELS_ISA_H
#define NEBULA_KERNELS_ISA_H

#include <stdbool.h>
#include <stddef.h>

typedef enum isa_level {
    ISA_BASE = 0,
    ISA_AVX2,
    ISA_AVX512,
    ISA_AVX512_BF16,
    ISA_AMX,
    ISA_LEVELS
} isa_level;

/* The best level this CPU and OS run. */
isa_level isa_machine(void);

/* The level the kernels use: isa_machine(), or NEBULA_CPU_ISA's when set. A value that
 * is not a level, or names one above the machine's, ends the process with exit code 2
 * and isa_env_check's message; device_open calls isa_env_check first, so an executable
 * reports a bad value as an input error (exit 2) before any kernel runs. */
isa_level isa_active(void);

/* Checks NEBULA_CPU_ISA: true when unset, "auto" or a level the machine runs; false
 * with `why` naming the value, the machine's level and the accepted values. */
bool isa_env_check(char *why, size_t len);

/* "avx2", ...; "?" out of range. */
const char *isa_name(isa_level l);
/* A name (or "auto": the machine's level) to a level; false when s is none of them. */
bool isa_parse(const char *s, isa_level *out);

/* The channel block of blocked activations at the active level: 16 or 8. */
int isa_channel_block(void);

/* One line for logs and benchmark headers: the active level, how it was chosen, the
 * machine's level and features, and the CPU's model name, e.g.
 * "avx512_bf16 (the machine's best; AVX2 FMA AVX-512F/BW/VL/DQ VNNI BF16, no AMX; AMD EPYC)". */
void isa_describe(char *buf, size_t len);

/* The CPU's model name ("AMD EPYC 9B14"): the brand string of CPUID on x86, else
 * /proc/cpuinfo's "model name" (or "Model", "cpu model"); "" when neither says. */
const char *isa_cpu_model(void);

#endif
