/* prepare — nebula-train prepare: text files into token files (libcore/data), no MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "data/data.h"
#include "train_app.h"

/* nebula-train prepare OUT_DIR FILE... [--val-fraction F]: no MPI. */
int prepare_main(int argc, char **argv)
{
    double frac = 0.1;
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    const char *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--val-fraction")) {
            char *end = NULL;
            frac = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || frac < 0 || frac >= 1) {
                log_error0("--val-fraction needs a number in [0, 1), got '%s'", i + 1 < argc ? argv[i + 1] : "");
                free(files);
                return 2;
            }
            i++;
        } else if (!out) {
            out = argv[i];
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!out || nfiles == 0) {
        log_error0("prepare needs an output directory and at least one text file\n%s", train_usage);
        free(files);
        return 2;
    }
    char train[4200], val[4200];
    snprintf(train, sizeof train, "%s/train.bin", out);
    snprintf(val, sizeof val, "%s/val.bin", out);
    /* the output rule (base/path.h) before the directory is created: neither may be an
     * input, a device or a run's file, nor inside a checkpoint */
    status st = path_output_check(train, "prepare", files, nfiles);
    if (st == STATUS_OK) st = path_output_check(val, "prepare", files, nfiles);
    if (st == STATUS_OK && path_mkdirs(out, "output directory") != STATUS_OK) st = STATUS_IO;
    if (st == STATUS_OK) st = data_prepare_text(files, nfiles, train, val, frac);
    free(files);
    if (st == STATUS_OK) printf("wrote %s and %s\n", train, val);
    return status_exit_code(st);
}

