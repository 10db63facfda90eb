/* SPDX-License-Identifier: MIT */
/*
 * tokenset.c — bound grammars (grammar.h) and their per-state token sets (tokens.h), the
 * technique of XGrammar: from each automaton state, walk the vocabulary's trie once with a
 * parse whose parents are unknown. A token whose bytes some parse reads to the end without
 * leaving the state's rule is accepted whatever the stack; one that no parse reads, and that
 * leaves the rule nowhere the rule's follow set allows, is rejected whatever the stack; only
 * the rest — tokens that end the rule and go on in the caller — depend on the stack and are
 * checked at run time. States of the bottom rule know their context (nothing beneath), so all
 * their tokens are settled here; shared prefixes are walked once.
 *
 * Sets are computed on first use and published with one compare-and-swap, so any number of
 * threads may share a bound grammar. Accepted sets are shared by every state with the same one
 * (long runs of string or repetition states have equal sets), and a large one close to a
 * bitset made before is stored as that bitset and the tokens that differ (tokens.h).
 */
#include "tokens.h"

#include "common/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A set shared by the states that have it: a bitset ([words]) or a list of ids. */
struct gr_shared {
	struct gr_shared *next;   /* same bucket */
	uint64_t hash;
	size_t bytes;             /* of data */
	uint8_t is_list;
	uint64_t data[];
};

/* ------------------------------------------------------------------------------------------ */
/* The walk                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Where the walk stands after d bytes of the current trie path. Most of a walk stays inside
 * the walked rule with one parse: that is a plain automaton state (no stack at all); the
 * stack is used only below a byte that calls, or that may end the rule into its caller. */
struct level {
	uint32_t simple;         /* the state, or GR_DEAD when cfg is the configuration */
	struct gss_cfg cfg;
	struct gss_mark mark;    /* the stack's arrays after this level was made */
	uint8_t inherited;       /* a parse left the rule at a shallower depth, onto a byte the
	                          * follow set allows: everything below is uncertain */
};

struct walk {
	const struct gr_automaton *a;
	const struct bn_grammar_vocab *v;
	struct gss g;
	struct level *lv;        /* [max_len + 1] */
	uint32_t n_parents;      /* the walked state's parents: 1 (the unknown), or 0 (the bottom
	                          * rule's, whose end is the output's) */
	uint64_t *accepted;      /* bitset */
	uint32_t n_accepted;
	uint32_t *uncertain;
	uint32_t n_uncertain, cap_uncertain;
};

static int add_uncertain(struct walk *w, uint32_t id)
{
	if (w->n_uncertain == w->cap_uncertain) {
		uint32_t cap = w->cap_uncertain ? w->cap_uncertain * 2 : 64;
		uint32_t *u = realloc(w->uncertain, cap * sizeof(uint32_t));
		if (!u)
			return -ENOMEM;
		w->uncertain = u;
		w->cap_uncertain = cap;
	}
	w->uncertain[w->n_uncertain++] = id;
	return 0;
}

/* Every token at a node in [from, to) is uncertain. */
static int subtree_uncertain(struct walk *w, uint32_t from, uint32_t to)
{
	const struct bn_grammar_vocab *v = w->v;
	for (uint32_t k = v->node_tok[from]; k < v->node_tok[to]; k++)
		if (add_uncertain(w, v->trie_tok[k]))
			return -ENOMEM;
	return 0;
}

static int tokens_at(struct walk *w, uint32_t node, int accepted)
{
	const struct bn_grammar_vocab *v = w->v;
	for (uint32_t k = v->node_tok[node]; k < v->node_tok[node + 1]; k++) {
		uint32_t id = v->trie_tok[k];
		if (accepted) {
			w->accepted[id / 64] |= 1ull << (id % 64);
			w->n_accepted++;
		} else if (add_uncertain(w, id)) {
			return -ENOMEM;
		}
	}
	return 0;
}

/* Level d from level d - 1 by byte b, on the stack: below a byte that calls or may end the
 * rule (from a plain level), or anywhere below such a byte (from a stack level). */
