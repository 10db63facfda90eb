/* SPDX-License-Identifier: MIT */
/*
 * dfa.c — a rule's automaton made deterministic (subset construction over the rule's byte
 * classes, calls as symbols of their own) and minimal (Hopcroft's partition refinement), then
 * appended to the automaton under construction (automaton.h). gr_dfa_finish (dfa_finish.c)
 * completes it.
 */
#include "dfa_internal.h"
#include "regular.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One rule's deterministic automaton while it is made: symbols are the byte classes, then one
 * per distinct callee. State 0 is the start. */
struct dfa {
	uint32_t n, cap;
	uint32_t n_classes, n_callees, n_sym;
	uint8_t cls[256];
	uint32_t *callees;       /* [n_callees]: the context's rule indexes */
	uint32_t *delta;         /* [n][n_sym], GR_DEAD where none */
	uint8_t *accepting;      /* [n] */
};

static void dfa_free(struct dfa *d)
{
	free(d->callees);
	free(d->delta);
	free(d->accepting);
	*d = (struct dfa){ 0 };
}

static int oom(struct gr_ctx *c)
{
	return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
}

/* ------------------------------------------------------------------------------------------ */
/* Byte classes: bytes no set of the rule tells apart share a class                           */
/* ------------------------------------------------------------------------------------------ */

static void byte_classes(const struct gr_nfa *n, struct dfa *d)
{
	uint32_t k = 1;
	memset(d->cls, 0, sizeof(d->cls));
	for (uint32_t i = 0; i < n->n_sets; i++) {
		int16_t remap[256][2];
		memset(remap, -1, sizeof(remap));
		uint32_t nk = 0;
		for (unsigned b = 0; b < 256; b++) {
			int in = ir_set_has(&n->sets[i], b);
			if (remap[d->cls[b]][in] < 0)
				remap[d->cls[b]][in] = (int16_t)nk++;
			d->cls[b] = (uint8_t)remap[d->cls[b]][in];
		}
		k = nk;
	}
	d->n_classes = k;
}

/* ------------------------------------------------------------------------------------------ */
/* Subset construction                                                                        */
/* ------------------------------------------------------------------------------------------ */

struct subsets {
	uint32_t *pool;          /* every subset's sorted NFA states, back to back */
	size_t n_pool, cap_pool;
	size_t *off;             /* [dfa state]: where its subset starts; off[n] its end */
	size_t cap_off;          /* entries off holds: grown by doubling, not a state at a time */
	uint32_t *table;         /* open addressing: dfa state + 1, 0 empty */
	uint32_t mask;
	uint32_t *stamp;         /* [nfa state]: closure generation */
	uint32_t gen;
	uint32_t *stack;
};

