/* SPDX-License-Identifier: MIT */
/*
 * matcher.c — one sequence's parse (grammar.h): a history of configurations, one per accepted
 * token, over one graph-structured stack (gss.h). Advancing steps the token's bytes from the
 * last configuration; rolling back truncates the history and the stack to an earlier mark;
 * the mask is each top's precomputed set (tokenset.c) plus the few tokens that depend on the
 * stack, checked from that top with shared prefixes. Memory stays bounded: once the stack
 * holds far more than the live parse needs, history beyond max_rollback is dropped and what
 * the rest still reaches is copied down (compact).
 */
#include "matcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Life                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static int push_position(struct bn_grammar_matcher *m, const struct gss_cfg *cfg, int finished)
{
	if (m->n_hist == m->cap_hist) {
		uint32_t cap = m->cap_hist ? m->cap_hist * 2 : 16;
		struct gr_position *h = realloc(m->hist, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		m->hist = h;
		m->cap_hist = cap;
	}
	m->hist[m->n_hist++] = (struct gr_position){ .cfg = *cfg, .end = gss_mark(&m->g),
						     .finished = (uint8_t)finished };
	return 0;
}

static int scratch_init(struct bn_grammar_matcher *m)
{
	size_t depth = (size_t)m->v->max_len + 2;
	m->run.cfg = malloc(depth * sizeof(*m->run.cfg));
	m->run.mark = malloc(depth * sizeof(*m->run.mark));
	return m->run.cfg && m->run.mark ? 0 : -ENOMEM;
}

int bn_grammar_matcher_new(struct bn_grammar_bound *b, uint32_t max_rollback,
			   struct bn_grammar_matcher **out)
{
	*out = NULL;
	struct bn_grammar_matcher *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	bn_grammar_bound_ref(b);
	m->b = b;
	m->a = b->a;
	m->v = b->v;
	m->max_rollback = max_rollback ? max_rollback : BN_GRAMMAR_ROLLBACK_DEFAULT;
	m->compact_at = COMPACT_MIN_NODES;
	gss_init(&m->g);
	m->g.tdist = b->tdist;
	struct gss_cfg start;
	if (scratch_init(m) || gss_start(&m->g, m->a, &start) || push_position(m, &start, 0)) {
		bn_grammar_matcher_free(m);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

void bn_grammar_matcher_free(struct bn_grammar_matcher *m)
{
	if (!m)
		return;
	gss_free(&m->g);
	free(m->scratch);
	free(m->hist);
	free(m->run.cfg);
	free(m->run.mark);
	bn_grammar_bound_unref(m->b);
	free(m);
}

static int copy_array(void **dst, const void *src, size_t n, size_t size)
{
	*dst = NULL;
	if (!n)
		return 0;
	*dst = malloc(n * size);
	if (!*dst)
		return -ENOMEM;
	memcpy(*dst, src, n * size);
	return 0;
}

int bn_grammar_matcher_clone(const struct bn_grammar_matcher *m,
			     struct bn_grammar_matcher **out)
{
	*out = NULL;
	struct bn_grammar_matcher *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	bn_grammar_bound_ref(m->b);
	c->b = m->b;
	c->a = m->a;
	c->v = m->v;
	c->max_rollback = m->max_rollback;
	c->compact_at = m->compact_at;
	gss_init(&c->g);
	c->g.tdist = m->g.tdist;
	const struct gss *g = &m->g;
	if (scratch_init(c) ||
	    copy_array((void **)&c->g.nodes, g->nodes, g->n_nodes, sizeof(*g->nodes)) ||
	    copy_array((void **)&c->g.plist, g->plist, g->n_plist, sizeof(uint32_t)) ||
	    copy_array((void **)&c->g.tops, g->tops, g->n_tops, sizeof(uint32_t)) ||
	    copy_array((void **)&c->hist, m->hist, m->n_hist, sizeof(*m->hist))) {
		bn_grammar_matcher_free(c);
		return -ENOMEM;
	}
	c->g.n_nodes = c->g.cap_nodes = g->n_nodes;
	c->g.n_plist = c->g.cap_plist = g->n_plist;
	c->g.n_tops = c->g.cap_tops = g->n_tops;
	c->n_hist = c->cap_hist = m->n_hist;
	*out = c;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Advancing and going back                                                                   */
/* ------------------------------------------------------------------------------------------ */

static const struct gr_position *last(const struct bn_grammar_matcher *m)
{
	return &m->hist[m->n_hist - 1];
}

/* The configuration after bytes, pushed as a new position; -EPERM (nothing changed) when the
 * grammar does not allow them. */
static int advance(struct bn_grammar_matcher *m, const uint8_t *bytes, size_t n, int finishes)
{
	const struct gr_position *at = last(m);
	if (at->finished)
		return -EPERM;
	struct gss_cfg cfg;
	int rc = gss_step_bytes(&m->g, m->a, &at->cfg, bytes, n, &cfg);
	if (rc == 0 && !gss_alive(&cfg))
		rc = -EPERM;
	if (rc == 0 && finishes && !(cfg.flags & GSS_ACCEPT))
		rc = -EPERM;
	if (rc == 0)
		rc = push_position(m, &cfg, finishes);
	if (rc) {
		gss_reset(&m->g, last(m)->end);
		return rc;
	}
	/* The token is in; a compaction that finds no memory is only tried again later. */
	(void)gr_matcher_compact_if_needed(m);
	return 0;
}

int bn_grammar_matcher_accept(struct bn_grammar_matcher *m, uint32_t token)
{
	if (token >= m->v->n_tokens)
		return -ERANGE;
	uint8_t kind = m->v->kind[token];
	if (kind == BN_GRAMMAR_TOKEN_EOG)
		return advance(m, NULL, 0, 1);
	uint32_t len;
	const uint8_t *bytes = vocab_bytes(m->v, token, &len);
	if (kind != BN_GRAMMAR_TOKEN_TEXT || len == 0)
		return -EPERM;
	return advance(m, bytes, len, 0);
}

int bn_grammar_matcher_accept_tokens(struct bn_grammar_matcher *m, const uint32_t *ids,
				     uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = bn_grammar_matcher_accept(m, ids[i]);
		if (rc == -EPERM || rc == -ERANGE)
			return (int)i;
		if (rc)
			return rc;
	}
	return (int)n;
}

int bn_grammar_matcher_accept_bytes(struct bn_grammar_matcher *m, const void *bytes, size_t n)
{
	return advance(m, bytes, n, 0);
}

int bn_grammar_matcher_rollback(struct bn_grammar_matcher *m, uint32_t n)
{
	if (n >= m->n_hist)
		return -ERANGE;
	m->n_hist -= n;
	gss_reset(&m->g, last(m)->end);
	return 0;
}

int bn_grammar_matcher_is_accepting(const struct bn_grammar_matcher *m)
{
	return (last(m)->cfg.flags & GSS_ACCEPT) != 0;
}

int bn_grammar_matcher_is_finished(const struct bn_grammar_matcher *m)
{
	return last(m)->finished;
}

uint32_t bn_grammar_matcher_history(const struct bn_grammar_matcher *m)
{
	return m->n_hist - 1;
}

size_t bn_grammar_matcher_bytes(const struct bn_grammar_matcher *m)
{
	const struct gss *g = &m->g;
	return sizeof(*m) + (size_t)g->cap_nodes * sizeof(*g->nodes) +
	       ((size_t)g->cap_plist + g->cap_tops + g->cap_tmp + g->cap_emit +
		(g->seen ? g->seen_mask + 1 : 0)) * sizeof(uint32_t) +
	       (size_t)g->cap_cands * sizeof(*g->cands) + (size_t)m->cap_hist * sizeof(*m->hist) +
	       ((size_t)m->v->max_len + 2) * (sizeof(*m->run.cfg) + sizeof(*m->run.mark)) +
	       (m->scratch ? (size_t)m->v->words * sizeof(uint64_t) : 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Masks                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Runs tokens that share prefixes, in trie order, from run.cfg[0]: the configurations of the
 * previous token's prefix are kept and reused. */
static void run_begin(struct bn_grammar_matcher *m)
{
	m->run.mark[0] = gss_mark(&m->g);
	m->run.reached = 0;
	m->run.died = GR_INF;
	m->run.prev = NULL;
	m->run.prev_len = 0;
}

/* 1 when the token's bytes keep some parse alive (its configuration in *end), 0 when not,
 * -ENOMEM. */
int gr_run_token(struct bn_grammar_matcher *m, const uint8_t *bytes, uint32_t len,
		 struct gss_cfg *end)
{
	struct gr_prefix_run *r = &m->run;
	uint32_t lcp = 0, max = len < r->prev_len ? len : r->prev_len;
	while (lcp < max && bytes[lcp] == r->prev[lcp])
		lcp++;
	r->prev = bytes;
	r->prev_len = len;
	if (r->died <= lcp) /* a prefix of this token already killed every parse */
		return 0;
	uint32_t d = lcp < r->reached ? lcp : r->reached;
	r->died = GR_INF;
	gss_reset(&m->g, r->mark[d]);
	for (; d < len; d++) {
		if (!r->cfg[d].n_tops) {
			r->reached = d;
			r->died = d;
			return 0;
		}
		if (gss_step(&m->g, m->a, &r->cfg[d], bytes[d], &r->cfg[d + 1]))
			return -ENOMEM;
		r->mark[d + 1] = gss_mark(&m->g);
	}
	r->reached = len;
	*end = r->cfg[len];
	return gss_alive(end);
}

/* The uncertain tokens of node's state that hold from that node, set in mask. */
static int check_uncertain(struct bn_grammar_matcher *m, uint32_t node, const struct gr_tset *t,
			   uint64_t *mask)
{
	struct gss_mark base = gss_mark(&m->g);
	int rc = gss_start_node(&m->g, node, &m->run.cfg[0]);
	run_begin(m);
	for (uint32_t k = 0; k < t->n_uncertain && rc == 0; k++) {
		uint32_t id = t->uncertain[k], len;
		if (mask[id / 64] >> (id % 64) & 1)
			continue;
		const uint8_t *bytes = vocab_bytes(m->v, id, &len);
		struct gss_cfg end;
		int alive = gr_run_token(m, bytes, len, &end);
		if (alive < 0)
			rc = alive;
		else if (alive)
			mask[id / 64] |= 1ull << (id % 64);
	}
	gss_reset(&m->g, base);
	return rc;
}

/* mask |= t's accepted set. A delta set is its base with some bits the other way: written
 * straight into a mask that is still empty (first), else made in scratch and or-ed in. */
static void add_set(const struct gr_tset *t, uint64_t *mask, uint32_t words, int first,
		    uint64_t *scratch)
{
	if (t->bits && t->delta) {
		uint64_t *to = first ? mask : scratch;
		memcpy(to, t->bits, words * sizeof(uint64_t));
		for (uint32_t k = 0; k < t->n_delta; k++)
			to[t->delta[k] / 64] ^= 1ull << (t->delta[k] % 64);
		for (uint32_t i = 0; !first && i < words; i++)
			mask[i] |= scratch[i];
		return;
	}
	if (t->bits) {
		for (uint32_t i = 0; i < words; i++)
			mask[i] |= t->bits[i];
		return;
	}
	for (uint32_t k = 0; k < t->n_accepted; k++)
		mask[t->list[k] / 64] |= 1ull << (t->list[k] % 64);
}

static int count_bits(const uint64_t *mask, uint32_t words)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < words; i++)
		n += (uint64_t)__builtin_popcountll(mask[i]);
	return (int)n;
}

int bn_grammar_matcher_fill_mask(struct bn_grammar_matcher *m, uint64_t *mask)
{
	const struct bn_grammar_vocab *v = m->v;
	memset(mask, 0, (size_t)v->words * sizeof(uint64_t));
	const struct gr_position *at = last(m);
	if (at->finished)
		return 0;
	struct gss_cfg cfg = at->cfg;
	for (uint32_t i = 0; i < cfg.n_tops; i++) {
		const struct gr_tset *t = gr_tset_get(m->b, m->g.nodes[m->g.tops[cfg.tops + i]].state);
		if (!t)
			return -ENOMEM;
		if (t->delta && i && !m->scratch &&
		    !(m->scratch = malloc((size_t)v->words * sizeof(uint64_t))))
			return -ENOMEM;
		add_set(t, mask, v->words, i == 0, m->scratch);
	}
	for (uint32_t i = 0; i < cfg.n_tops; i++) {
		uint32_t node = m->g.tops[cfg.tops + i];
		const struct gr_tset *t = gr_tset_get(m->b, m->g.nodes[node].state);
		if (t->n_uncertain && check_uncertain(m, node, t, mask))
			return -ENOMEM;
	}
	if (cfg.flags & GSS_ACCEPT)
		for (uint32_t k = 0; k < v->n_eog; k++)
			mask[v->eog[k] / 64] |= 1ull << (v->eog[k] % 64);
	return count_bits(mask, v->words);
}

/* The end-of-generation ids, where the grammar accepts: the mask when no token may follow. */
static int only_end(struct bn_grammar_matcher *m, uint64_t *mask)
{
	const struct bn_grammar_vocab *v = m->v;
	memset(mask, 0, (size_t)v->words * sizeof(uint64_t));
	const struct gr_position *at = last(m);
	if (at->finished || !(at->cfg.flags & GSS_ACCEPT))
		return 0;
	for (uint32_t k = 0; k < v->n_eog; k++)
		mask[v->eog[k] / 64] |= 1ull << (v->eog[k] % 64);
	return count_bits(mask, v->words);
}

/* No token can fit, counted in bytes: after a token of at most max_len bytes, at least cost -
 * max_len bytes are left (cost <= len + the cost after), and tokens_left - 1 tokens spell at
 * most that many times max_len. Such a position keeps no text token and no end-of-generation
 * id, so the mask is empty without running every allowed token to its end: that run costs ~1
 * ms a row in a string of a 128k vocabulary (issue 46 saw a request whose budget was far below
 * its schema's shortest output ask for it at every token). */
static int none_fits(const struct bn_grammar_matcher *m, uint32_t tokens_left)
{
	const struct gr_position *at = last(m);
	uint64_t len = m->v->max_len;
	return !at->finished && (uint64_t)at->cfg.cost > (uint64_t)tokens_left * len;
}

int bn_grammar_matcher_fill_mask_within(struct bn_grammar_matcher *m, uint64_t *mask,
					uint32_t tokens_left)
{
	if (tokens_left == 0)
		return only_end(m, mask);
	if (none_fits(m, tokens_left)) {
		memset(mask, 0, (size_t)m->v->words * sizeof(uint64_t));
		return 0;
	}
	int rc = bn_grammar_matcher_fill_mask(m, mask);
	if (rc <= 0)
		return rc;
	const struct bn_grammar_vocab *v = m->v;
	uint64_t max_tokens = tokens_left - 1;
	struct gss_mark base = gss_mark(&m->g);
	m->run.cfg[0] = last(m)->cfg;
	run_begin(m);
	/* Allowed text tokens in trie order, each followed to its end: the tokens from there. */
	for (uint32_t k = 0; k < v->node_tok[v->n_nodes] && rc >= 0; k++) {
		uint32_t id = v->trie_tok[k], len;
		if (!(mask[id / 64] >> (id % 64) & 1))
			continue;
		const uint8_t *bytes = vocab_bytes(v, id, &len);
		struct gss_cfg end;
		int alive = gr_run_token(m, bytes, len, &end);
		if (alive < 0)
			rc = alive;
		else if (!alive || end.tcost > max_tokens)
			mask[id / 64] &= ~(1ull << (id % 64));
	}
	gss_reset(&m->g, base);
	return rc < 0 ? rc : count_bits(mask, v->words);
}
