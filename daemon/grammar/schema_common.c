/* SPDX-License-Identifier: MIT */
/*
 * schema_common.c — what the JSON Schema files share (schema.h): errors with their location,
 * locations as JSON pointers, count keywords, node lists, and the memo tables (nodes by the
 * JSON they were read from, rules by the nodes they conjoin).
 */
#include "schema.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sc_fail(struct schema *s, const char *fmt, ...)
{
	char msg[BN_GRAMMAR_ERR_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return gr_fail(s->c, -EINVAL, "%s (at %s)", msg, s->path);
}

void sc_note_why(struct schema *s, const char *fmt, const char *where)
{
	if (!s->why[0])
		snprintf(s->why, sizeof(s->why), fmt, where);
}

size_t sc_push(struct schema *s, const char *a, const char *b)
{
	size_t old = strlen(s->path), at = old;
	const char *parts[] = { a, b };
	for (int i = 0; i < 2 && parts[i]; i++) {
		if (at + 2 < sizeof(s->path))
			s->path[at++] = '/';
		for (const char *p = parts[i]; *p && at + 3 < sizeof(s->path); p++) {
			if (*p == '~' || *p == '/') {
				s->path[at++] = '~';
				s->path[at++] = *p == '~' ? '0' : '1';
			} else {
				s->path[at++] = *p;
			}
		}
	}
	s->path[at] = 0;
	return old;
}

size_t sc_push_index(struct schema *s, const char *a, size_t i)
{
	char num[24];
	snprintf(num, sizeof(num), "%zu", i);
	return sc_push(s, a, num);
}

void sc_pop(struct schema *s, size_t old)
{
	s->path[old] = 0;
}

const char *sc_where(struct schema *s)
{
	return gr_strndup(s->c, s->path, strlen(s->path));
}

int sc_count(struct schema *s, const struct jv *v, const char *keyword, uint32_t *out)
{
	if (!v || v->kind != JV_NUMBER || v->dec.neg || !jv_is_integral(v))
		return sc_fail(s, "\"%s\" must be a non-negative integer", keyword);
	/* digits * 10^exp, exp >= 0: past 10 digits it is over any limit */
	uint64_t x = 0;
	int64_t total = (int64_t)v->dec.n + v->dec.exp;
	if (!(v->dec.n == 1 && v->dec.digits[0] == '0') && total <= 10) {
		for (uint32_t i = 0; i < v->dec.n; i++)
			x = x * 10 + (uint64_t)(v->dec.digits[i] - '0');
		for (int64_t e = 0; e < v->dec.exp; e++)
			x *= 10;
	}
	if (total > 10 || x > s->c->lim.max_repeat)
		return gr_fail(s->c, -E2BIG, "\"%s\" %.*s is over the limit of %u (at %s)", keyword,
			       (int)(v->n > 30 ? 30 : v->n), v->s, s->c->lim.max_repeat, s->path);
	*out = (uint32_t)x;
	return 0;
}

int sc_list_push(struct schema *s, struct sn_list *l, struct sn *x)
{
	if (!x)
		return -1;
	/* Lists grow by doubling from 4: a power of two at or above 4 means full. */
	if (l->n >= 4 && !(l->n & (l->n - 1))) {
		struct sn **v = gr_alloc(s->c, 2 * l->n * sizeof(*v));
		if (!v)
			return -1;
		memcpy(v, l->v, l->n * sizeof(*v));
		l->v = v;
	} else if (!l->v) {
		if (!(l->v = gr_alloc(s->c, 4 * sizeof(*l->v))))
			return -1;
	}
	l->v[l->n++] = x;
	return 0;
}

int sc_list_cat(struct schema *s, struct sn_list *l, const struct sn_list *m)
{
	for (uint32_t i = 0; i < m->n; i++)
		if (sc_list_push(s, l, m->v[i]))
			return -1;
	return 0;
}

struct sn *sc_node(struct schema *s, uint8_t kind)
{
	struct sn *x = gr_alloc(s->c, sizeof(*x));
	if (!x)
		return NULL;
	x->kind = kind;
	x->where = sc_where(s);
	x->rule = -1;
	x->types = T_ALL;
	x->max_len = x->max_items = x->max_props = GR_INF;
	return x->where ? x : NULL;
}

void sc_tighten(struct sn_bound *b, const struct jv *v, int excl, int upper)
{
	int cmp = b->v ? jv_decimal_cmp(&v->dec, &b->v->dec) : 0;
	if (!b->v || (upper ? cmp < 0 : cmp > 0) || (cmp == 0 && excl))
		*b = (struct sn_bound){ v, (uint8_t)excl };
}

int sc_plain_is_empty(const struct sn *p)
{
	return p->types == T_ALL && !p->typed && !p->families && !p->has_lits && !p->n_nots &&
	       !p->lo.v && !p->hi.v && !p->n_mult && !p->min_len && p->max_len == GR_INF &&
	       !p->n_texts && !p->min_items && p->max_items == GR_INF && !p->n_prefix &&
	       !p->items.n && !p->n_contains && !p->unique && !p->n_clauses && !p->n_required &&
	       !p->n_forbidden && !p->min_props && p->max_props == GR_INF && !p->names.n;
}

int sc_names_add(struct schema *s, const char ***names, uint32_t **lens, uint32_t *n,
		 const char *const *add, const uint32_t *add_lens, uint32_t n_add)
{
	if (!n_add)
		return 0;
	const char **v = gr_alloc(s->c, (*n + n_add) * sizeof(*v));
	uint32_t *l = gr_alloc(s->c, (*n + n_add) * sizeof(*l));
	if (!v || !l)
		return -1;
	if (*n) {
		memcpy(v, *names, *n * sizeof(*v));
		memcpy(l, *lens, *n * sizeof(*l));
	}
	memcpy(v + *n, add, n_add * sizeof(*v));
	memcpy(l + *n, add_lens, n_add * sizeof(*l));
	*names = v, *lens = l, *n += n_add;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Memo tables                                                                                */
/* ------------------------------------------------------------------------------------------ */

struct sc_memo_entry {
	void **key;
	uint32_t n;
	uint64_t hash;
	int64_t v;
};

struct sc_memo {
	struct sc_memo_entry *e;
	uint32_t mask, used;
};

static uint64_t hash_key(void *const *key, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
	for (uint32_t i = 0; i < n; i++) {
		h ^= (uint64_t)(uintptr_t)key[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 31;
	}
	return h | 1; /* 0 marks an empty slot */
}

int64_t sc_memo_get(const struct sc_memo *m, void *const *key, uint32_t n)
{
	if (!m)
		return -1;
	uint64_t h = hash_key(key, n);
	for (uint32_t at = (uint32_t)h & m->mask; m->e[at].hash; at = (at + 1) & m->mask)
		if (m->e[at].hash == h && m->e[at].n == n &&
		    !memcmp(m->e[at].key, key, n * sizeof(*key)))
			return m->e[at].v;
	return -1;
}

static int memo_insert(struct sc_memo *m, const struct sc_memo_entry *x)
{
	uint32_t at = (uint32_t)x->hash & m->mask;
	while (m->e[at].hash)
		at = (at + 1) & m->mask;
	m->e[at] = *x;
	m->used++;
	return 0;
}

int sc_memo_put(struct schema *s, struct sc_memo **mp, void *const *key, uint32_t n, int64_t v)
{
	struct sc_memo *m = *mp;
	if (!m || (m->used + 1) * 2 > m->mask) {
		uint32_t size = m ? (m->mask + 1) * 2 : 64;
		struct sc_memo *g = gr_alloc(s->c, sizeof(*g));
		struct sc_memo_entry *e = gr_alloc(s->c, size * sizeof(*e));
		if (!g || !e)
			return -1;
		g->e = e;
		g->mask = size - 1;
		for (uint32_t i = 0; m && i <= m->mask; i++)
			if (m->e[i].hash)
				memo_insert(g, &m->e[i]);
		*mp = m = g;
	}
	void **k = gr_alloc(s->c, (n ? n : 1) * sizeof(*k));
	if (!k)
		return -1;
	memcpy(k, key, n * sizeof(*key));
	struct sc_memo_entry x = { k, n, hash_key(key, n), v };
	return memo_insert(m, &x);
}

struct ir_node *sc_literal(struct schema *s, const struct jv *v)
{
	size_t n;
	char *text = jv_write(s->c, v, &n);
	return text ? ir_literal(s->c, text, n) : NULL;
}

static int type_bits(struct schema *s, const struct jv *t, uint32_t *out)
{
	static const struct {
		const char *name;
		uint32_t bits;
	} names[] = {
		{ "null", T_NULL }, { "boolean", T_BOOL }, { "integer", T_INT },
		{ "number", T_INT | T_FRAC }, { "string", T_STR }, { "array", T_ARR },
		{ "object", T_OBJ },
	};
	if (t->kind != JV_STRING)
		return sc_fail(s, "\"type\" must name types");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i].name) == t->n && !memcmp(names[i].name, t->s, t->n)) {
			*out |= names[i].bits;
			return 0;
		}
	return sc_fail(s, "\"type\" \"%.40s\" is not a JSON Schema type", t->s);
}

