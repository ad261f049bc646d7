/* rng — counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 *
 * The one design decision: a random number is a pure function of
 * (seed, rank, purpose, step, position). Nothing is carried from one step to the
 * next, so a resumed run, a run on another number of ranks, or a rank that
 * recomputes a dropout mask in backward draws exactly the same numbers without
 * any communication. Streams are cheap (an rng is 56 bytes on the stack): make a
 * new one per (rank, purpose, step) instead of passing a long-lived one around.
 *
 * Stream layout (the key holds the seed, the counter holds everything else,
 * bit-packed without overlap, so two different (rank, purpose, step, block)
 * tuples can never produce the same Philox input under one seed):
 *
 *   key[0] = seed bits  0..31          key[1] = seed bits 32..63
 *   ctr[0] = block bits 0..31          ctr[1] = rank
 *   ctr[2] = step bits  0..31
 *   ctr[3] = step bits 32..47 | block bits 32..39 << 16 | purpose << 24
 *
 *   32 (rank) + 8 (purpose) + 48 (step) + 40 (block) = 128 counter bits.
 *
 * One block gives 4 outputs of 32 bits, so a stream holds 2^40 blocks = 2^42
 * 32-bit outputs (16 TiB of random bits; far above the 2^34 a single step
 * needs). Running past the end is a bug and dies; so do purpose >= 256 and
 * step >= 2^48. The layout is part of the reproducibility contract: changing it
 * changes every stream (validation/unit/test_rng.c pins it).
 *
 * Consumption is fixed per call so positions can be computed: rng_u32,
 * rng_uniform and rng_below's first try take 1 output; rng_u64,
 * rng_uniform_double, rng_normal and rng_normal2 take 2. rng_below takes one
 * more output per rejection (probability < n / 2^32 each). */
#ifndef NEBULA_RNG_H
#define NEBULA_RNG_H

#include <stdint.h>

#include "log.h"

/* The purposes of random numbers in Nebula. Each one is its own stream family,
 * so adding dropout to a model does not shift the data order or the init. New
 * purposes are added at the end (values are part of the stream layout); any
 * value < RNG_PURPOSE_LIMIT may be passed to rng_init. */
typedef enum rng_purpose {
    RNG_PURPOSE_INIT = 0,     /* parameter initialisation */
    RNG_PURPOSE_DATA,         /* data order: shuffles, sampling */
    RNG_PURPOSE_DROPOUT,      /* dropout masks */
    RNG_PURPOSE_MASK,         /* masking (e.g. masked-token objectives) */
    RNG_PURPOSE_AUGMENT,      /* data augmentation */
    RNG_PURPOSE_DGC,          /* deep gradient compression sampling */
    RNG_PURPOSE_TEST,         /* tests and benchmarks */
    RNG_PURPOSE_SYNTHETIC,    /* synthetic data sets: content as a function of (seed, sample) */
    RNG_PURPOSE_GENERATE,     /* text generation: the draw of each new token (nn/sampler.h) */
    RNG_PURPOSE_FED,          /* federated learning: client sampling, partitions, DP noise (fed/) */
    RNG_PURPOSE_COUNT,        /* number of purposes defined above */
} rng_purpose;

#define RNG_PURPOSE_LIMIT   256u                     /* purpose must be below this (8 bits) */
#define RNG_STEP_LIMIT      (UINT64_C(1) << 48)      /* step must be below this (48 bits) */
#define RNG_STREAM_LEN      (UINT64_C(1) << 42)      /* 32-bit outputs per stream (2^40 blocks) */

/* The Philox4x32-10 block function: out = philox(ctr, key). Pure; out may alias ctr. */
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A stream. Plain data: copy it to fork a stream at the same position. The
 * buffer is a cache of philox(counter(buf_block), key) and is never needed to
 * reproduce a number; checkpoints store rng_state (rng_save) instead. */
typedef struct rng {
    uint64_t seed;       /* run seed, the Philox key {low word, high word} */
    uint64_t step;       /* step (or any index) of the stream, < RNG_STEP_LIMIT */
    uint64_t pos;        /* index of the next 32-bit output in the stream, <= RNG_STREAM_LEN */
    uint64_t buf_block;  /* block (pos / 4) whose output is in buf; UINT64_MAX when none */
    uint32_t rank;       /* rank (or any 32-bit stream id) of the stream */
    uint32_t purpose;    /* rng_purpose or another value < RNG_PURPOSE_LIMIT */
    uint32_t buf[4];     /* philox4x32_10 output of block buf_block */
} rng;

/* Everything that identifies a stream position: a fixed-layout 32-byte struct
 * without padding, meant to be written as-is into a checkpoint (host byte order). */
typedef struct rng_state {
    uint64_t seed;       /* as in rng */
    uint64_t step;       /* as in rng */
    uint64_t pos;        /* index of the next 32-bit output */
    uint32_t rank;       /* as in rng */
    uint32_t purpose;    /* as in rng */
} rng_state;

/* Starts the stream (seed, rank, purpose, step) at position 0. Dies on
 * purpose >= RNG_PURPOSE_LIMIT or step >= RNG_STEP_LIMIT. */
void rng_init(rng *r, uint64_t seed, uint32_t rank, uint32_t purpose, uint64_t step);

/* 32 uniform random bits; one output. */
uint32_t rng_u32(rng *r);
/* 64 uniform random bits; two outputs, the first is the low half. */
uint64_t rng_u64(rng *r);
/* Uniform on [0, 1) in steps of 2^-24 (the top 24 bits of one output). */
float rng_uniform(rng *r);
/* Uniform on [0, 1) in steps of 2^-53 (the top 53 bits of rng_u64). */
double rng_uniform_double(rng *r);
/* Standard normal by Box–Muller from two outputs, computed in double and
 * rounded to float. Returns the cosine branch and drops the sine branch, so
 * no value is cached between calls: each call takes exactly two outputs and
 * rng_skip(r, 2 * k) skips k normals. |z| <= sqrt(64 ln 2) ~ 6.66. */
float rng_normal(rng *r);
/* Both Box–Muller branches of the same two outputs: *z0 equals what
 * rng_normal would return, *z1 is the independent sine branch. */
void rng_normal2(rng *r, float *z0, float *z1);
/* Uniform integer on [0, n), exactly unbiased (Lemire, "Fast random integer
 * generation in an interval", ACM TOMACS 2019). Dies on n == 0. */
uint32_t rng_below(rng *r, uint32_t n);
/* Moves the stream n outputs ahead in O(1), as if n rng_u32 calls were made.
 * Dies if that passes RNG_STREAM_LEN. */
void rng_skip(rng *r, uint64_t n);

/* The stream and position of r, to store in a checkpoint. */
rng_state rng_save(const rng *r);
/* Puts r at the stored position. A state that no rng can have (a corrupt
 * checkpoint) is refused with STATUS_CORRUPT and r is left untouched. */
status rng_restore(rng *r, const rng_state *st);

/* The conversions behind rng_uniform and rng_uniform_double, shared with
 * vectorised and GPU code so every path maps bits to floats the same way. */
static inline float rng_u32_to_float(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }
static inline double rng_u64_to_double(uint64_t x) { return (double)(x >> 11) * 0x1p-53; }

#endif
