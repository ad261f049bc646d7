/* fuzz_control — libFuzzer harness of the elastic control-file parser: any bytes to
 * train_control_parse. An accepted file must give values in their ranges, and written
 * back as key=value lines parse to the same request; a refused one must name a line
 * of the input (or 0) and a reason. Built by `make fuzz` with libFuzzer, ASan and
 * UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "train/control/control.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The same bytes as a hot-reload request: accepted ones hold a version, undo xor keys
 * (each once, SECTION.KEY), and written back parse to themselves. */
static void fuzz_reload(const uint8_t *data, size_t size)
{
    static train_reload_request req, again;
    int line;
    char why[256] = "";
    if (train_reload_parse((const char *)data, size, &req, &line, why, sizeof why) != 0) {
        fuzz_require(why[0] != '\0' && !req.version && !req.nsets && req.at_step == -1, "a refusal leaves no request");
        return;
    }
    fuzz_require(req.version >= 1 && req.version <= TRAIN_RELOAD_MAX_VERSION, "version in range");
    fuzz_require(req.undo != (req.nsets > 0), "undo or keys");
    static char text[TRAIN_CONTROL_MAX_BYTES * 2];
    size_t n = (size_t)snprintf(text, sizeof text, "version=%ld\n", req.version);
    if (req.undo) n += (size_t)snprintf(text + n, sizeof text - n, "undo=true\n");
    if (req.at_step >= 0) n += (size_t)snprintf(text + n, sizeof text - n, "at_step=%ld\n", req.at_step);
    for (int i = 0; i < req.nsets; i++) {
        fuzz_require(strchr(req.key[i], '.') && !strpbrk(req.value[i], "#;\n"), "a key has a section, a value no comment");
        n += (size_t)snprintf(text + n, sizeof text - n, "%s=%s\n", req.key[i], req.value[i]);
    }
    fuzz_require(n < sizeof text, "the request fits its text");
    if (n > TRAIN_CONTROL_MAX_BYTES) return;  /* "k=v" is shorter than " k = v ", not always */
    fuzz_require(train_reload_parse(text, n, &again, &line, why, sizeof why) == 0 && again.version == req.version &&
                 again.nsets == req.nsets && again.undo == req.undo && again.at_step == req.at_step,
                 "the request written back parses to itself");
    for (int i = 0; i < req.nsets; i++)
        fuzz_require(!strcmp(again.key[i], req.key[i]) && !strcmp(again.value[i], req.value[i]), "same assignments");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reload(data, size);
    train_control_request req, again;
    int line;
    char why[256] = "";
    int rc = train_control_parse((const char *)data, size, &req, &line, why, sizeof why);
    if (rc != 0) {
        size_t lines = 1;
        for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
        fuzz_require(line >= 0 && (size_t)line <= lines, "a refusal names a line of the input");
        fuzz_require(why[0] != '\0' && memchr(why, '\0', sizeof why), "a refusal gives a reason");
        fuzz_require(!req.world && !req.global_batch && !req.rule[0], "a refusal leaves no request");
        return 0;
    }
    fuzz_require(line == 0, "an accepted file names no line");
    /* a NUL once ended the file for libinih: binary garbage read as an empty file */
    fuzz_require(!memchr(data, '\0', size), "a file with a NUL byte is refused");
    fuzz_require(req.world >= 0 && req.world <= TRAIN_CONTROL_MAX_WORLD, "world in range");
    fuzz_require(req.global_batch >= 0 && req.global_batch <= TRAIN_CONTROL_MAX_BATCH, "global_batch in range");
    fuzz_require(!req.rule[0] || !strcmp(req.rule, "linear") || !strcmp(req.rule, "sqrt") || !strcmp(req.rule, "none"),
                 "lr_rule is one of the rules");
    char text[128];
    int n = snprintf(text, sizeof text, "%s%ld\n%s%ld\n%s%s\n", req.world ? "world=" : "#", req.world,
                     req.global_batch ? "global_batch=" : "#", req.global_batch, req.rule[0] ? "lr_rule=" : "#",
                     req.rule);
    fuzz_require(n > 0 && (size_t)n < sizeof text, "the request fits its text");
    rc = train_control_parse(text, (size_t)n, &again, &line, why, sizeof why);
    fuzz_require(rc == 0 && again.world == req.world && again.global_batch == req.global_batch &&
                 !strcmp(again.rule, req.rule), "the request written back parses to itself");
    return 0;
}