static int descend(struct walk *w, uint32_t d, uint8_t b)
{
	const struct gr_automaton *a = w->a;
	const struct level *up = &w->lv[d - 1];
	struct level *here = &w->lv[d];
	if (up->simple != GR_DEAD) {
		/* Plain levels allocate nothing: the stack is as the walk started. */
		struct gss_cfg from;
		gss_reset(&w->g, w->lv[0].mark);
		if (gss_start_at(&w->g, a, up->simple, &from) < 0 ||
		    gss_step(&w->g, a, &from, b, &here->cfg))
			return -ENOMEM;
	} else if (up->cfg.n_tops) {
		gss_reset(&w->g, up->mark);
		if (gss_step(&w->g, a, &up->cfg, b, &here->cfg))
			return -ENOMEM;
	} else {
		here->cfg = (struct gss_cfg){ .cost = GR_INF };
	}
	here->simple = GR_DEAD;
	here->mark = gss_mark(&w->g);
	return 0;
}

/* Tokens at trie node i all accepted (the common case, inline). */
static inline void accept_at(struct walk *w, uint32_t i)
{
	const struct bn_grammar_vocab *v = w->v;
	for (uint32_t k = v->node_tok[i]; k < v->node_tok[i + 1]; k++) {
		uint32_t id = v->trie_tok[k];
		w->accepted[id / 64] |= 1ull << (id % 64);
		w->n_accepted++;
	}
}

static int walk(struct walk *w, uint32_t state)
{
	const struct bn_grammar_vocab *v = w->v;
	const struct gr_trie_node *nodes = v->nodes;
	const struct gr_automaton *a = w->a;
	const struct ir_byteset *follow = &a->rules[a->states[state].rule].follow;
	w->lv[0] = (struct level){ .simple = state, .mark = gss_mark(&w->g) };
	w->n_parents = a->states[state].rule != a->bottom;
	for (uint32_t i = 1; i < v->n_nodes;) {
		struct gr_trie_node node = nodes[i];
		struct level *up = &w->lv[node.depth - 1];
		/* The fast path: one parse moving inside the rule, no stack. */
		if (up->simple != GR_DEAD) {
			uint32_t s = gr_next(a, up->simple, node.byte);
			if (s == GR_DEAD) {
				if (up->inherited && subtree_uncertain(w, i, node.end))
					return -ENOMEM;
				i = node.end;
				continue;
			}
			const struct gr_state *st = &a->states[s];
			if (!st->n_calls && (!st->accepting || !w->n_parents)) {
				if (node.has_tokens)
					accept_at(w, i);
				if (!st->has_bytes) {
					i = node.end;
					continue;
				}
				struct level *here = up + 1;
				here->simple = s;
				here->inherited = up->inherited;
				i++;
				continue;
			}
		}
		/* A plain level has no flags: a parse leaves the rule only on the stack. */
		int ctx = up->simple == GR_DEAD && (up->cfg.flags & GSS_CTX);
		int inherited = up->inherited || (ctx && ir_set_has(follow, node.byte));
		if (descend(w, node.depth, node.byte))
			return -ENOMEM;
		struct level *here = up + 1;
		int alive = gss_alive(&here->cfg);
		if ((alive || inherited) && tokens_at(w, i, alive))
			return -ENOMEM;
		if (here->cfg.n_tops || (here->cfg.flags & GSS_CTX)) {
			here->inherited = (uint8_t)inherited;
			i++;
			continue;
		}
		/* Nothing reads on: below is uncertain if the context might, else rejected. */
		if (inherited && subtree_uncertain(w, i + 1, node.end))
			return -ENOMEM;
		i = node.end;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Storing a set                                                                              */
/* ------------------------------------------------------------------------------------------ */

static uint64_t hash_bytes(const void *data, size_t bytes, int is_list)
{
	const uint8_t *p = data;
	uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)is_list;
	for (size_t i = 0; i < bytes; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h ^ (h >> 29);
}

/* The shared copy of data (made when new: its size into *added). Lock held. NULL without
 * memory. */
/* The shared copy equal to data, or NULL. Lock held. */
static const void *find_locked(const struct bn_grammar_bound *b, const void *data, size_t bytes,
			       int is_list, uint64_t h)
{
	for (const struct gr_shared *s = b->shared[h % GR_SHARED_BUCKETS]; s; s = s->next)
		if (s->hash == h && s->bytes == bytes && s->is_list == is_list &&
		    !memcmp(s->data, data, bytes))
			return s->data;
	return NULL;
}

static const void *share_locked(struct bn_grammar_bound *b, const void *data, size_t bytes,
				int is_list, size_t *added)
{
	if (!b->shared) {
		if (!(b->shared = calloc(GR_SHARED_BUCKETS, sizeof(*b->shared))))
			return NULL;
		*added += GR_SHARED_BUCKETS * sizeof(*b->shared);
	}
	uint64_t h = hash_bytes(data, bytes, is_list);
	const void *found = find_locked(b, data, bytes, is_list, h);
	if (found)
		return found;
	struct gr_shared **bucket = &b->shared[h % GR_SHARED_BUCKETS];
	struct gr_shared *s = malloc(sizeof(*s) + (bytes ? bytes : 1));
	if (!s)
		return NULL;
	*s = (struct gr_shared){ .next = *bucket, .hash = h, .bytes = bytes,
				 .is_list = (uint8_t)is_list };
	memcpy(s->data, data, bytes);
	*bucket = s;
	*added += sizeof(*s) + bytes;
	return s->data;
}

/* How many bits differ between x and y, counting no further than limit. */
static uint32_t bits_apart(const uint64_t *x, const uint64_t *y, uint32_t words, uint32_t limit)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < words && n <= limit; i++)
		n += (uint32_t)__builtin_popcountll(x[i] ^ y[i]);
	return n;
}

