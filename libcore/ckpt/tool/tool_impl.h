/* tool_impl — shared inside ckpt/tool: the offline commands' helpers over the
 * checkpoint module's internals. Never included from apps/. */
#ifndef NEBULA_CKPT_TOOL_IMPL_H
#define NEBULA_CKPT_TOOL_IMPL_H

#include "ckpt/ckpt_impl.h"
#include "offline.h"

/* ckpt_inspect.c — one row of blob d of the open file f, checked against its
 * row_checksums: STATUS_CORRUPT with why when it cannot be read or does not match. */
status ckpt_blob_row_read(hid_t f, const ckpt_dataset *d, hsize_t row, void *dst, char *why);

/* ckpt_reshard.c — where a rewrite of cat goes: out_root, or (NULL) the directory that holds the
 * checkpoint, whose name must then be step_N of its step. STATUS_INPUT logged. */
status ckpt_out_root(const ckpt_catalog *cat, const char *out_root, char *root);

#endif
