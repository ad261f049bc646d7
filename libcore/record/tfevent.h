/* tfevent — a TensorBoard event-file writer: scalars and histograms, nothing else.
 *
 * An event file is a sequence of TFRecords (TensorFlow's record_writer.cc):
 *   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
 *   data[length] | uint32 masked CRC-32C of the data,
 * with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each record's data is one
 * protobuf `Event` (tensorboard/compat/proto/event.proto), of which this writer encodes
 * exactly the fields it needs, by hand:
 *   Event          { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary        { repeated Value value = 1; }
 *   Summary.Value  { string tag = 1; float simple_value = 2; HistogramProto histo = 5; }
 *   HistogramProto { double min = 1; double max = 2; double num = 3; double sum = 4; double sum_squares = 5;
 *                    repeated double bucket_limit = 6 [packed]; repeated double bucket = 7 [packed]; }
 * The first record of a file is an Event with file_version "brain.Event:2" (what
 * TensorBoard's loader looks for). A file is named events.out.tfevents.<unix seconds,
 * 10 digits>.<host>.<pid>.<n> (n: the first number that makes the name new), so one
 * directory may hold a file per launch and TensorBoard reads them in name order.
 *
 * The one design decision: everything is sized at open. Records are encoded into a
 * scratch buffer whose nested lengths are computed before the bytes are written (one
 * sizing pass, one writing pass), and appended to an output buffer that goes to the
 * file with write(2) when it fills or at tfevent_flush; no record allocates. */
#ifndef NEBULA_TFEVENT_H
#define NEBULA_TFEVENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"

#define TFEVENT_TAG_MAX      255   /* bytes of a tag (longer tags are refused) */
#define TFEVENT_HISTO_MAX    4096  /* buckets a histogram may have */
/* TensorFlow's default histogram (histogram.cc, as TensorBoard's summaries use it):
 * right edges -DBL_MAX, -v[773] .. -v[0], 0, v[0] .. v[773], DBL_MAX with v[0] = 1e-12,
 * v[k+1] = 1.1 v[k] while below 1e20: 1551 buckets of ~10% width on both signs. */
#define TFEVENT_DEFAULT_BUCKETS 1551

typedef struct tfevent tfevent;

/* One histogram as HistogramProto holds it. Bucket k counts the values v with
 * limit[k-1] <= v < limit[k] (the first from -infinity); empty runs of buckets are
 * merged when the record is written, as TensorFlow's EncodeToProto does, so a dense
 * array of counts costs only its occupied buckets in the file. */
typedef struct tfevent_histo {
    double min, max;           /* of the values */
    double num;                /* how many values: the sum of count[] */
    double sum, sum_squares;   /* of the values */
    int n;                     /* buckets, 1 .. TFEVENT_HISTO_MAX */
    const double *limit;       /* [n] right edges, ascending */
    const double *count;       /* [n] values in each bucket */
} tfevent_histo;

/* Creates dir (and its parents) and a new event file in it, writes the file_version
 * record and returns the writer in *out. STATUS_IO (logged, naming the path) when the
 * directory or the file cannot be made; STATUS_NOMEM when the buffers cannot be allocated. */
status tfevent_open(tfevent **out, const char *dir);
/* The file's path. */
const char *tfevent_path(const tfevent *w);
/* A scalar (stored as float32, as TensorBoard's simple_value is) at step. STATUS_INPUT
 * for an empty or over-long tag; STATUS_IO when the output buffer had to be written and
 * that failed (logged once per streak of failures). */
status tfevent_scalar(tfevent *w, int64_t step, const char *tag, double value);
/* A histogram at step; the same statuses, and STATUS_INPUT for n outside 1 .. TFEVENT_HISTO_MAX. */
status tfevent_histogram(tfevent *w, int64_t step, const char *tag, const tfevent_histo *h);
/* Writes what is buffered to the file (no fsync: TensorBoard reads a live file). */
status tfevent_flush(tfevent *w);
/* Flushes, closes and frees (NULL: no-op); the flush's or close's failure is returned. */
status tfevent_close(tfevent *w);

/* TensorFlow's default bucket edges into limit[TFEVENT_DEFAULT_BUCKETS]; returns how many. */
int tfevent_default_limits(double *limit);
/* The bucket of v among limit[0..n) (ascending right edges): the first k with v <
 * limit[k], else n - 1 (also for NaN). guess: a first try (any value), which makes the
 * search a few steps when it is close. */
int tfevent_bucket(const double *limit, int n, double v, int guess);

/* ---- the framing, exposed for tests ---- */
/* CRC-32C (Castagnoli, iSCSI): 0xE3069283 for "123456789". */
uint32_t tfevent_crc32c(const void *p, size_t n);
/* TFRecord's mask of a CRC. */
uint32_t tfevent_mask_crc(uint32_t crc);
/* The protobuf varint of v into out (at most 10 bytes); returns the bytes written. */
size_t tfevent_varint(uint8_t *out, uint64_t v);

#endif