/* A recent whole bitset that bits differs from in fewer than words bits (the delta's ids then
 * take under half a bitset), or NULL. Lock held. */
static const uint64_t *near_base(const struct bn_grammar_bound *b, const uint64_t *bits,
				 uint32_t *apart)
{
	uint32_t words = b->v->words, best = words;
	const uint64_t *base = NULL;
	for (uint32_t i = 0; i < b->n_recent && i < GR_RECENT_BASES; i++) {
		uint32_t n = bits_apart(b->recent[i], bits, words, best);
		if (n < best) {
			best = n;
			base = b->recent[i];
		}
	}
	*apart = best;
	return base;
}

/* t's accepted set from bits: a shared bitset, or a near one and its delta. 0 or -ENOMEM. */
static int share_bits(struct bn_grammar_bound *b, const uint64_t *bits, struct gr_tset *t,
		      size_t *added)
{
	uint32_t words = b->v->words, apart;
	size_t bytes = words * sizeof(uint64_t);
	int rc = 0;
	pthread_mutex_lock(&b->lock);
	const uint64_t *same = b->shared ? find_locked(b, bits, bytes, 0,
						       hash_bytes(bits, bytes, 0)) : NULL;
	const uint64_t *base = same ? NULL : near_base(b, bits, &apart);
	if (same) {
		t->bits = same;
	} else if (base && apart) {
		uint32_t *delta = malloc(apart * sizeof(uint32_t)), n = 0;
		for (uint32_t i = 0; delta && i < words; i++)
			for (uint64_t x = bits[i] ^ base[i]; x; x &= x - 1)
				delta[n++] = i * 64 + (uint32_t)__builtin_ctzll(x);
		t->delta = delta ? share_locked(b, delta, n * sizeof(uint32_t), 1, added) : NULL;
		t->n_delta = n;
		t->bits = base;
		free(delta);
		rc = t->delta ? 0 : -ENOMEM;
	} else {
		t->bits = share_locked(b, bits, bytes, 0, added);
		if (!t->bits)
			rc = -ENOMEM;
		else if (!base) /* new (or equal to an older one): a base for those after it */
			b->recent[b->n_recent++ % GR_RECENT_BASES] = t->bits;
	}
	pthread_mutex_unlock(&b->lock);
	return rc;
}

static int share_list(struct bn_grammar_bound *b, const uint64_t *accepted, uint32_t n_accepted,
		      struct gr_tset *t, size_t *added)
{
	uint32_t *list = malloc((n_accepted + 1) * sizeof(uint32_t)), n = 0;
	if (!list)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->v->words; i++)
		for (uint64_t x = accepted[i]; x; x &= x - 1)
			list[n++] = i * 64 + (uint32_t)__builtin_ctzll(x);
	pthread_mutex_lock(&b->lock);
	t->list = share_locked(b, list, n * sizeof(uint32_t), 1, added);
	pthread_mutex_unlock(&b->lock);
	free(list);
	return t->list ? 0 : -ENOMEM;
}

