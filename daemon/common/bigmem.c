/* SPDX-License-Identifier: MIT */
/* bigmem.c — large buffers, 2 MiB-aligned and advised to use huge pages (bigmem.h). */
#define _GNU_SOURCE
#include "bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_round(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	return (size + page - 1) / page * page;
}

void *bn_big_alloc(size_t size)
{
	if (size < BN_BIGMEM_HUGE_BYTES)
		return aligned_alloc(64, (size + 63) / 64 * 64);
	size_t len = page_round(size), span = len + BN_BIGMEM_HUGE_BYTES;
	uint8_t *area = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return NULL;
	uint8_t *p = (uint8_t *)(((uintptr_t)area + BN_BIGMEM_HUGE_BYTES - 1) &
				 ~(uintptr_t)(BN_BIGMEM_HUGE_BYTES - 1));
	if (p > area)
		munmap(area, (size_t)(p - area));
	if (p + len < area + span)
		munmap(p + len, (size_t)(area + span - (p + len)));
	/* Advice only: a kernel without transparent huge pages gives 4 KiB pages. */
	madvise(p, len, MADV_HUGEPAGE);
	return p;
}

void bn_big_free(void *p, size_t size)
{
	if (!p)
		return;
	if (size < BN_BIGMEM_HUGE_BYTES)
		free(p);
	else
		munmap(p, page_round(size));
}
