/* SPDX-License-Identifier: MIT */
/*
 * lower.c — from rules of expressions to the automaton (automaton.h): every rule's shortest
 * sentence (a fixpoint; a rule with none is unproductive and every use of it is dropped), which
 * rules are reachable and which recursive, what stays a rule (the bottom rule, recursive rules,
 * large rules used more than once, large parts repeated many times) and what is expanded where
 * it is used, left recursion refused, and the push order of rules called before a byte is read.
 *
 * Expanding is what makes masks cheap: inside one rule every token is classified ahead of time
 * whatever the stack, so the fewer rule boundaries a token can cross, the fewer tokens are
 * checked at run time. Rules are kept only where expansion would not terminate (recursion) or
 * would cost too many states.
 */
#include "automaton.h"
#include "regular.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INLINE_MAX 512           /* a rule called from several places stays a rule past this */
#define REPEAT_INLINE_MAX 65536  /* a part repeated into more states than this becomes a rule */
#define OUTLINE_MIN 48           /* ... when the part itself is at least this large */
#define BLOCK_MIN 256            /* a repetition of more copies than this is cut in blocks ... */
#define BLOCK_STATES REPEAT_INLINE_MAX /* ... when it would expand into more states than this */
#define SIZE_CAP (1u << 30)
#define WALK_MAX_DEPTH 2048

static uint32_t add_len(uint32_t a, uint32_t b)
{
	if (a == GR_INF || b == GR_INF)
		return GR_INF;
	uint64_t s = (uint64_t)a + b;
	return s >= GR_INF ? GR_INF - 1 : (uint32_t)s;
}

static uint32_t mul_len(uint32_t a, uint32_t k)
{
	if (a == GR_INF)
		return GR_INF;
	uint64_t s = (uint64_t)a * k;
	return s >= GR_INF ? GR_INF - 1 : (uint32_t)s;
}

static uint32_t add_size(uint32_t a, uint32_t b)
{
	uint64_t s = (uint64_t)a + b;
	return s > SIZE_CAP ? SIZE_CAP : (uint32_t)s;
}

static uint32_t mul_size(uint32_t a, uint64_t k)
{
	uint64_t s = (uint64_t)a * k;
	return s > SIZE_CAP ? SIZE_CAP : (uint32_t)s;
}