int sc_read_types(struct schema *s, const struct jv *type, uint32_t *out)
{
	*out = 0;
	if (type->kind == JV_STRING)
		return type_bits(s, type, out);
	if (type->kind != JV_ARRAY || type->n == 0)
		return sc_fail(s, "\"type\" must be a type or a non-empty array of types");
	for (uint32_t i = 0; i < type->n; i++)
		if (type_bits(s, type->v[i], out))
			return -1;
	return 0;
}

int sc_add_text(struct schema *s, struct sn *p, int kind, const struct jv *v)
{
	struct sn_text *t = gr_alloc(s->c, ((size_t)p->n_texts + 1) * sizeof(*t));
	if (!t)
		return -1;
	if (p->n_texts)
		memcpy(t, p->texts, p->n_texts * sizeof(*t));
	t[p->n_texts++] = (struct sn_text){ (uint8_t)kind, v->s, v->n, sc_where(s), NULL };
	p->texts = t;
	return 0;
}

int sc_add_clause(struct schema *s, struct sn *p, const struct sn_clause *cl)
{
	struct sn_clause *v = gr_alloc(s->c, ((size_t)p->n_clauses + 1) * sizeof(*v));
	if (!v)
		return -1;
	if (p->n_clauses)
		memcpy(v, p->clauses, p->n_clauses * sizeof(*v));
	v[p->n_clauses++] = *cl;
	p->clauses = v;
	return 0;
}

int sc_name_in(const char *const *names, const uint32_t *lens, uint32_t n, const char *key,
	       uint32_t len)
{
	for (uint32_t i = 0; i < n; i++)
		if (lens[i] == len && !memcmp(names[i], key, len))
			return 1;
	return 0;
}
