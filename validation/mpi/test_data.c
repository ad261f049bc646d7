/* test_data — libcore/data under mpirun: every rank opens the same token file and
 * HDF5 image set itself (concurrent read-only opens), reads its own micro-batches,
 * and the union gathered on rank 0 must be, step by step and in (rank, micro-step)
 * order, exactly what one process reading the whole global batch gets: the same
 * samples, token windows and augmented image bits. Loader states agree on every
 * rank, and a corrupt file fails on every rank with STATUS_INPUT.
 * Usage: test_data [--ranks-per-node N] */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "base/runtime.h"

enum { B = 2, A = 2, T = 16, STEPS = 25, NIMG = 53, IH = 6, IW = 8 };

static int failures;

/* Every rank agrees on the verdict. */
static void check(const runtime *rt, bool ok, const char *what)
{
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, rt->world);
    if (rt->rank == 0) printf("%s - %s\n", all_ok ? "ok" : "FAIL", what);
    if (!all_ok) failures++;
}

/* Rank 0's scratch files: a Nebula token file (token i = i) and an HDF5 image set. */
static void write_files(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tok.bin", dir);
    const uint64_t count = 4001;
    const uint32_t version = 1, vocab = 4096, width = 2, reserved = 0;
    FILE *f = fopen(path, "wb");
    fwrite(DATA_NEBULA_MAGIC, 1, 8, f);
    fwrite(&version, 4, 1, f);
    fwrite(&vocab, 4, 1, f);
    fwrite(&count, 8, 1, f);
    fwrite(&width, 4, 1, f);
    fwrite(&reserved, 4, 1, f);
    for (uint64_t i = 0; i < count; i++) {
        uint16_t v = (uint16_t)i;
        fwrite(&v, 2, 1, f);
    }
    fclose(f);

    snprintf(path, sizeof path, "%s/img.h5", dir);
    static uint8_t px[NIMG][IH][IW][3];
    int32_t labels[NIMG];
    for (int n = 0; n < NIMG; n++) {
        labels[n] = n % 10;
        for (int y = 0; y < IH; y++)
            for (int x = 0; x < IW; x++)
                for (int c = 0; c < 3; c++) px[n][y][x][c] = (uint8_t)(31 * n + 17 * y + 5 * x + 80 * c);
    }
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = { NIMG, IH, IW, 3 }, ldim[1] = { NIMG };
    hid_t s4 = H5Screate_simple(4, dims, NULL), s1 = H5Screate_simple(1, ldim, NULL);
    hid_t di = H5Dcreate2(file, "images", H5T_STD_U8LE, s4, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dl = H5Dcreate2(file, "labels", H5T_STD_I32LE, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(di, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px);
    H5Dwrite(dl, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels);
    H5Dclose(di);
    H5Dclose(dl);
    H5Sclose(s4);
    H5Sclose(s1);
    H5Fclose(file);

    snprintf(path, sizeof path, "%s/bad.bin", dir);
    f = fopen(path, "wb");
    fwrite("NOTATOKENFILE___", 1, 16, f);
    fclose(f);
}

static data_config cfg_for(const char *path, bool images, int b, int accum, int rank, int size)
{
    data_config c = { .path = path, .images = images, .vocab_size = 4096, .T = T, .H = IH, .W = IW,
                      .num_classes = 10, .pad_crop = 2, .flip = true, .mean = { 0.5f, 0.5f, 0.5f },
                      .std = { 0.25f, 0.25f, 0.25f }, .micro_batch = b, .accum = accum, .dp_rank = rank,
                      .dp_size = size, .seed = 7, .shuffle = true };
    return c;
}

/* Runs STEPS steps on every rank, gathers each step on rank 0 and compares it with
 * one loader reading the whole global batch. `per` values per sample. */
static void compare_steps(const runtime *rt, const char *path, bool images, const char *what)
{
    const int GB = B * A * rt->size, per = images ? 3 * IH * IW : T;
    data_config mine = cfg_for(path, images, B, A, rt->rank, rt->size);
    data_loader *d = NULL;
    status st = data_open(&d, &mine);
    char line[160];
    snprintf(line, sizeof line, "%s: every rank opens the file", what);
    check(rt, st == STATUS_OK, line);
    if (st != STATUS_OK) return;
    data_loader *ref = NULL;
    data_config whole = cfg_for(path, images, GB, 1, 0, 1);
    if (rt->rank == 0 && data_open(&ref, &whole) != STATUS_OK) MPI_Abort(rt->world, 1);

    float *fl = malloc(sizeof(float) * (size_t)(B * A * per)), *fall = malloc(sizeof(float) * (size_t)(GB * per));
    float *fref = malloc(sizeof(float) * (size_t)(GB * per));
    int32_t *il = malloc(sizeof(int32_t) * (size_t)(B * A * per)), *iall = malloc(sizeof(int32_t) * (size_t)(GB * per));
    int32_t *iref = malloc(sizeof(int32_t) * (size_t)(GB * per));
    bool same = true, states = true;
    for (int s = 0; s < STEPS; s++) {
        for (int a = 0; a < A; a++) {
            if (images) st = data_next_images(d, a, fl + (size_t)a * B * per, NULL);
            else st = data_next_tokens(d, a, il + (size_t)a * B * per, NULL);
            same &= st == STATUS_OK;
        }
        if (images) MPI_Gather(fl, B * A * per, MPI_FLOAT, fall, B * A * per, MPI_FLOAT, 0, rt->world);
        else MPI_Gather(il, B * A * per, MPI_INT32_T, iall, B * A * per, MPI_INT32_T, 0, rt->world);
        if (rt->rank == 0) {
            if (images) {
                data_next_images(ref, 0, fref, NULL);
                same &= !memcmp(fall, fref, sizeof(float) * (size_t)(GB * per));
            } else {
                data_next_tokens(ref, 0, iref, NULL);
                same &= !memcmp(iall, iref, sizeof(int32_t) * (size_t)(GB * per));
            }
            data_advance(ref);
        }
        data_advance(d);
        data_state here = data_get_state(d);
        uint64_t v[2] = { here.epoch, here.cursor }, lo[2], hi[2];
        MPI_Allreduce(v, lo, 2, MPI_UINT64_T, MPI_MIN, rt->world);
        MPI_Allreduce(v, hi, 2, MPI_UINT64_T, MPI_MAX, rt->world);
        states &= lo[0] == hi[0] && lo[1] == hi[1];
    }
    snprintf(line, sizeof line, "%s: %d ranks x %d x %d read, step by step, the bits 1 process x %d reads "
             "(%d steps)", what, rt->size, A, B, GB, STEPS);
    check(rt, same, line);
    snprintf(line, sizeof line, "%s: the loader state is the same on every rank", what);
    check(rt, states, line);
    free(fl);
    free(fall);
    free(fref);
    free(il);
    free(iall);
    free(iref);
    data_free(ref);
    data_free(d);
}

/* Heterogeneous shares (data_set_share): unequal parts of every global batch, one of
 * them empty, b = 2 with partial last micro-batches. Gathered in rank order they must be
 * the whole global batch, step by step: disjoint and covering, in order. */
static void compare_shares(const runtime *rt, const char *path)
{
    static const int shares[4][4] = { { 4 }, { 7, 1 }, { 5, 0, 7 }, { 7, 0, 3, 6 } };
    const int GB = B * A * rt->size, n = rt->size <= 4 ? shares[rt->size - 1][rt->rank] : B * A;
    int counts[4], displs[4], first = 0;
    for (int r = 0; r < rt->size && r < 4; r++) {
        counts[r] = shares[rt->size - 1][r] * T, displs[r] = first * T, first += shares[rt->size - 1][r];
    }
    int mine_first = displs[rt->size <= 4 ? rt->rank : 0] / T;
    data_config mine = cfg_for(path, false, B, A, rt->rank, rt->size);
    data_loader *d = NULL, *ref = NULL;
    data_config whole = cfg_for(path, false, GB, 1, 0, 1);
    if (rt->size > 4 || data_open(&d, &mine) != STATUS_OK || (rt->rank == 0 && data_open(&ref, &whole) != STATUS_OK))
        MPI_Abort(rt->world, 1);
    data_set_share(d, (uint64_t)mine_first, (uint64_t)n);
    int32_t *il = malloc(sizeof(int32_t) * (size_t)(GB * T) + 1), *iall = malloc(sizeof(int32_t) * (size_t)(GB * T));
    int32_t *iref = malloc(sizeof(int32_t) * (size_t)(GB * T));
    bool same = true, sizes = data_micro_batches(d) == (n + B - 1) / B;
    for (int s = 0; s < STEPS; s++) {
        int at = 0;
        for (int a = 0; a < data_micro_batches(d); a++) {
            same &= data_next_tokens(d, a, il + (size_t)at * T, NULL) == STATUS_OK;
            at += data_micro_batch_size(d, a);
        }
        sizes &= at == n;
        MPI_Gatherv(il, n * T, MPI_INT32_T, iall, counts, displs, MPI_INT32_T, 0, rt->world);
        if (rt->rank == 0) {
            data_next_tokens(ref, 0, iref, NULL);
            same &= !memcmp(iall, iref, sizeof(int32_t) * (size_t)(GB * T));
            data_advance(ref);
        }
        data_advance(d);
    }
    char line[200];
    snprintf(line, sizeof line, "tokens, unequal shares (%d of %d samples here, micro-batches of <= %d): gathered in "
             "rank order, step by step, the global batch 1 process reads (%d steps)", n, GB, B, STEPS);
    check(rt, same && sizes, line);
    free(il), free(iall), free(iref);
    data_free(ref);
    data_free(d);
}

int main(int argc, char **argv)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--ranks-per-node") && i + 1 < argc) ro.ranks_per_node = atoi(argv[++i]);
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);

    char dir[200];
    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/nebula-data-mpi-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (rt.rank == 0) {
        if (!mkdtemp(dir)) MPI_Abort(rt.world, 1);
        write_files(dir);
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, rt.world);
    char tok[256], img[256], bad[256];
    snprintf(tok, sizeof tok, "%s/tok.bin", dir);
    snprintf(img, sizeof img, "%s/img.h5", dir);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);

    compare_steps(&rt, tok, false, "tokens");
    compare_steps(&rt, img, true, "HDF5 images, crop + flip");
    if (rt.size <= 4) compare_shares(&rt, tok);

    data_config c = cfg_for(bad, false, B, A, rt.rank, rt.size);
    data_loader *d = NULL;
    st = data_open(&d, &c);
    check(&rt, st == STATUS_INPUT && d == NULL, "a corrupt file: STATUS_INPUT on every rank");

    MPI_Barrier(rt.world);
    if (rt.rank == 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    int f = failures;
    runtime_free(&rt);
    return f ? 1 : 0;
}
