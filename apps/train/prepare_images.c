/* prepare_images — nebula-train prepare --images DIR --out FILE: a torchvision
 * ImageFolder tree into one HDF5 image set (libcore/data, data_prepare_images), on one
 * process or on every rank of an mpirun. The options are checked before MPI starts,
 * so a usage error is printed once and exits 2 on every rank alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/runtime.h"
#include "data/data.h"
#include "train_app.h"

/* A whole number in [lo, hi] for `flag`, or -1 after the message. */
static int int_arg(const char *flag, const char *v, int lo, int hi)
{
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        log_error0("%s needs a whole number in [%d, %d], got '%s'", flag, lo, hi, v ? v : "");
        return -1;
    }
    return (int)x;
}

static int parse(int argc, char **argv, data_images_options *o)
{
    bool size_given = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--images") && v) {
            o->dir = v;
        } else if (!strcmp(a, "--out") && v) {
            o->out = v;
        } else if (!strcmp(a, "--size")) {
            if ((o->size = int_arg(a, v, 0, 1 << 16)) < 0) return 2;
            size_given = true;
        } else if (!strcmp(a, "--crop")) {
            if ((o->crop = int_arg(a, v, 1, 1 << 14)) < 0) return 2;
        } else if (!strcmp(a, "--timeout")) {
            int t = int_arg(a, v, 0, 1 << 24);
            if (t < 0) return 2;
            o->timeout_s = t;
        } else if (!strcmp(a, "--skip-corrupt")) {
            o->skip_corrupt = true;
            continue;
        } else if (!strcmp(a, "--images") || !strcmp(a, "--out")) {
            log_error0("prepare: %s needs a value (%s)\n%s", a, !strcmp(a, "--out") ? "the HDF5 file to write" :
                       "the folder of class sub-folders", train_usage);
            return 2;
        } else {
            log_error0("prepare --images: unknown argument '%s'\n%s", a, train_usage);
            return 2;
        }
        i++;
    }
    if (!o->dir || !o->out) {
        log_error0("prepare --images needs --images DIR and --out FILE\n%s", train_usage);
        return 2;
    }
    if (!size_given) o->size = (int)((long)o->crop * 256 / 224);  /* torchvision's ImageNet ratio 256 : 224 */
    if (o->size && o->size < o->crop) {
        log_error0("--size %d is smaller than --crop %d: the crop would be padded with black; give --size >= "
                   "--crop, or --size 0 to crop without resizing", o->size, o->crop);
        return 2;
    }
    return 0;
}

int prepare_images_main(int argc, char **argv)
{
    data_images_options o = { .size = 256, .crop = 224, .timeout_s = 600 };
    int code = parse(argc, argv, &o);
    if (code) return runtime_exit_early(code);

    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE, .timeout_s = o.timeout_s };
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    o.progress = rt.rank == 0 && isatty(STDERR_FILENO);
    data_images_result r;
    st = data_prepare_images(&rt, &o, &r);
    if (st == STATUS_OK && rt.rank == 0) {
        printf("prepare: wrote %s: %llu images of %dx%d (resize %d), %llu classes; skipped %llu other files, "
               "%llu corrupt; %.2f s, %.1f images/s on %d rank%s\n",
               o.out, (unsigned long long)r.images, o.crop, o.crop, o.size, (unsigned long long)r.classes,
               (unsigned long long)r.other, (unsigned long long)r.corrupt, r.seconds,
               r.seconds > 0 ? (double)r.images / r.seconds : 0.0, rt.size, rt.size > 1 ? "s" : "");
        fflush(stdout);
    }
    if (runtime_must_abort(st)) runtime_exit(&rt, st);
    runtime_free(&rt);
    return status_exit_code(st);
}
