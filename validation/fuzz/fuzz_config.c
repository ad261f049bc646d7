/* fuzz_config — libFuzzer harness of the config parser: any bytes as a file to
 * config_load_file over a schema with every value type. A refusal must leave the
 * config as it was, and a file with a NUL byte must be refused; an accepted file must dump to text that loads back (into the
 * defaults) to the same dump, the round trip checkpoints rely on. Built by `make fuzz`
 * with libFuzzer, ASan and UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "base/config.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const config_key fuzz_schema[] = {
    { "train", "steps", CONFIG_TYPE_INT, "10", .min = 1, .max = 1e9, .help = "int, bounded" },
    { "train", "seed", CONFIG_TYPE_INT, "0", .help = "int, unbounded" },
    { "train", "lr", CONFIG_TYPE_FLOAT, "3e-4", .min = 0, .max = 1, .help = "float, bounded" },
    { "train", "clip", CONFIG_TYPE_FLOAT, "1.0", .min = 0, .max = INFINITY, .help = "float, one side" },
    { "train", "async", CONFIG_TYPE_BOOL, "false", .help = "bool" },
    { "train", "run_dir", CONFIG_TYPE_STRING, "", .help = "string" },
    { "optim", "name", CONFIG_TYPE_ENUM, "adamw", .choices = "sgd|adamw|auto", .help = "enum" },
    { "data", "shard", CONFIG_TYPE_SIZE, "256M", .min = 1, .max = INFINITY, .help = "size" },
    { "data", "train", CONFIG_TYPE_STRING, "synthetic", .help = "string with a default" },
};
#define FUZZ_NKEYS ((int)(sizeof fuzz_schema / sizeof fuzz_schema[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static config cfg, before, back;  /* ~100 KiB each: not on the stack */
    static char dump[65536], dump2[65536];
    config_init(&cfg, fuzz_schema, FUZZ_NKEYS);
    before = cfg;
    char path[64];
    int fd = fuzz_input_open(data, size, path, sizeof path);
    status st = config_load_file(&cfg, path);
    close(fd);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "config_load_file of a readable file is OK or STATUS_INPUT");
    if (st != STATUS_OK) {
        fuzz_require(!memcmp(&cfg, &before, sizeof cfg), "a refused file leaves the config unchanged");
        return 0;
    }
    /* libinih ends a line at a NUL: such a file was once half-read and accepted */
    fuzz_require(!memchr(data, '\0', size), "a file with a NUL byte is refused");
    for (size_t i = 0; i < size; i++)
        fuzz_require(data[i] >= 0x20 ? data[i] != 0x7f : data[i] == '\t' || data[i] == '\r' || data[i] == '\n',
                     "a file with a control character is refused (binary)");
    size_t n = config_dump(&cfg, dump, sizeof dump);
    fuzz_require(n < sizeof dump, "the dump fits");
    config_init(&back, fuzz_schema, FUZZ_NKEYS);
    fuzz_require(config_load_string(&back, dump, "dump") == STATUS_OK, "the dump of an accepted file loads");
    size_t n2 = config_dump(&back, dump2, sizeof dump2);
    fuzz_require(n == n2 && !memcmp(dump, dump2, n), "the dump loads back to the same values");
    return 0;
}
