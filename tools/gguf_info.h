/* SPDX-License-Identifier: MIT */
/*
 * gguf_info.h — `bitnet-model info`.
 */
#ifndef BITNET_GGUF_INFO_H
#define BITNET_GGUF_INFO_H

/* Prints the file's architecture, GGUF version and alignment, every metadata value (strings
 * with control bytes escaped, floats in their shortest exact form) and every tensor (name,
 * type, dims, bytes), with the totals, as key=value lines. 0, or 1 after saying why the file
 * could not be read. */
int gguf_info_print(const char *path);

#endif /* BITNET_GGUF_INFO_H */
