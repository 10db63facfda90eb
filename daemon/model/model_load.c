/* SPDX-License-Identifier: MIT */
/* model_load.c — the loader's shared helpers (model_load.h). */
#include "model_load.h"
#include "common/bigmem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void bn_ld_run_tasks(struct bn_pool *pool, uint32_t n, bn_pool_fn fn, void *ctx)
{
	if (pool) {
		bn_pool_run(pool, n, fn, ctx);
		return;
	}
	for (uint32_t t = 0; t < n; t++)
		fn(ctx, t);
}

uint32_t bn_ld_run_threads(const struct bn_pool *pool)
{
	return pool ? bn_pool_threads(pool) : 1;
}

int bn_ld_fail(struct loader *ld, const char *fmt, ...)
{
	int n = snprintf(ld->err, BN_MODEL_ERR_LEN, "%s: ", ld->path);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ld->err + n, BN_MODEL_ERR_LEN - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

int bn_ld_oom(struct loader *ld, const struct bn_gguf_tensor *t)
{
	return bn_ld_fail(ld, "out of memory repacking '%.*s'", (int)t->name.len, t->name.ptr);
}

int bn_ld_cache_mismatch(struct loader *ld, const struct bn_gguf_tensor *t)
{
	return bn_ld_fail(ld, "the weights cache does not hold '%.*s' as this file has it",
			  (int)t->name.len, t->name.ptr);
}

void *bn_model_own(struct bn_model *m, size_t size)
{
	if (m->n_owned == m->cap_owned) {
		uint32_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
		struct bn_owned_buf *p = realloc(m->owned, cap * sizeof(*p));
		if (!p)
			return NULL;
		m->owned = p;
		m->cap_owned = cap;
	}
	void *buf = bn_big_alloc(size);
	if (buf)
		m->owned[m->n_owned++] = (struct bn_owned_buf){ buf, size };
	return buf;
}

void bn_model_disown(struct bn_model *m, void *buf)
{
	for (uint32_t i = 0; i < m->n_owned; i++)
		if (m->owned[i].p == buf) {
			bn_big_free(buf, m->owned[i].size);
			m->owned[i] = m->owned[--m->n_owned];
			return;
		}
}

void bn_ld_drop_range(uintptr_t start, uintptr_t end)
{
	if (end > start)
		madvise((void *)start, end - start, MADV_DONTNEED);
}

void bn_ld_drop_pages(const struct bn_gguf_tensor *t)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	bn_ld_drop_range(((uintptr_t)t->data + page - 1) & ~(page - 1),
			 ((uintptr_t)t->data + t->size) & ~(page - 1));
}

/* Here, not in model.c: model.c and model_repack.c both walk a layer's matrices, and model.c
 * calls model_repack.c (no circle between them). */
void bn_layer_linears(const struct bn_layer *L, const struct bn_linear *out[BN_LAYER_LINEARS])
{
	const struct bn_linear *all[BN_LAYER_LINEARS] = { &L->wq, &L->wk, &L->wv, &L->wo,
							  &L->w_gate, &L->w_up, &L->w_down };
	memcpy(out, all, sizeof(all));
}