static uint64_t hash_states(const uint32_t *s, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
	for (uint32_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 29;
	}
	return h;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The empty-edge closure of seeds[0..n) appended to the pool (sorted, no repeats); returns
 * its length. */
static int64_t closure(struct gr_ctx *c, const struct gr_nfa *nfa, struct subsets *ss,
		       const uint32_t *seeds, uint32_t n)
{
	if (++ss->gen == 0) {
		memset(ss->stamp, 0, nfa->n_states * sizeof(uint32_t));
		ss->gen = 1;
	}
	size_t base = ss->n_pool;
	uint32_t sp = 0;
	for (uint32_t i = 0; i < n; i++)
		if (ss->stamp[seeds[i]] != ss->gen) {
			ss->stamp[seeds[i]] = ss->gen;
			ss->stack[sp++] = seeds[i];
		}
	while (sp) {
		uint32_t s = ss->stack[--sp];
		if (ss->n_pool == ss->cap_pool) {
			size_t cap = ss->cap_pool ? ss->cap_pool * 2 : 4096;
			uint32_t *p = realloc(ss->pool, cap * sizeof(*p));
			if (!p)
				return oom(c);
			ss->pool = p;
			ss->cap_pool = cap;
		}
		ss->pool[ss->n_pool++] = s;
		for (uint32_t e = nfa->first[s]; e < nfa->first[s + 1]; e++) {
			uint32_t to = nfa->edges[e].to;
			if (nfa->edges[e].label == NFA_EPS && ss->stamp[to] != ss->gen) {
				ss->stamp[to] = ss->gen;
				ss->stack[sp++] = to;
			}
		}
	}
	qsort(ss->pool + base, ss->n_pool - base, sizeof(uint32_t), cmp_u32);
	return (int64_t)(ss->n_pool - base);
}

static int grow_dfa(struct gr_ctx *c, struct dfa *d, uint32_t limit)
{
	if (d->n < d->cap)
		return 0;
	if (d->n >= limit)
		return gr_fail(c, -E2BIG, "the grammar needs more than %u automaton states (the "
			       "limit)", limit);
	uint32_t cap = d->cap ? d->cap * 2 : 64;
	uint32_t *delta = realloc(d->delta, (size_t)cap * d->n_sym * sizeof(uint32_t));
	if (delta)
		d->delta = delta;
	uint8_t *acc = realloc(d->accepting, cap);
	if (acc)
		d->accepting = acc;
	if (!delta || !acc)
		return oom(c);
	d->cap = cap;
	return 0;
}

static int rehash(struct gr_ctx *c, struct subsets *ss, uint32_t n_dfa)
{
	uint32_t size = (ss->mask + 1) * 2;
	uint32_t *t = calloc(size, sizeof(uint32_t));
	if (!t)
		return oom(c);
	for (uint32_t i = 0; i < n_dfa; i++) {
		uint32_t len = (uint32_t)(ss->off[i + 1] - ss->off[i]);
		uint32_t at = (uint32_t)hash_states(ss->pool + ss->off[i], len) & (size - 1);
		while (t[at])
			at = (at + 1) & (size - 1);
		t[at] = i + 1;
	}
	free(ss->table);
	ss->table = t;
	ss->mask = size - 1;
	return 0;
}

/* The DFA state of the subset just closed at the pool's end: found (the pool is cut back) or
 * added. Returns its index, or -1. */
static int64_t intern(struct gr_ctx *c, const struct gr_nfa *nfa, struct subsets *ss,
		      struct dfa *d, size_t base, uint32_t limit)
{
	uint32_t len = (uint32_t)(ss->n_pool - base);
	const uint32_t *set = ss->pool + base;
	uint32_t at = (uint32_t)hash_states(set, len) & ss->mask;
	for (; ss->table[at]; at = (at + 1) & ss->mask) {
		uint32_t i = ss->table[at] - 1;
		if (ss->off[i + 1] - ss->off[i] == len &&
		    !memcmp(ss->pool + ss->off[i], set, len * sizeof(uint32_t))) {
			ss->n_pool = base;
			return i;
		}
	}
	if (grow_dfa(c, d, limit))
		return -1;
	uint32_t id = d->n++;
	if ((size_t)d->n + 1 > ss->cap_off) {
		size_t cap = ss->cap_off * 2 > (size_t)d->n + 1 ? ss->cap_off * 2 : (size_t)d->n + 1;
		size_t *off = realloc(ss->off, cap * sizeof(size_t));
		if (!off)
			return oom(c);
		ss->off = off;
		ss->cap_off = cap;
	}
	ss->off[id] = base;
	ss->off[id + 1] = ss->n_pool;
	ss->table[at] = id + 1;
	for (uint32_t k = 0; k < d->n_sym; k++)
		d->delta[(size_t)id * d->n_sym + k] = GR_DEAD;
	d->accepting[id] = bsearch(&nfa->final, set, len, sizeof(uint32_t), cmp_u32) != NULL;
	if ((uint64_t)d->n * 2 > ss->mask && rehash(c, ss, d->n))
		return -1;
	return id;
}

/* Per set of the NFA, the classes it holds. */
static int set_classes(struct gr_ctx *c, const struct gr_nfa *nfa, const struct dfa *d,
		       uint32_t **first, uint8_t **list)
{
	*first = malloc(((size_t)nfa->n_sets + 1) * sizeof(uint32_t));
	*list = malloc((size_t)nfa->n_sets * d->n_classes + 1);
	if (!*first || !*list)
		return oom(c);
	uint32_t at = 0;
	for (uint32_t i = 0; i < nfa->n_sets; i++) {
		uint8_t seen[256] = { 0 };
		(*first)[i] = at;
		for (unsigned b = 0; b < 256; b++)
			if (ir_set_has(&nfa->sets[i], b) && !seen[d->cls[b]]) {
				seen[d->cls[b]] = 1;
				(*list)[at++] = d->cls[b];
			}
	}
	(*first)[nfa->n_sets] = at;
	return 0;
}

static int callees_of(struct gr_ctx *c, const struct gr_nfa *nfa, struct dfa *d)
{
	d->callees = malloc(((size_t)c->n_rules + 1) * sizeof(uint32_t));
	if (!d->callees)
		return oom(c);
	for (uint32_t e = 0; e < nfa->n_edges; e++) {
		uint32_t label = nfa->edges[e].label;
		if (label == NFA_EPS || !(label & NFA_CALL))
			continue;
		uint32_t r = label & ~NFA_CALL, k = 0;
		while (k < d->n_callees && d->callees[k] != r)
			k++;
		if (k == d->n_callees)
			d->callees[d->n_callees++] = r;
	}
	return 0;
}

/* Targets of one DFA state, bucketed by symbol (a counting sort of (symbol, NFA state)). */
struct moves {
	uint32_t *sym, *to, *count, *sorted;
	uint32_t n, cap;
};

static int move_push(struct gr_ctx *c, struct moves *m, uint32_t sym, uint32_t to)
{
	if (m->n == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 1024;
		uint32_t *s = realloc(m->sym, cap * sizeof(uint32_t));
		if (s)
			m->sym = s;
		uint32_t *t = realloc(m->to, cap * sizeof(uint32_t));
		if (t)
			m->to = t;
		uint32_t *o = realloc(m->sorted, cap * sizeof(uint32_t));
		if (o)
			m->sorted = o;
		if (!s || !t || !o)
			return oom(c);
		m->cap = cap;
	}
	m->sym[m->n] = sym;
	m->to[m->n++] = to;
	return 0;
}

static int determinize(struct gr_ctx *c, const struct gr_nfa *nfa, struct dfa *d)
{
	struct subsets ss = { .mask = 255 };
	struct moves mv = { 0 };
	uint32_t *sc_first = NULL;
	uint8_t *sc_list = NULL;
	int rc = -1;
	byte_classes(nfa, d);
	if (callees_of(c, nfa, d) || set_classes(c, nfa, d, &sc_first, &sc_list))
		goto out;
	d->n_sym = d->n_classes + d->n_callees;
	ss.stamp = calloc(nfa->n_states, sizeof(uint32_t));
	ss.stack = malloc(nfa->n_states * sizeof(uint32_t));
	ss.table = calloc(ss.mask + 1, sizeof(uint32_t));
	ss.off = malloc(64 * sizeof(size_t));
	ss.cap_off = 64;
	mv.count = malloc(((size_t)d->n_sym + 1) * sizeof(uint32_t));
	if (!ss.stamp || !ss.stack || !ss.table || !ss.off || !mv.count) {
		oom(c);
		goto out;
	}
	uint32_t limit = c->lim.max_states;
	if (closure(c, nfa, &ss, &nfa->start, 1) < 0 || intern(c, nfa, &ss, d, 0, limit) < 0)
		goto out;
	for (uint32_t i = 0; i < d->n; i++) {
		if (gr_tick(c))
			goto out;
		mv.n = 0;
		for (size_t k = ss.off[i]; k < ss.off[i + 1]; k++) {
			uint32_t s = ss.pool[k];
			for (uint32_t e = nfa->first[s]; e < nfa->first[s + 1]; e++) {
				uint32_t label = nfa->edges[e].label, to = nfa->edges[e].to;
				if (label == NFA_EPS)
					continue;
				if (label & NFA_CALL) {
					uint32_t j = 0;
					while (d->callees[j] != (label & ~NFA_CALL))
						j++;
					if (move_push(c, &mv, d->n_classes + j, to))
						goto out;
					continue;
				}
				for (uint32_t q = sc_first[label]; q < sc_first[label + 1]; q++)
					if (move_push(c, &mv, sc_list[q], to))
						goto out;
			}
		}
		memset(mv.count, 0, ((size_t)d->n_sym + 1) * sizeof(uint32_t));
		for (uint32_t k = 0; k < mv.n; k++)
			mv.count[mv.sym[k] + 1]++;
		for (uint32_t k = 0; k < d->n_sym; k++)
			mv.count[k + 1] += mv.count[k];
		for (uint32_t k = 0; k < mv.n; k++)
			mv.sorted[mv.count[mv.sym[k]]++] = mv.to[k];
		for (uint32_t sym = 0, begin = 0; sym < d->n_sym; sym++) {
			uint32_t end = mv.count[sym];
			if (end > begin) {
				size_t base = ss.n_pool;
				if (closure(c, nfa, &ss, mv.sorted + begin, end - begin) < 0)
					goto out;
				int64_t t = intern(c, nfa, &ss, d, base, limit);
				if (t < 0)
					goto out;
				d->delta[(size_t)i * d->n_sym + sym] = (uint32_t)t;
			}
			begin = end;
		}
	}
	rc = 0;
out:
	free(ss.pool);
	free(ss.off);
	free(ss.table);
	free(ss.stamp);
	free(ss.stack);
	free(mv.sym);
	free(mv.to);
	free(mv.count);
	free(mv.sorted);
	free(sc_first);
	free(sc_list);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Minimization (Hopcroft)                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct partition {
	uint32_t *elems, *loc, *blk;     /* [n + 1]: the states, the sink last */
	uint32_t *start, *end, *marked;  /* [blocks] */
	uint32_t n_blocks;
	uint32_t *touched;
	uint32_t n_touched;
	uint8_t *in_work;                /* [blocks][n_sym] */
	uint32_t (*work)[2];             /* (block, symbol) */
	size_t n_work;
};

static void mark(struct partition *p, uint32_t s)
{
	uint32_t b = p->blk[s], i = p->loc[s], j = p->start[b] + p->marked[b];
	if (i < j)
		return; /* already marked */
	uint32_t other = p->elems[j];
	p->elems[j] = s;
	p->loc[s] = j;
	p->elems[i] = other;
	p->loc[other] = i;
	if (p->marked[b]++ == 0)
		p->touched[p->n_touched++] = b;
}

static void add_work(struct partition *p, uint32_t b, uint32_t sym, uint32_t n_sym)
{
	if (p->in_work[(size_t)b * n_sym + sym])
		return;
	p->in_work[(size_t)b * n_sym + sym] = 1;
	p->work[p->n_work][0] = b;
	p->work[p->n_work][1] = sym;
	p->n_work++;
}

/* Splits every touched block into its marked and unmarked parts. */
static void split_touched(struct partition *p, uint32_t n_sym)
{
	for (uint32_t t = 0; t < p->n_touched; t++) {
		uint32_t b = p->touched[t], m = p->marked[b];
		p->marked[b] = 0;
		if (m == p->end[b] - p->start[b])
			continue;
		uint32_t nb = p->n_blocks++;
		p->start[nb] = p->start[b];
		p->end[nb] = p->start[b] + m;
		p->marked[nb] = 0;
		p->start[b] += m;
		for (uint32_t i = p->start[nb]; i < p->end[nb]; i++)
			p->blk[p->elems[i]] = nb;
		uint32_t small = (p->end[nb] - p->start[nb]) <= (p->end[b] - p->start[b]) ? nb : b;
		for (uint32_t sym = 0; sym < n_sym; sym++) {
			if (p->in_work[(size_t)b * n_sym + sym])
				add_work(p, nb, sym, n_sym);
			else
				add_work(p, small, sym, n_sym);
		}
	}
	p->n_touched = 0;
}

static void partition_free(struct partition *p)
{
	free(p->elems);
	free(p->loc);
	free(p->blk);
	free(p->start);
	free(p->end);
	free(p->marked);
	free(p->touched);
	free(p->in_work);
	free(p->work);
}

/* Inverse transitions: for symbol a and target t (the sink is n), the states that go there. */
struct inverse {
	uint32_t *first;   /* [n_sym * (n + 1) + 1] */
	uint32_t *from;
};

static int build_inverse(struct gr_ctx *c, const struct dfa *d, struct inverse *inv)
{
	size_t n1 = (size_t)d->n + 1, keys = (size_t)d->n_sym * n1;
	inv->first = calloc(keys + 1, sizeof(uint32_t));
	inv->from = malloc(((size_t)d->n_sym * n1 + 1) * sizeof(uint32_t));
	if (!inv->first || !inv->from)
		return oom(c);
	for (size_t s = 0; s < n1; s++)
		for (uint32_t a = 0; a < d->n_sym; a++) {
			uint32_t t = s < d->n ? d->delta[s * d->n_sym + a] : GR_DEAD;
			inv->first[a * n1 + (t == GR_DEAD ? d->n : t) + 1]++;
		}
	for (size_t k = 0; k < keys; k++)
		inv->first[k + 1] += inv->first[k];
	uint32_t *fill = malloc(keys * sizeof(uint32_t));
	if (!fill)
		return oom(c);
	memcpy(fill, inv->first, keys * sizeof(uint32_t));
	for (size_t s = 0; s < n1; s++)
		for (uint32_t a = 0; a < d->n_sym; a++) {
			uint32_t t = s < d->n ? d->delta[s * d->n_sym + a] : GR_DEAD;
			inv->from[fill[a * n1 + (t == GR_DEAD ? d->n : t)]++] = (uint32_t)s;
		}
	free(fill);
	return 0;
}

static int refine(struct gr_ctx *c, const struct dfa *d, const struct inverse *inv,
		  struct partition *p)
{
	size_t n1 = (size_t)d->n + 1;
	uint32_t *pre = malloc(n1 * sizeof(uint32_t));
	if (!pre)
		return oom(c);
	while (p->n_work) {
		if (gr_tick(c)) {
			free(pre);
			return -1;
		}
		p->n_work--;
		uint32_t b = p->work[p->n_work][0], a = p->work[p->n_work][1];
		p->in_work[(size_t)b * d->n_sym + a] = 0;
		uint32_t n_pre = 0;
		for (uint32_t i = p->start[b]; i < p->end[b]; i++) {
			size_t key = a * n1 + p->elems[i];
			for (uint32_t k = inv->first[key]; k < inv->first[key + 1]; k++)
				pre[n_pre++] = inv->from[k];
		}
		for (uint32_t k = 0; k < n_pre; k++)
			mark(p, pre[k]);
		split_touched(p, d->n_sym);
	}
	free(pre);
	return 0;
}

static int partition_init(struct gr_ctx *c, const struct dfa *d, struct partition *p)
{
	size_t n1 = (size_t)d->n + 1;
	p->elems = malloc(n1 * sizeof(uint32_t));
	p->loc = malloc(n1 * sizeof(uint32_t));
	p->blk = malloc(n1 * sizeof(uint32_t));
	p->start = malloc(n1 * sizeof(uint32_t));
	p->end = malloc(n1 * sizeof(uint32_t));
	p->marked = calloc(n1, sizeof(uint32_t));
	p->touched = malloc(n1 * sizeof(uint32_t));
	p->in_work = calloc(n1 * d->n_sym, 1);
	p->work = malloc(n1 * d->n_sym * sizeof(*p->work));
	if (!p->elems || !p->loc || !p->blk || !p->start || !p->end || !p->marked ||
	    !p->touched || !p->in_work || !p->work)
		return oom(c);
	/* Block 0: accepting states; block 1: the rest and the sink. */
	uint32_t at = 0;
	for (int pass = 0; pass < 2; pass++) {
		p->start[pass] = at;
		for (uint32_t s = 0; s < n1; s++) {
			int acc = s < d->n && d->accepting[s];
			if (acc != (pass == 0))
				continue;
			p->elems[at] = s;
			p->loc[s] = at++;
			p->blk[s] = (uint32_t)pass;
		}
		p->end[pass] = at;
	}
	p->n_blocks = 2;
	uint32_t small = p->end[0] - p->start[0] <= p->end[1] - p->start[1] ? 0 : 1;
	for (uint32_t a = 0; a < d->n_sym; a++)
		add_work(p, small, a, d->n_sym);
	return 0;
}

/* d replaced by its minimal equivalent: one state per block, the sink's block dropped (no
 * state of a productive rule is equivalent to it). */
static int minimize(struct gr_ctx *c, struct dfa *d)
{
	struct partition p = { 0 };
	struct inverse inv = { 0 };
	struct dfa m = { 0 };
	int rc = -1;
	if (partition_init(c, d, &p) || build_inverse(c, d, &inv) || refine(c, d, &inv, &p))
		goto out;
	uint32_t sink = p.blk[d->n];
	uint32_t *id = malloc(p.n_blocks * sizeof(uint32_t));
	if (!id) {
		oom(c);
		goto out;
	}
	/* New numbering in order of first appearance, so the start stays 0. */
	for (uint32_t b = 0; b < p.n_blocks; b++)
		id[b] = GR_DEAD;
	m = *d;
	m.n = 0;
	m.callees = NULL;
	m.delta = malloc((size_t)p.n_blocks * d->n_sym * sizeof(uint32_t));
	m.accepting = malloc(p.n_blocks);
	if (!m.delta || !m.accepting) {
		free(id);
		oom(c);
		goto out;
	}
	for (uint32_t s = 0; s < d->n; s++)
		if (p.blk[s] != sink && id[p.blk[s]] == GR_DEAD)
			id[p.blk[s]] = m.n++;
	for (uint32_t s = 0; s < d->n; s++) {
		uint32_t b = p.blk[s];
		if (b == sink)
			continue;
		m.accepting[id[b]] = d->accepting[s];
		for (uint32_t a = 0; a < d->n_sym; a++) {
			uint32_t t = d->delta[(size_t)s * d->n_sym + a];
			m.delta[(size_t)id[b] * d->n_sym + a] =
				t == GR_DEAD || p.blk[t] == sink ? GR_DEAD : id[p.blk[t]];
		}
	}
	free(id);
	m.callees = d->callees;
	m.cap = m.n;
	d->callees = NULL;
	dfa_free(d);
	*d = m;
	m = (struct dfa){ 0 };
	rc = 0;
out:
	free(m.delta);
	free(m.accepting);
	partition_free(&p);
	free(inv.first);
	free(inv.from);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Appending a rule                                                                           */
/* ------------------------------------------------------------------------------------------ */

struct gr_dfa_builder *gr_dfa_builder_new(struct gr_ctx *c, uint32_t n_rules)
{
	struct gr_dfa_builder *b = calloc(1, sizeof(*b));
	if (b) {
		b->n_rules = n_rules;
		b->rules = calloc(n_rules ? n_rules : 1, sizeof(*b->rules));
		b->classes = calloc(n_rules ? n_rules : 1, 256);
	}
	if (!b || !b->rules || !b->classes) {
		gr_dfa_builder_free(b);
		oom(c);
		return NULL;
	}
	return b;
}

void gr_dfa_builder_free(struct gr_dfa_builder *b)
{
	if (!b)
		return;
	free(b->states);
	free(b->next);
	free(b->calls);
	free(b->rules);
	free(b->classes);
	free(b->names);
	free(b);
}

static int reserve(struct gr_ctx *c, void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * size);
	if (!q)
		return oom(c);
	*p = q;
	*cap = n;
	return 0;
}

static int append(struct gr_ctx *c, struct gr_dfa_builder *b, uint32_t index, const char *name,
		  const struct dfa *d)
{
	if ((uint64_t)b->n_states + d->n > c->lim.max_states)
		return gr_fail(c, -E2BIG, "the grammar needs more than %u automaton states (the "
			       "limit)", c->lim.max_states);
	size_t name_len = strlen(name) + 1;
	size_t n_calls = 0;
	for (size_t k = 0; k < (size_t)d->n * d->n_sym; k++)
		n_calls += (k % d->n_sym) >= d->n_classes && d->delta[k] != GR_DEAD;
	if (reserve(c, (void **)&b->states, &b->cap_states, b->n_states + d->n,
		    sizeof(*b->states)) ||
	    reserve(c, (void **)&b->next, &b->cap_next, b->n_next + (size_t)d->n * d->n_classes,
		    sizeof(*b->next)) ||
	    reserve(c, (void **)&b->calls, &b->cap_calls, b->n_calls + n_calls,
		    sizeof(*b->calls)) ||
	    reserve(c, (void **)&b->names, &b->cap_names, b->n_names + name_len, 1))
		return -1;
	struct gr_rule *r = &b->rules[index];
	r->first = (uint32_t)b->n_states;
	r->n = d->n;
	r->start = r->first;
	r->n_classes = d->n_classes;
	r->name = (uint32_t)b->n_names;
	memcpy(b->names + b->n_names, name, name_len);
	b->n_names += name_len;
	memcpy(b->classes + (size_t)index * 256, d->cls, 256);
	for (uint32_t s = 0; s < d->n; s++) {
		struct gr_state *st = &b->states[b->n_states++];
		const uint32_t *row = d->delta + (size_t)s * d->n_sym;
		*st = (struct gr_state){ .rule = index, .row = (uint32_t)b->n_next,
					 .calls = (uint32_t)b->n_calls,
					 .accepting = d->accepting[s] };
		for (uint32_t a = 0; a < d->n_classes; a++) {
			uint32_t t = row[a];
			b->next[b->n_next++] = t == GR_DEAD ? GR_DEAD : r->first + t;
			st->has_bytes |= t != GR_DEAD;
		}
		for (uint32_t j = 0; j < d->n_callees; j++) {
			uint32_t t = row[d->n_classes + j];
			if (t == GR_DEAD)
				continue;
			/* The callee as the context knows it; gr_dfa_finish maps it. */
			b->calls[b->n_calls++] = (struct gr_call){ .rule = d->callees[j],
								   .ret = r->first + t };
			st->n_calls++;
		}
	}
	return 0;
}

int gr_dfa_add_rule(struct gr_ctx *c, struct gr_dfa_builder *b, uint32_t index,
		    const char *name, struct gr_nfa *n)
{
	struct dfa d = { 0 };
	int rc = determinize(c, n, &d) || minimize(c, &d) || append(c, b, index, name, &d);
	dfa_free(&d);
	return rc ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fragments                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* The fewest bytes from the start to an accepting state (breadth first). */
static uint32_t shortest(struct gr_ctx *c, const struct gr_frag *f)
{
	uint32_t *dist = malloc(f->n * sizeof(uint32_t)), *queue = malloc(f->n * sizeof(uint32_t));
	uint32_t head = 0, tail = 0, best = GR_INF;
	if (!dist || !queue) {
		free(dist), free(queue);
		oom(c);
		return GR_INF;
	}
	for (uint32_t s = 0; s < f->n; s++)
		dist[s] = GR_INF;
	dist[0] = 0;
	queue[tail++] = 0;
	while (head < tail && best == GR_INF) {
		uint32_t s = queue[head++];
		if (f->accepting[s])
			best = dist[s];
		for (uint32_t k = 0; k < f->n_classes; k++) {
			uint32_t t = f->delta[(size_t)s * f->n_classes + k];
			if (t != GR_DEAD && dist[t] == GR_INF) {
				dist[t] = dist[s] + 1;
				queue[tail++] = t;
			}
		}
	}
	free(dist), free(queue);
	return best;
}

/* d minimized, as a fragment in the arena. */
static int to_fragment(struct gr_ctx *c, struct dfa *d, struct gr_frag *out)
{
	if (minimize(c, d))
		return -1;
	if (d->n_callees)
		return gr_fail(c, -EINVAL, "internal: a regular language with calls");
	*out = (struct gr_frag){ .n = d->n, .n_classes = d->n_classes, .minlen = GR_INF };
	memcpy(out->cls, d->cls, sizeof(out->cls));
	out->class_set = gr_alloc(c, (d->n_classes ? d->n_classes : 1) * sizeof(*out->class_set));
	out->delta = gr_alloc(c, ((size_t)d->n * d->n_classes + 1) * sizeof(uint32_t));
	out->accepting = gr_alloc(c, (size_t)d->n + 1);
	if (!out->class_set || !out->delta || !out->accepting)
		return -1;
	for (unsigned b = 0; b < 256; b++)
		ir_set_add(&out->class_set[d->cls[b]], b);
	if (d->n) {
		memcpy(out->delta, d->delta, (size_t)d->n * d->n_classes * sizeof(uint32_t));
		memcpy(out->accepting, d->accepting, d->n);
		out->minlen = shortest(c, out);
	}
	return c->rc ? -1 : 0;
}

int gr_dfa_fragment(struct gr_ctx *c, struct gr_nfa *n, struct gr_frag *out)
{
	struct dfa d = { 0 };
	int rc = determinize(c, n, &d) || to_fragment(c, &d, out);
	dfa_free(&d);
	return rc ? -1 : 0;
}

int gr_dfa_fragment_of_table(struct gr_ctx *c, uint32_t n, uint32_t n_classes,
			     const uint8_t cls[256], const uint32_t *delta,
			     const uint8_t *accepting, struct gr_frag *out)
{
	struct dfa d = { .n = n, .cap = n, .n_classes = n_classes, .n_sym = n_classes };
	memcpy(d.cls, cls, sizeof(d.cls));
	d.delta = malloc(((size_t)n * n_classes + 1) * sizeof(uint32_t));
	d.accepting = malloc((size_t)n + 1);
	int rc = -1;
	if (!d.delta || !d.accepting) {
		oom(c);
	} else {
		memcpy(d.delta, delta, (size_t)n * n_classes * sizeof(uint32_t));
		memcpy(d.accepting, accepting, n);
		rc = to_fragment(c, &d, out);
	}
	dfa_free(&d);
	return rc;
}
