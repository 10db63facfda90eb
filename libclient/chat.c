/* SPDX-License-Identifier: MIT */
/*
 * libbitnet-client: chat templates, rendered as Hugging Face's apply_chat_template(messages,
 * add_generation_prompt=True) renders the Jinja templates they stand for, and tokenized so
 * that only the template's own markers can become special tokens.
 *
 * GGUF files carry their template as Jinja source; bitnetd does not run Jinja. The daemon
 * recognises the common templates by their markers (daemon/model/vocab_resolve.c) and each one is
 * written out here by hand:
 *
 *  bitnet  BitNet b1.58 2B4T's tokenizer_config.json:
 *          for m: (m.role | capitalize) + ': ' + (m.content | trim) + '<|eot_id|>'
 *          then 'Assistant: ' (BOS comes from the tokenizer)
 *  llama3  Meta LLaMA-3: bos_token (first message only) + '<|start_header_id|>' + m.role +
 *          '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>', then
 *          '<|start_header_id|>assistant<|end_header_id|>\n\n'
 *  chatml  '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n', then
 *          '<|im_start|>assistant\n'
 *  llama2  Llama-2-chat: a leading system message folds into the first user turn as
 *          '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content; user turns are bos_token +
 *          '[INST] ' + content.strip() + ' [/INST]', assistant turns ' ' + content.strip() +
 *          ' ' + eos_token; users and assistants must alternate, starting with a user
 *  falcon3 Falcon3-Instruct (its template without tools, Tulu 3's): system and user turns are
 *          '<|system|>\n' or '<|user|>\n' + m.content + '\n', assistant turns
 *          '<|assistant|>\n' + m.content + eos_token, then '\n' unless it is the last
 *          message; other roles give nothing; then '<|assistant|>\n'
 *
 * The render is tokenized as one text (so BPE sees the same runs a whole-text encoding sees),
 * with special tokens matched only outside the spans that came from the caller: a message
 * that contains "<|eot_id|>" cannot close its own turn.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROLE 32

static const char *const template_names[] = {
	[BN_CHAT_NONE] = "none",     [BN_CHAT_UNKNOWN] = "unknown", [BN_CHAT_BITNET] = "bitnet",
	[BN_CHAT_LLAMA3] = "llama3", [BN_CHAT_CHATML] = "chatml",   [BN_CHAT_LLAMA2] = "llama2",
	[BN_CHAT_FALCON3] = "falcon3",
};

const char *bn_chat_template_name(uint32_t tmpl)
{
	return tmpl < sizeof(template_names) / sizeof(template_names[0]) ? template_names[tmpl]
									 : "unknown";
}

int bn_chat_template_from_name(const char *name)
{
	for (uint32_t t = BN_CHAT_BITNET; name && t <= BN_CHAT_FALCON3; t++)
		if (strcmp(name, template_names[t]) == 0)
			return (int)t;
	return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* The render: text, and which parts of it came from the caller                                */
/* ------------------------------------------------------------------------------------------ */

struct render {
	char *text;
	size_t len, cap;
	struct text_span *plain;
	size_t n_plain, plain_cap;
	int failed; /* out of memory */
};

