/* SPDX-License-Identifier: MIT */
/*
 * bigmem.h — the weights' large buffers in huge pages where the kernel offers them.
 *
 * A start that repacks writes every byte of the repacked weights into fresh memory, and a VM
 * charges for the first touch of each page: measured on a 2-vCPU VM, 0.3 GB/s with 4 KiB
 * pages and twice that with 2 MiB ones (bench-start prints this machine's rates). With
 * transparent huge pages in "madvise" mode, the common default, only memory that asks for
 * them (MADV_HUGEPAGE) gets them. Buffers of a huge page or more are mapped 2 MiB-aligned and
 * ask; smaller ones come from malloc. Either way 64-byte aligned.
 */
#ifndef BITNETD_BIGMEM_H
#define BITNETD_BIGMEM_H

#include <stddef.h>

#define BN_BIGMEM_HUGE_BYTES ((size_t)2 << 20)

/* size bytes (not zeroed for small sizes), or NULL. */
void *bn_big_alloc(size_t size);
/* p from bn_big_alloc(size), with the same size; NULL is fine. */
void bn_big_free(void *p, size_t size);

#endif /* BITNETD_BIGMEM_H */