/* A set from a walk's accepted bitset and uncertain list (taken over). */
static struct gr_tset *make_set(struct bn_grammar_bound *b, const uint64_t *accepted,
				uint32_t n_accepted, uint32_t **uncertain, uint32_t n_uncertain,
				uint32_t cap_uncertain)
{
	struct gr_tset *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->n_accepted = n_accepted;
	size_t shared = 0;
	/* A list costs 4 bytes a token, a bitset n/8 bytes: the smaller, roughly. */
	int rc = (uint64_t)n_accepted * 32 >= b->v->n_tokens
			 ? share_bits(b, accepted, t, &shared)
			 : share_list(b, accepted, n_accepted, t, &shared);
	if (rc) {
		free(t);
		return NULL;
	}
	t->n_uncertain = n_uncertain;
	t->uncertain = *uncertain;
	t->bytes = sizeof(*t) + (size_t)cap_uncertain * sizeof(uint32_t) + shared;
	*uncertain = NULL;
	return t;
}

static void tset_free(struct gr_tset *t)
{
	if (!t)
		return;
	free(t->uncertain);
	free(t);
}

static struct gr_tset *classify(struct bn_grammar_bound *b, uint32_t state)
{
	const struct bn_grammar_vocab *v = b->v;
	struct walk w = { .a = b->a, .v = v };
	struct gr_tset *t = NULL;
	gss_init(&w.g);
	w.lv = malloc(((size_t)v->max_len + 1) * sizeof(*w.lv));
	w.accepted = calloc(v->words, sizeof(uint64_t));
	if (w.lv && w.accepted && walk(&w, state) == 0)
		t = make_set(b, w.accepted, w.n_accepted, &w.uncertain, w.n_uncertain,
			     w.cap_uncertain);
	gss_free(&w.g);
	free(w.lv);
	free(w.accepted);
	free(w.uncertain);
	return t;
}

/* Publishes a computed set for state s (one compare-and-swap); returns the state's set, which
 * is another thread's equal one when it was first. */
static struct gr_tset *publish(struct bn_grammar_bound *b, uint32_t s, struct gr_tset *mine,
			       uint64_t ns)
{
	struct gr_tset *expected = NULL;
	if (!atomic_compare_exchange_strong_explicit(&b->sets[s], &expected, mine,
						     memory_order_acq_rel, memory_order_acquire)) {
		tset_free(mine); /* another thread was first: same contents */
		return expected;
	}
	atomic_fetch_add_explicit(&b->filled, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->set_bytes, mine->bytes, memory_order_relaxed);
	if (b->account)
		gr_account_add(b->account, mine->bytes);
	atomic_fetch_add_explicit(&b->fill_ns, ns, memory_order_relaxed);
	return mine;
}