static int reserve(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static void put(struct render *r, const char *p, size_t n, int plain)
{
	if (r->failed || n == 0)
		return;
	if (reserve((void **)&r->text, &r->cap, r->len + n + 1, 1) ||
	    (plain && reserve((void **)&r->plain, &r->plain_cap, r->n_plain + 1, sizeof(*r->plain)))) {
		r->failed = 1;
		return;
	}
	memcpy(r->text + r->len, p, n);
	if (plain) {
		struct text_span *last = r->n_plain ? &r->plain[r->n_plain - 1] : NULL;
		if (last && last->start + last->len == r->len)
			last->len += n; /* adjacent caller text: one span */
		else
			r->plain[r->n_plain++] = (struct text_span){ r->len, n };
	}
	r->len += n;
}

static void put_template(struct render *r, const char *s)
{
	put(r, s, strlen(s), 0);
}

static void put_token_text(struct render *r, const struct bn_vocab *v, uint32_t id)
{
	if (id != NO_TOKEN)
		put(r, v->text + v->offset[id], vocab_token_len(v, id), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Python's str.strip() and str.capitalize(), as Jinja's trim and capitalize filters use them  */
/* ------------------------------------------------------------------------------------------ */

/* The characters str.isspace() accepts (bidirectional classes WS, B, S, and category Zs). */
static int py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Length of the white-space character at p (at most n bytes), or 0. */
static size_t space_at(const char *p, size_t n)
{
	const uint8_t *u = (const uint8_t *)p;
	if (u[0] < 0x80)
		return py_space(u[0]);
	if (u[0] >= 0xc0 && u[0] < 0xe0 && n >= 2 && (u[1] & 0xc0) == 0x80)
		return py_space((uint32_t)(u[0] & 0x1f) << 6 | (u[1] & 0x3f)) ? 2 : 0;
	if (u[0] >= 0xe0 && u[0] < 0xf0 && n >= 3 && (u[1] & 0xc0) == 0x80 && (u[2] & 0xc0) == 0x80)
		return py_space((uint32_t)(u[0] & 0x0f) << 12 | (uint32_t)(u[1] & 0x3f) << 6 |
				(u[2] & 0x3f)) ? 3 : 0;
	return 0;
}

/* White space at the start of p[0..n). */
static size_t leading_space(const char *p, size_t n)
{
	size_t i = 0, k;
	while (i < n && (k = space_at(p + i, n - i)) > 0)
		i += k;
	return i;
}

/* White space at the end: the white-space characters are at most three bytes long. */
static size_t trailing_space(const char *p, size_t n)
{
	size_t end = n;
	for (;;) {
		size_t k = 0;
		for (size_t w = 1; w <= 3 && w <= end && !k; w++)
			if (space_at(p + end - w, w) == w)
				k = w;
		if (!k)
			return n - end;
		end -= k;
	}
}

/* Pieces of one expression that a filter strips as a whole (llama2's content.strip() spans
 * the system block and the user's text). */
struct piece {
	const char *text;
	size_t len;
	int plain;
};

static void put_stripped(struct render *r, struct piece *p, size_t n)
{
	for (size_t i = 0; i < n; i++) { /* leading white space, across pieces */
		size_t k = leading_space(p[i].text, p[i].len);
		p[i].text += k;
		p[i].len -= k;
		if (p[i].len)
			break;
	}
	for (size_t i = n; i-- > 0;) {
		p[i].len -= trailing_space(p[i].text, p[i].len);
		if (p[i].len)
			break;
	}
	for (size_t i = 0; i < n; i++)
		put(r, p[i].text, p[i].len, p[i].plain);
}

static void put_trimmed(struct render *r, const char *s)
{
	struct piece p = { s, strlen(s), 1 };
	put_stripped(r, &p, 1);
}

/* Roles are checked ASCII: capitalize is then upper first, lower rest, as Python's. */
static void put_capitalized(struct render *r, const char *role)
{
	char buf[MAX_ROLE];
	size_t n = strlen(role);
	for (size_t i = 0; i < n; i++) {
		char c = role[i];
		if (i == 0 && c >= 'a' && c <= 'z')
			c = (char)(c - 'a' + 'A');
		else if (i > 0 && c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		buf[i] = c;
	}
	put(r, buf, n, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* The templates                                                                               */
/* ------------------------------------------------------------------------------------------ */

static int render_bitnet(struct render *r, const struct bn_vocab *v,
			 const struct bn_chat_message *m, size_t n)
{
	(void)v;
	for (size_t i = 0; i < n; i++) {
		put_capitalized(r, m[i].role);
		put_template(r, ": ");
		put_trimmed(r, m[i].content);
		put_template(r, "<|eot_id|>");
	}
	put_template(r, "Assistant: ");
	return 0;
}

static int render_llama3(struct render *r, const struct bn_vocab *v,
			 const struct bn_chat_message *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (i == 0)
			put_token_text(r, v, v->bos_id);
		put_template(r, "<|start_header_id|>");
		put(r, m[i].role, strlen(m[i].role), 1);
		put_template(r, "<|end_header_id|>\n\n");
		put_trimmed(r, m[i].content);
		put_template(r, "<|eot_id|>");
	}
	put_template(r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return 0;
}

static int render_chatml(struct render *r, const struct bn_vocab *v,
			 const struct bn_chat_message *m, size_t n)
{
	(void)v;
	for (size_t i = 0; i < n; i++) {
		put_template(r, "<|im_start|>");
		put(r, m[i].role, strlen(m[i].role), 1);
		put_template(r, "\n");
		put(r, m[i].content, strlen(m[i].content), 1);
		put_template(r, "<|im_end|>\n");
	}
	put_template(r, "<|im_start|>assistant\n");
	return 0;
}

static int render_llama2(struct render *r, const struct bn_vocab *v,
			 const struct bn_chat_message *m, size_t n)
{
	const char *system = NULL;
	if (strcmp(m[0].role, "system") == 0) {
		system = m[0].content;
		m++;
		n--;
	}
	for (size_t i = 0; i < n; i++) {
		int user = strcmp(m[i].role, "user") == 0;
		if (user != (i % 2 == 0))
			return -BN_E_INVALID; /* the template's raise_exception: roles must alternate */
		struct piece p[4];
		size_t k = 0;
		if (i == 0 && system) {
			p[k++] = (struct piece){ "<<SYS>>\n", 8, 0 };
			p[k++] = (struct piece){ system, strlen(system), 1 };
			p[k++] = (struct piece){ "\n<</SYS>>\n\n", 11, 0 };
		}
		p[k++] = (struct piece){ m[i].content, strlen(m[i].content), 1 };
		if (user) {
			put_token_text(r, v, v->bos_id);
			put_template(r, "[INST] ");
			put_stripped(r, p, k);
			put_template(r, " [/INST]");
		} else if (strcmp(m[i].role, "assistant") == 0) {
			put_template(r, " ");
			put_stripped(r, p, k);
			put_template(r, " ");
			put_token_text(r, v, v->eos_id);
		}
	}
	return 0;
}

static int render_falcon3(struct render *r, const struct bn_vocab *v,
			  const struct bn_chat_message *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *role = m[i].role;
		int assistant = strcmp(role, "assistant") == 0;
		if (!assistant && strcmp(role, "system") != 0 && strcmp(role, "user") != 0)
			continue; /* the template has no branch for other roles */
		put_template(r, "<|"); /* the role is one of the template's three names */
		put_template(r, role);
		put_template(r, "|>\n");
		put(r, m[i].content, strlen(m[i].content), 1);
		if (assistant)
			put_token_text(r, v, v->eos_id);
		if (!assistant || i + 1 < n)
			put_template(r, "\n");
	}
	put_template(r, "<|assistant|>\n");
	return 0;
}

static int role_ok(const char *role)
{
	size_t n = role ? strlen(role) : 0;
	if (n == 0 || n > MAX_ROLE)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = role[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static int render(const struct bn_vocab *v, uint32_t tmpl, const struct bn_chat_message *m,
		  size_t n, struct render *r)
{
	memset(r, 0, sizeof(*r));
	if (!v || (n && !m) || n == 0)
		return -BN_E_INVALID;
	if (tmpl == BN_CHAT_NONE)
		tmpl = v->chat_template;
	for (size_t i = 0; i < n; i++)
		if (!role_ok(m[i].role) || !m[i].content)
			return -BN_E_INVALID;
	int rc;
	switch (tmpl) {
	case BN_CHAT_BITNET: rc = render_bitnet(r, v, m, n); break;
	case BN_CHAT_LLAMA3: rc = render_llama3(r, v, m, n); break;
	case BN_CHAT_CHATML: rc = render_chatml(r, v, m, n); break;
	case BN_CHAT_LLAMA2: rc = render_llama2(r, v, m, n); break;
	case BN_CHAT_FALCON3: rc = render_falcon3(r, v, m, n); break;
	default: return -BN_E_INVALID; /* none, or one bitnetd does not know: the caller picks */
	}
	if (rc == 0 && r->failed)
		rc = -ENOMEM;
	if (rc == 0 && r->len > INT_MAX)
		rc = -BN_E_TOO_LONG;
	return rc;
}

static void render_free(struct render *r)
{
	free(r->text);
	free(r->plain);
}

int bn_chat_render(const struct bn_vocab *v, uint32_t tmpl, const struct bn_chat_message *msgs,
		   size_t n, char *buf, size_t cap)
{
	if (cap && !buf)
		return -BN_E_INVALID;
	struct render r;
	int rc = render(v, tmpl, msgs, n, &r);
	if (rc == 0 && cap) {
		size_t k = r.len < cap - 1 ? r.len : cap - 1;
		memcpy(buf, r.text, k);
		buf[k] = '\0';
	}
	if (rc == 0)
		rc = (int)r.len;
	render_free(&r);
	return rc;
}

/* The render's ids with one BOS first: the template's own (llama3, llama2) or the one the
 * tokenizer adds (bitnet, chatml), never both. */
int bn_chat_tokenize(const struct bn_vocab *v, uint32_t tmpl, const struct bn_chat_message *msgs,
		     size_t n, uint32_t *out, uint32_t cap)
{
	if (cap && !out)
		return -BN_E_INVALID;
	struct render r;
	int rc = render(v, tmpl, msgs, n, &r);
	if (rc == 0) {
		uint32_t flags = BN_TOK_PARSE_SPECIAL;
		int starts_with_bos = v->bos_id != NO_TOKEN && (r.n_plain == 0 || r.plain[0].start > 0) &&
				      r.len >= vocab_token_len(v, v->bos_id) &&
				      vocab_token_len(v, v->bos_id) > 0 &&
				      memcmp(r.text, v->text + v->offset[v->bos_id],
					     vocab_token_len(v, v->bos_id)) == 0;
		if (v->add_bos && !starts_with_bos)
			flags |= BN_TOK_ADD_BOS;
		rc = vocab_tokenize(v, r.text, r.len, flags, r.plain, r.n_plain, out, cap);
	}
	render_free(&r);
	return rc;
}
