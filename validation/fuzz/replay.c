/* replay — the main() libFuzzer would provide, for make check: runs a
 * harness's LLVMFuzzerTestOneInput once on every file named, or in a directory
 * named, under ASan and UBSan (built with $(CC), no clang needed). A crash or
 * sanitizer report ends the program non-zero; so does a missing path or finding
 * no input at all, so a lost corpus cannot pass as a clean one.
 *
 *   replay_<target> DIR_OR_FILE...   (built from replay.c + fuzz_<target>.c) */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One input, in a buffer of exactly its size so ASan sees any overread. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
    if (!data || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) { perror(path); exit(1); }
    fclose(f);
    printf("replay %s (%ld bytes)\n", path, n);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, (size_t)n);
    free(data);
    return 1;
}

static int replay_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) { perror(path); return -1; }
    if (!S_ISDIR(sb.st_mode)) return replay_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort), count = 0;
    if (n < 0) { perror(path); return -1; }
    for (int i = 0; i < n; i++) {
        char sub[4096];
        if (names[i]->d_name[0] != '.' && count >= 0) {
            snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
            int r = replay_file(sub);
            count = r < 0 ? -1 : count + r;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int n = replay_path(argv[i]);
        if (n < 0) return 1;
        total += n;
    }
    printf("%s: %d inputs replayed without a crash or sanitizer report\n", argv[0], total);
    return total > 0 ? 0 : 1;
}