const struct gr_tset *gr_tset_get(struct bn_grammar_bound *b, uint32_t s)
{
	struct gr_tset *t = atomic_load_explicit(&b->sets[s], memory_order_acquire);
	if (t)
		return t;
	uint64_t t0 = bn_now_ns();
	struct gr_tset *mine = classify(b, s);
	return mine ? publish(b, s, mine, bn_now_ns() - t0) : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Many states in one walk                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The bottom rule without calls is a plain automaton whose end is the output's: a token is
 * accepted where its bytes lead to a state, nothing is uncertain, and up to 64 of its states
 * can walk the trie together (one pass over the nodes, a bit per state). Long runs of similar
 * states (counted repetitions: lengths, formats) cost a fraction of one walk each. */
static int plain_rule(const struct gr_automaton *a, uint32_t rule)
{
	if (rule != a->bottom)
		return 0;
	const struct gr_rule *r = &a->rules[rule];
	for (uint32_t s = r->first; s < r->first + r->n; s++)
		if (a->states[s].n_calls)
			return 0;
	return 1;
}

#define BATCH 64

struct batch {
	uint32_t n, states[BATCH];
	uint32_t (*st)[BATCH];   /* [depth][k]: state k's state after depth bytes */
	uint64_t *live;          /* [depth]: the states still reading */
	uint64_t *acc;           /* [trie token]: the states that accept it */
};

static void walk_batch(const struct gr_automaton *a, const struct bn_grammar_vocab *v,
		       struct batch *bt)
{
	bt->live[0] = bt->n == 64 ? UINT64_MAX : (1ull << bt->n) - 1;
	for (uint32_t k = 0; k < bt->n; k++)
		bt->st[0][k] = bt->states[k];
	for (uint32_t i = 1; i < v->n_nodes;) {
		struct gr_trie_node node = v->nodes[i];
		const uint32_t *up = bt->st[node.depth - 1];
		uint32_t *here = bt->st[node.depth];
		uint64_t reads = 0, accepts = 0;
		for (uint64_t m = bt->live[node.depth - 1]; m; m &= m - 1) {
			uint32_t k = (uint32_t)__builtin_ctzll(m);
			uint32_t s = gr_next(a, up[k], node.byte);
			if (s == GR_DEAD)
				continue;
			accepts |= 1ull << k;
			here[k] = s;
			reads |= (uint64_t)a->states[s].has_bytes << k;
		}
		if (node.has_tokens)
			for (uint32_t t = v->node_tok[i]; t < v->node_tok[i + 1]; t++)
				bt->acc[t] = accepts;
		if (!reads) {
			i = node.end;
			continue;
		}
		bt->live[node.depth] = reads;
		i++;
	}
}

/* Sets for up to 64 states of a plain rule, published. 0 or -ENOMEM. */
static int classify_batch(struct bn_grammar_bound *b, struct batch *bt)
{
	const struct bn_grammar_vocab *v = b->v;
	uint64_t t0 = bn_now_ns();
	uint32_t n_trie = v->node_tok[v->n_nodes];
	memset(bt->acc, 0, (size_t)n_trie * sizeof(uint64_t));
	walk_batch(b->a, v, bt);
	uint64_t *bits = calloc((size_t)BATCH * v->words, sizeof(uint64_t));
	uint32_t counts[BATCH] = { 0 };
	if (!bits)
		return -ENOMEM;
	for (uint32_t t = 0; t < n_trie; t++)
		for (uint64_t m = bt->acc[t]; m; m &= m - 1) {
			uint32_t k = (uint32_t)__builtin_ctzll(m), id = v->trie_tok[t];
			bits[(size_t)k * v->words + id / 64] |= 1ull << (id % 64);
			counts[k]++;
		}
	uint64_t ns = (bn_now_ns() - t0) / bt->n;
	int rc = 0;
	for (uint32_t k = 0; k < bt->n && rc == 0; k++) {
		uint32_t *none = NULL;
		struct gr_tset *t = make_set(b, bits + (size_t)k * v->words, counts[k], &none, 0, 0);
		if (!t || !publish(b, bt->states[k], t, ns))
			rc = -ENOMEM;
	}
	free(bits);
	return rc;
}

static int batch_init(struct batch *bt, const struct bn_grammar_vocab *v)
{
	*bt = (struct batch){ 0 };
	bt->st = malloc(((size_t)v->max_len + 1) * sizeof(*bt->st));
	bt->live = malloc(((size_t)v->max_len + 1) * sizeof(uint64_t));
	bt->acc = malloc(((size_t)v->node_tok[v->n_nodes] + 1) * sizeof(uint64_t));
	return bt->st && bt->live && bt->acc ? 0 : -ENOMEM;
}

static void batch_free(struct batch *bt)
{
	free(bt->st);
	free(bt->live);
	free(bt->acc);
}

/* ------------------------------------------------------------------------------------------ */
/* Bound grammars                                                                             */
/* ------------------------------------------------------------------------------------------ */

int bn_grammar_bind(struct bn_grammar *g, struct bn_grammar_vocab *v,
		    struct bn_grammar_bound **out)
{
	*out = NULL;
	struct bn_grammar_bound *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->sets = calloc(g->a->n_states, sizeof(*b->sets));
	b->tdist = gr_token_distances(g->a, v);
	if (!b->sets || !b->tdist) {
		free(b->sets);
		free(b->tdist);
		free(b);
		return -ENOMEM;
	}
	atomic_init(&b->refs, 1);
	pthread_mutex_init(&b->lock, NULL);
	bn_grammar_ref(g);
	bn_grammar_vocab_ref(v);
	b->g = g;
	b->v = v;
	b->a = g->a;
	*out = b;
	return 0;
}

void bn_grammar_bound_ref(struct bn_grammar_bound *b)
{
	atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void bn_grammar_bound_unref(struct bn_grammar_bound *b)
{
	if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (b->account) {
		gr_account_sub(b->account, bn_grammar_bound_bytes(b));
		gr_account_unref(b->account);
	}
	for (uint32_t s = 0; s < b->a->n_states; s++)
		tset_free(atomic_load_explicit(&b->sets[s], memory_order_relaxed));
	for (uint32_t i = 0; b->shared && i < GR_SHARED_BUCKETS; i++)
		for (struct gr_shared *x = b->shared[i], *next; x; x = next) {
			next = x->next;
			free(x);
		}
	free(b->shared);
	pthread_mutex_destroy(&b->lock);
	free(b->sets);
	free(b->tdist);
	bn_grammar_unref(b->g);
	bn_grammar_vocab_unref(b->v);
	free(b);
}

/* States ordered so that those reading the same first bytes walk together (their live sets
 * in a batch then overlap): by a hash of that byte set. */
struct keyed {
	uint64_t key;
	uint32_t state;
};

static int cmp_keyed(const void *x, const void *y)
{
	const struct keyed *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return a->state < b->state ? -1 : a->state > b->state;
}

static uint64_t first_bytes_key(const struct gr_automaton *a, uint32_t s)
{
	uint64_t h = 0x9E3779B97F4A7C15ull;
	for (unsigned byte = 0; byte < 256; byte++)
		if (gr_next(a, s, (uint8_t)byte) != GR_DEAD)
			h = (h ^ byte) * 0x100000001b3ull;
	return h;
}

/* The unfilled states of a plain bottom rule, filled 64 at a time. */
static int warm_plain(struct bn_grammar_bound *b, uint64_t end)
{
	const struct gr_automaton *a = b->a;
	const struct gr_rule *r = &a->rules[a->bottom];
	struct keyed *todo = malloc(((size_t)r->n + 1) * sizeof(*todo));
	struct batch bt;
	int rc = batch_init(&bt, b->v);
	uint32_t n = 0;
	for (uint32_t s = r->first; todo && s < r->first + r->n; s++)
		if (a->states[s].has_bytes && !atomic_load(&b->sets[s]))
			todo[n++] = (struct keyed){ first_bytes_key(a, s), s };
	if (!todo)
		rc = -ENOMEM;
	else
		qsort(todo, n, sizeof(*todo), cmp_keyed);
	for (uint32_t i = 0; i < n && rc == 0; i += BATCH) {
		if (bn_now_ns() > end) {
			rc = 1; /* out of time */
			break;
		}
		bt.n = 0;
		for (uint32_t k = i; k < n && bt.n < BATCH; k++)
			if (!atomic_load(&b->sets[todo[k].state]))
				bt.states[bt.n++] = todo[k].state;
		if (bt.n)
			rc = classify_batch(b, &bt);
	}
	batch_free(&bt);
	free(todo);
	return rc;
}

int bn_grammar_bound_warm(struct bn_grammar_bound *b, uint64_t budget_ns)
{
	const struct gr_automaton *a = b->a;
	uint64_t end = bn_now_ns() + budget_ns;
	if (plain_rule(a, a->bottom)) {
		int rc = warm_plain(b, end);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	for (uint32_t s = 0; s < a->n_states; s++) {
		/* A state that reads no byte is never a top: never asked. */
		if (!a->states[s].has_bytes || atomic_load(&b->sets[s]))
			continue;
		if (bn_now_ns() > end)
			return 0;
		if (!gr_tset_get(b, s))
			return -ENOMEM;
	}
	return 1;
}

void bn_grammar_bound_get_info(const struct bn_grammar_bound *b,
			       struct bn_grammar_bound_info *info)
{
	*info = (struct bn_grammar_bound_info){
		.states_filled = atomic_load(&b->filled), .n_states = b->a->n_states,
		.set_bytes = atomic_load(&b->set_bytes), .fill_ns = atomic_load(&b->fill_ns),
	};
}

size_t bn_grammar_bound_bytes(const struct bn_grammar_bound *b)
{
	return sizeof(*b) + b->a->bytes + atomic_load(&b->set_bytes) +
	       (size_t)b->a->n_states * (sizeof(*b->sets) + sizeof(*b->tdist));
}

void gr_bound_count_in(struct bn_grammar_bound *b, struct gr_account *account)
{
	atomic_fetch_add_explicit(&account->refs, 1, memory_order_relaxed);
	b->account = account;
	gr_account_add(account, bn_grammar_bound_bytes(b));
}

void gr_account_add(struct gr_account *account, size_t n)
{
	for (; account; account = account->parent)
		atomic_fetch_add_explicit(&account->bytes, n, memory_order_relaxed);
}

void gr_account_sub(struct gr_account *account, size_t n)
{
	for (; account; account = account->parent)
		atomic_fetch_sub_explicit(&account->bytes, n, memory_order_relaxed);
}

void gr_account_unref(struct gr_account *account)
{
	if (account && atomic_fetch_sub_explicit(&account->refs, 1, memory_order_acq_rel) == 1) {
		gr_account_unref(account->parent);
		if (account->destroy)
			account->destroy(account);
		else
			free(account);
	}
}
