/* fed/part — which client holds which training sample: the partitions of a federated
 * simulation, IID, label-skewed by a Dirichlet draw (Hsu, Qi, Brown, "Measuring the
 * Effects of Non-Identical Data Distribution for Federated Visual Classification",
 * arXiv 1909.06335, 2019; the per-class form of Yurochkin et al., ICML 2019, the usual
 * non-IID benchmark split), or by whole source files (text corpora: one author or
 * document per client).
 *
 * The one design decision: a partition is a pure function of its inputs and a seed
 * (counter streams of base/rng.h under RNG_PURPOSE_FED, stream ids FED_PART_STREAM_*,
 * the step the class or 0). Every rank computes the same owner array without
 * communication, and a resumed run recomputes it instead of storing it.
 *
 * owner (nsamples) int32 receives a client in [0, clients) per sample. Every client gets
 * at least one sample (the partitions refuse inputs where that is impossible). Setup
 * functions: they allocate O(nsamples) work space and return STATUS_NOMEM if they
 * cannot; STATUS_INPUT names the bad value (logged). */
#ifndef NEBULA_FED_PART_H
#define NEBULA_FED_PART_H

#include <stdint.h>

#include "base/log.h"

/* Stream ids (the rng's 32-bit rank field) the partitions draw from under
 * RNG_PURPOSE_FED. Ids of clients and of the engine's own draws stay below them. */
#define FED_PART_STREAM_IID        0xFFFFFF00u  /* step 0: the shuffle of the round-robin deal */
#define FED_PART_STREAM_DIRICHLET  0xFFFFFF01u  /* step = class: the class's proportions */
#define FED_PART_STREAM_SHUFFLE    0xFFFFFF02u  /* step = class: the order of the class's samples */
#define FED_PART_STREAM_SOURCE     0xFFFFFF03u  /* step 0: the order of the source files */

/* IID: a seeded permutation of the samples dealt round-robin, so client sizes differ by
 * at most one (drawn as the shuffle of the dealt owner list i % clients, which is the
 * same distribution). STATUS_INPUT for clients < 1 or clients > nsamples. */
status fed_part_iid(int32_t *owner, int64_t nsamples, int clients, uint64_t seed);

/* Label skew: for each class c, proportions q_c over the clients from
 * Dirichlet(alpha, ..., alpha) (alpha -> 0: each class on few clients; alpha -> inf:
 * uniform), the class's samples shuffled and cut at the cumulative proportions:
 * client j gets floor(n_c Q_j) - floor(n_c Q_{j-1}) of them (Q_j = q_0 + .. + q_j, the
 * last client the rest). labels (nsamples) in [0, classes).
 *
 * The Gamma draws behind the Dirichlet are Marsaglia and Tsang's ("A Simple Method for
 * Generating Gamma Variables", ACM TOMS 2000), with the boost G(a) = G(a + 1) U^(1/a) for
 * a < 1, kept in logarithms and normalised by the largest, so a tiny alpha cannot
 * underflow every draw to 0.
 *
 * No client is left empty: after all classes are cut, each empty client in order takes
 * one sample from the client that then holds the most (the lowest id on ties), out of
 * that client's largest class (the lowest class on ties). The donor keeps at least one
 * (it holds >= 2 while some client is empty and nsamples >= clients).
 *
 * STATUS_INPUT naming the value for alpha not > 0 (or not finite), classes < 1,
 * clients < 1, clients > nsamples, or a label out of range (its sample index). */
status fed_part_dirichlet(int32_t *owner, const int32_t *labels, int64_t nsamples, int classes, int clients,
                          double alpha, uint64_t seed);

/* Whole source files to clients: the sources that hold samples are shuffled and dealt
 * round-robin (client sizes in files differ by at most one), and every sample goes
 * where its file went. source_of_sample (nsamples) in [0, nsources). STATUS_INPUT for
 * fewer sources (or fewer non-empty ones) than clients, clients < 1, or a source id out
 * of range. */
status fed_part_by_source(int32_t *owner, const int64_t *source_of_sample, int64_t nsamples, int64_t nsources,
                          int clients, uint64_t seed);

/* counts (clients) = the number of samples each client owns, of owner (n). Dies on an
 * owner out of [0, clients) (a partition never makes one). */
void fed_part_counts(const int32_t *owner, int64_t n, int clients, int64_t *counts);

#endif