static int too_deep(struct gr_ctx *c, uint32_t depth)
{
	if (depth > WALK_MAX_DEPTH)
		return gr_fail(c, -E2BIG, "the grammar nests deeper than %u", WALK_MAX_DEPTH);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Shortest sentences                                                                         */
/* ------------------------------------------------------------------------------------------ */

static uint32_t minlen(struct gr_ctx *c, struct ir_node *x, uint32_t gen, uint32_t depth);

/* The required members, and for a count's minimum the shortest optional ones (a repeated kid
 * once), with a separator between each two. */
static uint32_t members_minlen(struct gr_ctx *c, struct ir_node *x, uint32_t gen,
			       uint32_t depth)
{
	uint32_t sep = minlen(c, x->sep, gen, depth + 1), present = 0, m = 0, n_opt = 0;
	uint32_t *opt = x->repeat ? malloc(x->n_kids * sizeof(uint32_t)) : NULL;
	if (x->repeat && !opt) {
		gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		return GR_INF;
	}
	for (uint32_t i = 0; i < x->n_kids; i++) {
		uint32_t k = minlen(c, x->kids[i], gen, depth + 1);
		if (x->required[i])
			m = add_len(m, present++ ? add_len(k, sep) : k);
		else if (opt && k != GR_INF)
			opt[n_opt++] = k;
	}
	if (x->repeat) {
		if (x->max != GR_INF && present > x->max)
			m = GR_INF;
		for (uint32_t need = present; need < x->min && m != GR_INF; need++) {
			uint32_t best = 0;
			for (uint32_t i = 1; i < n_opt; i++)
				best = opt[i] < opt[best] ? i : best;
			if (best >= n_opt) {
				m = GR_INF; /* not enough members for the minimum */
				break;
			}
			m = add_len(m, present++ ? add_len(opt[best], sep) : opt[best]);
			opt[best] = opt[--n_opt];
		}
	}
	free(opt);
	return m;
}

static uint32_t minlen(struct gr_ctx *c, struct ir_node *x, uint32_t gen, uint32_t depth)
{
	if (x->gen == gen || c->rc || too_deep(c, depth))
		return x->minlen;
	uint32_t m = 0;
	switch (x->kind) {
	case IR_NOTHING: m = GR_INF; break;
	case IR_EMPTY:   m = 0; break;
	case IR_BYTES:   m = 1; break;
	case IR_SEQ:
		for (uint32_t i = 0; i < x->n_kids; i++)
			m = add_len(m, minlen(c, x->kids[i], gen, depth + 1));
		break;
	case IR_ALT:
		m = GR_INF;
		for (uint32_t i = 0; i < x->n_kids; i++) {
			uint32_t k = minlen(c, x->kids[i], gen, depth + 1);
			m = k < m ? k : m;
		}
		break;
	case IR_REPEAT: {
		uint32_t k = minlen(c, x->kids[0], gen, depth + 1);
		m = x->min == 0 ? 0 : mul_len(k, x->min);
		break;
	}
	case IR_CALL:
		m = c->rules[x->rule].minlen;
		break;
	case IR_FRAG:
		m = x->frag->minlen;
		break;
	case IR_MEMBERS:
		m = members_minlen(c, x, gen, depth);
		break;
	}
	x->minlen = m;
	x->gen = gen;
	return m;
}

/* Shortest sentences of every rule: rounds until nothing shortens (a shortest derivation
 * never repeats a rule on a path, so at most as many rounds as rules); then one more pass
 * leaves every node's own value in place for nfa.c. */
static int shortest_sentences(struct gr_ctx *c, uint32_t *gen)
{
	for (uint32_t r = 0; r < c->n_rules; r++)
		c->rules[r].minlen = GR_INF;
	int changed = 1;
	while (changed) {
		changed = 0;
		++*gen;
		for (uint32_t r = 0; r < c->n_rules; r++) {
			uint32_t m = minlen(c, c->rules[r].body, *gen, 0);
			if (m < c->rules[r].minlen) {
				c->rules[r].minlen = m;
				changed = 1;
			}
		}
		if (c->rc || gr_tick(c))
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Calls: reachability and recursion                                                          */
/* ------------------------------------------------------------------------------------------ */

struct rule_list {
	uint32_t *v;
	uint32_t n, cap;
};

static int list_add(struct gr_ctx *c, struct rule_list *l, uint32_t r)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 16;
		uint32_t *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = r;
	return 0;
}

/* The rules x calls (productive parts only), once each per walk `mark`. */
static int calls_in(struct gr_ctx *c, struct ir_node *x, uint32_t mark, struct rule_list *out,
		    uint32_t depth)
{
	if (x->mark == mark || x->minlen == GR_INF)
		return 0;
	x->mark = mark;
	if (too_deep(c, depth))
		return -1;
	if (x->kind == IR_CALL)
		return list_add(c, out, x->rule);
	for (uint32_t i = 0; i < x->n_kids; i++)
		if (calls_in(c, x->kids[i], mark, out, depth + 1))
			return -1;
	return x->kind == IR_MEMBERS ? calls_in(c, x->sep, mark, out, depth + 1) : 0;
}

/* callees[r]: the rules r's body calls. */
static int call_graph(struct gr_ctx *c, struct rule_list *callees, uint32_t *mark)
{
	for (uint32_t r = 0; r < c->n_rules; r++)
		if (calls_in(c, c->rules[r].body, ++*mark, &callees[r], 0))
			return -1;
	return 0;
}

/* Tarjan's strongly connected components, iteratively: a rule on a cycle is recursive. */
static int find_recursion(struct gr_ctx *c, const struct rule_list *callees)
{
	uint32_t n = c->n_rules, counter = 0, sp = 0, cs = 0;
	uint32_t *index = malloc(n * sizeof(uint32_t)), *low = malloc(n * sizeof(uint32_t));
	uint32_t *stack = malloc(n * sizeof(uint32_t)), *call = malloc(n * 2 * sizeof(uint32_t));
	uint8_t *on = calloc(n, 1);
	if (!index || !low || !stack || !call || !on) {
		free(index), free(low), free(stack), free(call), free(on);
		return gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
	}
	for (uint32_t r = 0; r < n; r++)
		index[r] = GR_INF;
	for (uint32_t root = 0; root < n; root++) {
		if (index[root] != GR_INF)
			continue;
		call[cs * 2] = root, call[cs * 2 + 1] = 0, cs++;
		index[root] = low[root] = counter++;
		stack[sp++] = root, on[root] = 1;
		while (cs) {
			uint32_t v = call[(cs - 1) * 2], *k = &call[(cs - 1) * 2 + 1];
			if (*k < callees[v].n) {
				uint32_t w = callees[v].v[(*k)++];
				if (w == v)
					c->rules[v].recursive = 1;
				if (index[w] == GR_INF) {
					index[w] = low[w] = counter++;
					stack[sp++] = w, on[w] = 1;
					call[cs * 2] = w, call[cs * 2 + 1] = 0, cs++;
				} else if (on[w] && index[w] < low[v]) {
					low[v] = index[w];
				}
				continue;
			}
			cs--;
			if (cs) {
				uint32_t u = call[(cs - 1) * 2];
				if (low[v] < low[u])
					low[u] = low[v];
			}
			if (low[v] == index[v]) {
				uint32_t size = 0, w;
				uint32_t top = sp;
				do {
					w = stack[--sp];
					on[w] = 0;
					size++;
				} while (w != v);
				for (uint32_t i = sp; i < top && size > 1; i++)
					c->rules[stack[i]].recursive = 1;
			}
		}
	}
	free(index), free(low), free(stack), free(call), free(on);
	return 0;
}

static void mark_reachable(struct gr_ctx *c, const struct rule_list *callees, uint32_t from,
			   uint32_t *stack)
{
	uint32_t sp = 0;
	c->rules[from].reachable = 1;
	stack[sp++] = from;
	while (sp) {
		uint32_t r = stack[--sp];
		for (uint32_t i = 0; i < callees[r].n; i++) {
			uint32_t q = callees[r].v[i];
			if (!c->rules[q].reachable) {
				c->rules[q].reachable = 1;
				stack[sp++] = q;
			}
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* What stays a rule                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* A part repeated into too many states becomes a rule of its own, called at each repetition:
 * its states then exist once. */
static struct ir_node *outline(struct gr_ctx *c, struct ir_node *part, const char *of)
{
	char name[96];
	snprintf(name, sizeof(name), "%s (repeated part)", of);
	int64_t r = gr_rule_new(c, name);
	if (r < 0)
		return NULL;
	c->rules[r].body = part;
	c->rules[r].minlen = part->minlen;
	c->rules[r].automaton = 1;
	c->rules[r].reachable = 1;
	struct ir_node *call = ir_call(c, (uint32_t)r);
	if (call) {
		call->minlen = part->minlen;
		call->size = 1;
	}
	return call;
}

static uint32_t isqrt_up(uint64_t n)
{
	uint32_t b = 1;
	while ((uint64_t)b * b < n)
		b++;
	return b;
}

/* part repeated exactly n times, blk being part{b} */
static struct ir_node *exactly(struct gr_ctx *c, struct ir_node *part, struct ir_node *blk,
			       uint32_t b, uint32_t n)
{
	return ir_seq2(c, ir_repeat(c, blk, n / b, n / b), ir_repeat(c, part, n % b, n % b));
}

/* part repeated 0..n times: fewer than q blocks and any tail, or q blocks and a short one */
static struct ir_node *up_to(struct gr_ctx *c, struct ir_node *part, struct ir_node *blk,
			     uint32_t b, uint32_t n)
{
	uint32_t q = n / b, r = n % b;
	if (q == 0)
		return ir_repeat(c, part, 0, n);
	struct ir_node *fewer = ir_seq2(c, ir_repeat(c, blk, 0, q - 1), ir_repeat(c, part, 0, b - 1));
	struct ir_node *full = ir_seq2(c, ir_repeat(c, blk, q, q), ir_repeat(c, part, 0, r));
	return ir_alt2(c, fewer, full);
}

/* A repetition of many copies (a string of up to 100,000 characters) as blocks of b copies
 * in a rule of their own, b about the square root of the count, so that its states go from
 * n times the part's to about 4 sqrt(n) plus b times the part's:
 *   X{lo,hi} = X{lo} X{0,hi-lo}          X{n} = (X{b}){n/b} X{n%b}
 *   X{0,n}   = (X{b}){0,q-1} X{0,b-1} | (X{b}){q} X{0,r}      (n = qb + r, r < b)
 * the two alternatives of the last covering counts below qb and from qb on, exactly. */
static int block_repeat(struct gr_ctx *c, struct ir_node *x, const char *of)
{
	struct ir_node *part = x->kids[0];
	uint32_t lo = x->min, hi = x->max;
	uint32_t b = isqrt_up(hi == GR_INF ? lo : hi);
	char name[96];
	snprintf(name, sizeof(name), "%s (%u repetitions)", of, b);
	int64_t r = gr_rule_new(c, name);
	if (r < 0)
		return -1;
	struct ir_node *body = ir_repeat(c, part, b, b), *blk = ir_call(c, (uint32_t)r);
	if (!body || !blk)
		return -1;
	c->rules[r].body = body;
	c->rules[r].minlen = body->minlen = blk->minlen = mul_len(part->minlen, b);
	c->rules[r].automaton = 1;
	c->rules[r].reachable = 1;
	struct ir_node *more = hi == GR_INF ? ir_repeat(c, part, 0, GR_INF)
			       : up_to(c, part, blk, b, hi - lo);
	struct ir_node *rep = ir_seq2(c, exactly(c, part, blk, b, lo), more);
	if (!rep)
		return -1;
	uint32_t minlen = x->minlen, gen = x->gen;
	*x = *rep; /* the same language: every use of x takes the blocks */
	x->minlen = minlen;
	x->gen = gen;
	x->mark = 0;
	return 0;
}

/* States x expands to (saturated), outlining large repeated parts on the way. */
static uint32_t expanded_size(struct gr_ctx *c, struct ir_node *x, uint32_t mark,
			      const char *of, uint32_t depth)
{
	if (x->mark == mark || c->rc || too_deep(c, depth))
		return x->size;
	uint32_t s = 1;
	switch (x->kind) {
	case IR_NOTHING:
	case IR_EMPTY:
	case IR_BYTES:
		break;
	case IR_FRAG:
		s = add_size(1, x->frag->n);
		break;
	case IR_SEQ:
	case IR_ALT:
		for (uint32_t i = 0; i < x->n_kids; i++)
			s = add_size(s, add_size(1, expanded_size(c, x->kids[i], mark, of, depth + 1)));
		break;
	case IR_MEMBERS: {
		uint32_t sep = expanded_size(c, x->sep, mark, of, depth + 1);
		for (uint32_t i = 0; i < x->n_kids; i++)
			s = add_size(s, add_size(2 + sep,
					 expanded_size(c, x->kids[i], mark, of, depth + 1)));
		if (x->repeat) /* each kid at each count, twice for a repeated one */
			s = mul_size(s, 2 * (uint64_t)(x->min + 1) * (x->max == GR_INF ? 2 : x->max + 1));
		break;
	}
	case IR_REPEAT: {
		uint32_t k = expanded_size(c, x->kids[0], mark, of, depth + 1);
		uint64_t copies = x->max == GR_INF ? (uint64_t)x->min + 1 : x->max;
		int productive = x->kids[0]->minlen != GR_INF;
		int block = productive && copies > BLOCK_MIN &&
			    (uint64_t)(k + 1) * copies > BLOCK_STATES;
		/* A large part is a rule of its own; a small one stays inside the blocks, so
		 * that a token spanning its copies is classified ahead of time there. */
		if (productive && k >= OUTLINE_MIN &&
		    (uint64_t)k * (block ? isqrt_up(copies) : copies) > REPEAT_INLINE_MAX) {
			struct ir_node *call = outline(c, x->kids[0], of);
			if (!call)
				return SIZE_CAP;
			x->kids[0] = call;
			k = 1;
		}
		if (block) {
			if (block_repeat(c, x, of))
				return SIZE_CAP;
			return expanded_size(c, x, mark, of, depth);
		}
		s = mul_size(k + 1, copies + 1);
		break;
	}
	case IR_CALL: {
		const struct ir_rule *r = &c->rules[x->rule];
		s = r->automaton || r->recursive ? 1 : r->body->size;
		break;
	}
	}
	x->size = s;
	x->mark = mark;
	return s;
}

/* Post-order over the calls (callees decided before their callers): each rule's body sized,
 * then whether it stays a rule. */
static int decide(struct gr_ctx *c, const struct rule_list *callees, uint32_t r, uint8_t *state,
		  uint32_t *mark, uint32_t depth)
{
	if (too_deep(c, depth))
		return -1;
	state[r] = 1;
	for (uint32_t i = 0; i < callees[r].n; i++) {
		uint32_t q = callees[r].v[i];
		if (state[q] == 0 && decide(c, callees, q, state, mark, depth + 1))
			return -1;
	}
	struct ir_rule *rule = &c->rules[r];
	uint32_t size = expanded_size(c, rule->body, ++*mark, rule->name, 0);
	rule = &c->rules[r]; /* outlining may have moved the rules */
	rule->body->size = size;
	if (rule->recursive || (rule->refs > 1 && size > INLINE_MAX))
		rule->automaton = 1;
	state[r] = 2;
	return c->rc ? -1 : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Left calls                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* A remaining rule's first left call to another remaining rule (one on or before a cycle). */
static uint32_t next_remaining(const uint32_t *first, const uint32_t *left,
			       const uint32_t *indeg, uint32_t at)
{
	for (uint32_t j = first[at]; j < first[at + 1]; j++)
		if (indeg[left[j]])
			return left[j];
	return at;
}

/* Left recursion refused with its cycle of rule names. The rules Kahn's algorithm could not
 * order all lie on or before a cycle: walk n steps to be on it, then around it once. */
static int left_cycle(struct gr_ctx *c, uint32_t n_auto, const uint32_t *rule_of,
		      const uint32_t *first, const uint32_t *left, const uint32_t *indeg)
{
	uint32_t at = 0;
	while (!indeg[at])
		at++;
	for (uint32_t step = 0; step < n_auto; step++)
		at = next_remaining(first, left, indeg, at);
	char path[200] = "";
	uint32_t start = at;
	do {
		size_t len = strlen(path);
		snprintf(path + len, sizeof(path) - len, "\"%s\" -> ", c->rules[rule_of[at]].name);
		at = next_remaining(first, left, indeg, at);
	} while (at != start);
	size_t len = strlen(path);
	snprintf(path + len, sizeof(path) - len, "\"%s\"", c->rules[rule_of[at]].name);
	return gr_fail(c, -EINVAL, "left recursion: a rule reaches itself without reading a byte "
		       "(%s)", path);
}

/* The rules as automata in an order where a rule comes before those it calls without reading
 * a byte (Kahn's algorithm); a cycle there is left recursion. */
static int left_order(struct gr_ctx *c, uint32_t n_auto, const uint32_t *rule_of,
		      struct gr_nfa **nfa, uint32_t *topo)
{
	uint32_t *first = calloc((size_t)n_auto + 1, sizeof(uint32_t));
	uint32_t *left = malloc(((size_t)n_auto * 4 + 1) * sizeof(uint32_t)), cap = n_auto * 4 + 1;
	uint32_t *buf = malloc(((size_t)n_auto + 1) * sizeof(uint32_t));
	uint32_t *indeg = calloc(n_auto, sizeof(uint32_t)), *queue = malloc(n_auto * sizeof(uint32_t));
	int rc = -1;
	if (!first || !left || !buf || !indeg || !queue)
		goto oom;
	for (uint32_t i = 0; i < n_auto; i++) {
		uint32_t k = gr_nfa_left_calls(nfa[i], buf, n_auto);
		if (k == UINT32_MAX)
			goto oom;
		if (first[i] + k > cap) {
			cap = (first[i] + k) * 2;
			uint32_t *l = realloc(left, cap * sizeof(uint32_t));
			if (!l)
				goto oom;
			left = l;
		}
		for (uint32_t j = 0; j < k; j++) {
			left[first[i] + j] = c->rules[buf[j]].index;
			indeg[c->rules[buf[j]].index]++;
		}
		first[i + 1] = first[i] + k;
	}
	uint32_t head = 0, tail = 0, rank = 0;
	for (uint32_t i = 0; i < n_auto; i++)
		if (!indeg[i])
			queue[tail++] = i;
	while (head < tail) {
		uint32_t i = queue[head++];
		topo[i] = rank++;
		for (uint32_t j = first[i]; j < first[i + 1]; j++)
			if (--indeg[left[j]] == 0)
				queue[tail++] = left[j];
	}
	rc = rank < n_auto ? left_cycle(c, n_auto, rule_of, first, left, indeg) : 0;
	goto out;
oom:
	gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
out:
	free(first), free(left), free(buf), free(indeg), free(queue);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* The whole                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* The rule a whole output is must never be called, so that its end is the output's end (the
 * token sets of its states are exact). A root that is called gets a copy to be the bottom. */
static int64_t bottom_rule(struct gr_ctx *c, const struct rule_list *callees)
{
	uint32_t root = c->root;
	int called = 0;
	for (uint32_t r = 0; r < c->n_rules && !called; r++)
		for (uint32_t i = 0; i < callees[r].n; i++)
			called |= callees[r].v[i] == root;
	if (!called)
		return root;
	int64_t b = gr_rule_new(c, c->rules[root].name);
	if (b >= 0) {
		c->rules[b].body = c->rules[root].body;
		c->rules[b].minlen = c->rules[root].minlen;
		c->rules[b].reachable = 1;
	}
	return b;
}

static struct gr_automaton *build_rules(struct gr_ctx *c, uint32_t bottom)
{
	uint32_t n_auto = 0;
	for (uint32_t r = 0; r < c->n_rules; r++)
		if (c->rules[r].automaton && c->rules[r].reachable)
			c->rules[r].index = r == bottom ? 0 : ++n_auto;
	n_auto++;
	uint32_t *rule_of = malloc(n_auto * sizeof(uint32_t));
	uint32_t *topo = malloc(n_auto * sizeof(uint32_t));
	uint32_t *min = malloc(n_auto * sizeof(uint32_t));
	struct gr_nfa **nfa = calloc(n_auto, sizeof(*nfa));
	struct gr_dfa_builder *b = NULL;
	struct gr_automaton *a = NULL;
	if (!rule_of || !topo || !min || !nfa) {
		gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		goto out;
	}
	for (uint32_t r = 0; r < c->n_rules; r++)
		if (c->rules[r].automaton && c->rules[r].reachable) {
			rule_of[c->rules[r].index] = r;
			min[c->rules[r].index] = c->rules[r].minlen;
		}
	for (uint32_t i = 0; i < n_auto; i++)
		if (!(nfa[i] = gr_nfa_build(c, rule_of[i])))
			goto out;
	if (left_order(c, n_auto, rule_of, nfa, topo) || !(b = gr_dfa_builder_new(c, n_auto)))
		goto out;
	for (uint32_t i = 0; i < n_auto; i++) {
		if (gr_dfa_add_rule(c, b, i, c->rules[rule_of[i]].name, nfa[i]))
			goto out;
		gr_nfa_free(nfa[i]);
		nfa[i] = NULL;
	}
	a = gr_dfa_finish(c, b, 0, min, topo);
	b = NULL;
out:
	if (b)
		gr_dfa_builder_free(b);
	for (uint32_t i = 0; nfa && i < n_auto; i++)
		gr_nfa_free(nfa[i]);
	free(nfa), free(rule_of), free(topo), free(min);
	return a;
}

struct gr_automaton *gr_lower(struct gr_ctx *c)
{
	struct rule_list *callees = NULL;
	uint8_t *state = NULL;
	uint32_t *stack = NULL, gen = 0, mark = 0;
	struct gr_automaton *a = NULL;
	for (uint32_t r = 0; r < c->n_rules; r++)
		if (!c->rules[r].body) {
			gr_fail(c, -EINVAL, "rule \"%s\" is used but never defined", c->rules[r].name);
			return NULL;
		}
	if (shortest_sentences(c, &gen))
		return NULL;
	if (c->rules[c->root].minlen == GR_INF) {
		gr_fail(c, -EINVAL, "the grammar matches no output at all (\"%s\" never ends)",
			c->rules[c->root].name);
		return NULL;
	}
	/* Room for the rules made below (a bottom copy, outlined parts): they are added to the
	 * lists as they appear. */
	uint32_t cap = c->lim.max_rules + 1;
	callees = calloc(cap, sizeof(*callees));
	state = calloc(cap, 1);
	stack = malloc(cap * sizeof(uint32_t));
	if (!callees || !state || !stack) {
		gr_fail(c, -ENOMEM, "out of memory compiling the grammar");
		goto out;
	}
	if (call_graph(c, callees, &mark) || find_recursion(c, callees))
		goto out;
	int64_t bottom = bottom_rule(c, callees);
	if (bottom < 0)
		goto out;
	if ((uint32_t)bottom != c->root &&
	    calls_in(c, c->rules[bottom].body, ++mark, &callees[bottom], 0))
		goto out;
	mark_reachable(c, callees, (uint32_t)bottom, stack);
	c->rules[bottom].automaton = 1;
	if (decide(c, callees, (uint32_t)bottom, state, &mark, 0))
		goto out;
	a = build_rules(c, (uint32_t)bottom);
out:
	for (uint32_t r = 0; callees && r < cap; r++)
		free(callees[r].v);
	free(callees), free(state), free(stack);
	return a;
}
