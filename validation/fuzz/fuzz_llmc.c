/* fuzz_llmc — libFuzzer harness of the llm.c model reader: any bytes as a file
 * to llmc_read; an accepted model must have the header's sizes and exactly the
 * file's parameters (abort otherwise). Built by `make fuzz` with libFuzzer, ASan
 * and UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "ckpt/tool/llmc.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_open(data, size, path, sizeof path);
    llmc_model m;
    status st = llmc_read(&m, path);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "llmc_read of a readable file is OK or STATUS_INPUT");
    if (st == STATUS_OK) {
        size_t elt = m.version == LLMC_VERSION_FP32 ? 4 : 2;
        int32_t h[8];
        memcpy(h, data, sizeof h);
        fuzz_require(m.cfg.max_seq_len == h[2] && m.cfg.vocab_size == h[3] && m.cfg.num_layers == h[4] &&
                m.cfg.num_heads == h[5] && m.cfg.channels == h[6] && m.cfg.padded_vocab_size == h[7],
                "the config is the header's");
        fuzz_require(size == 1024 + m.num_params * elt, "the file is the header and the parameters");
        if (m.version == LLMC_VERSION_FP32)
            fuzz_require(memcmp(m.params, data + 1024, m.num_params * 4) == 0, "fp32 parameters are the file's bytes");
        else
            for (size_t i = 0; i < m.num_params; i++) {
                uint32_t bits;
                memcpy(&bits, &m.params[i], sizeof bits);
                fuzz_require(bits == ((uint32_t)data[1024 + 2 * i] << 16 | (uint32_t)data[1025 + 2 * i] << 24),
                        "bf16 parameters are the file's halves, widened");
            }
        llmc_free(&m);
    }
    close(fd);
    return 0;
}
