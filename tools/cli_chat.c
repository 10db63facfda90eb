/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli chat: a conversation on the terminal (history kept, replies streamed, /reset,
 * Ctrl-D to leave), one message for scripts (--message), or a conversation from a JSON file
 * rendered without generating (--messages FILE --render / --render-ids).
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char chat_usage[] =
	"Usage: bitnet-cli chat [OPTIONS]\n"
	"  (no --message, no --messages)  talk on the terminal: each line is a user message,\n"
	"                             the reply streams back; /reset forgets the history;\n"
	"                             Ctrl-D leaves\n"
	"  --message TEXT             send one user message, print the reply\n"
	"  --messages FILE            a conversation: a JSON array of {\"role\", \"content\"}\n"
	"                             objects (- reads standard input); prints the reply\n"
	"  --render                   with --messages: print the prompt text the template\n"
	"                             makes, generate nothing\n"
	"  --render-ids               with --messages: print its token ids on one line\n"
	"  --system TEXT              a system message first (with --message or on the terminal)\n"
	"  --chat-template NAME       bitnet, llama3, chatml, llama2 or falcon3 (default: the\n"
	"                             model's)\n"
	"  --max-tokens N             longest reply (default 512)\n"
	"  --temperature F --top-k N --top-p F --seed N   sampling (default greedy)\n";

struct chat_opts {
	const char *message, *system, *messages_file;
	int render, render_ids;
	uint32_t tmpl;
	uint32_t max_tokens;
	uint32_t flags;
	struct bn_sampling_params sp;
	int sampling;
};

/* Messages whose strings the conversation owns. */
struct conversation {
	struct bn_chat_message *m;
	size_t n, cap;
};

static int conv_add(struct conversation *c, const char *role, const char *content)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		struct bn_chat_message *m = realloc(c->m, cap * sizeof(*m));
		if (!m)
			return -ENOMEM;
		c->m = m;
		c->cap = cap;
	}
	char *r = strdup(role), *t = strdup(content);
	if (!r || !t) {
		free(r);
		free(t);
		return -ENOMEM;
	}
	c->m[c->n++] = (struct bn_chat_message){ r, t };
	return 0;
}

/* Drops messages from index keep on. */
static void conv_truncate(struct conversation *c, size_t keep)
{
	while (c->n > keep) {
		c->n--;
		free((char *)c->m[c->n].role);
		free((char *)c->m[c->n].content);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Options and the messages file                                                               */
/* ------------------------------------------------------------------------------------------ */

static int parse_sampling(struct chat_opts *o, int opt, const char *arg)
{
	char *end;
	errno = 0;
	o->sampling = 1;
	if (opt == 't' || opt == 'p') {
		float v = strtof(arg, &end);
		if (errno || end == arg || *end || !(v >= 0) || v > (opt == 't' ? 100 : 1))
			return cli_usage("chat", "--%s: '%s' is out of range",
						opt == 't' ? "temperature" : "top-p", arg);
		*(opt == 't' ? &o->sp.temperature : &o->sp.top_p) = v;
		return 0;
	}
	unsigned long long v = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || arg[0] == '-' || (opt == 'k' && v > UINT32_MAX))
		return cli_usage("chat", "'%s' is not a whole number", arg);
	if (opt == 'k') {
		o->sp.top_k = (uint32_t)v;
	} else {
		o->sp.seed = v;
		o->flags |= BN_REQ_SEED;
	}
	return 0;
}

static int parse_chat(struct chat_opts *o, int argc, char **argv)
{
	enum { C_MESSAGE = 256, C_MESSAGES, C_RENDER, C_RENDER_IDS, C_SYSTEM, C_TEMPLATE, C_MAX };
	static const struct option opts[] = {
		{ "message", required_argument, NULL, C_MESSAGE },
		{ "messages", required_argument, NULL, C_MESSAGES },
		{ "render", no_argument, NULL, C_RENDER },
		{ "render-ids", no_argument, NULL, C_RENDER_IDS },
		{ "system", required_argument, NULL, C_SYSTEM },
		{ "chat-template", required_argument, NULL, C_TEMPLATE },
		{ "max-tokens", required_argument, NULL, C_MAX },
		{ "temperature", required_argument, NULL, 't' },
		{ "top-k", required_argument, NULL, 'k' },
		{ "top-p", required_argument, NULL, 'p' },
		{ "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct chat_opts){ .max_tokens = 512 };
	int opt, rc = 0;
	optind = 1;
	while (!rc && (opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case C_MESSAGE: o->message = optarg; break;
		case C_MESSAGES: o->messages_file = optarg; break;
		case C_RENDER: o->render = 1; break;
		case C_RENDER_IDS: o->render_ids = 1; break;
		case C_SYSTEM: o->system = optarg; break;
		case C_TEMPLATE: {
			int t = bn_chat_template_from_name(optarg);
			if (t < 0)
				return cli_usage("chat", "--chat-template: '%s' is not bitnet, llama3, "
							"chatml, llama2 or falcon3", optarg);
			o->tmpl = (uint32_t)t;
			break;
		}
		case C_MAX:
			if (cli_parse_u32(optarg, &o->max_tokens) < 0 || o->max_tokens == 0)
				return cli_usage("chat", "--max-tokens: '%s' is not a whole number "
							">= 1", optarg);
			break;
		case 'h': fputs(chat_usage, stdout); return 1;
		case '?': return 2;
		default: rc = parse_sampling(o, opt, optarg); break;
		}
	}
	if (rc)
		return rc;
	if (optind < argc)
		return cli_usage("chat", "unexpected argument '%s'", argv[optind]);
	if (o->message && o->messages_file)
		return cli_usage("chat", "give --message or --messages, not both");
	if ((o->render || o->render_ids) && !o->messages_file)
		return cli_usage("chat", "--render and --render-ids go with --messages FILE");
	if (o->system && o->messages_file)
		return cli_usage("chat", "--system goes with --message or the terminal; put a "
					"system message in the --messages file");
	return 0;
}

static int load_messages(const char *path, struct conversation *c)
{
	json_error_t je;
	json_t *root = strcmp(path, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);
	if (!root) {
		fprintf(stderr, "bitnet-cli chat: %s: line %d: %s\n", path, je.line, je.text);
		return 1;
	}
	int rc = json_is_array(root) ? 0 : 1;
	if (rc)
		fprintf(stderr, "bitnet-cli chat: %s: not a JSON array of messages\n", path);
	size_t i;
	json_t *m;
	json_array_foreach(root, i, m) {
		json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
		if (!json_is_string(role) || !json_is_string(content)) {
			fprintf(stderr, "bitnet-cli chat: %s: message %zu needs string \"role\" and "
					"\"content\"\n", path, i);
			rc = 1;
			break;
		}
		/* Jansson keeps a "\u0000" inside a string; C strings cannot carry it. */
		if (strlen(json_string_value(content)) != json_string_length(content)) {
			fprintf(stderr, "bitnet-cli chat: %s: message %zu contains a NUL\n", path, i);
			rc = 1;
			break;
		}
		if (conv_add(c, json_string_value(role), json_string_value(content)) < 0) {
			rc = cli_failed("chat", "reading messages", -ENOMEM);
			break;
		}
	}
	json_decref(root);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering and replying                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Chat errors a user can act on, in words; others by their code's name. */
static int render_failed(const struct bn_vocab *v, uint32_t tmpl, int rc)
{
	if (rc == -BN_E_INVALID && tmpl == BN_CHAT_NONE && bn_vocab_chat_template(v) < BN_CHAT_BITNET) {
		fprintf(stderr, "bitnet-cli chat: the model has %s chat template; choose one with "
				"--chat-template (bitnet, llama3, chatml, llama2, falcon3)\n",
			bn_vocab_chat_template(v) == BN_CHAT_NONE ? "no" : "an unrecognised");
		return 1;
	}
	if (rc == -BN_E_INVALID) {
		fprintf(stderr, "bitnet-cli chat: the conversation does not fit the template: roles "
				"are 1-32 of [A-Za-z0-9_-], at least one message; llama2 wants user "
				"and assistant turns alternating, a system message only first\n");
		return 1;
	}
	return cli_failed("chat", "rendering the conversation", rc);
}

static int print_render(const struct bn_vocab *v, const struct chat_opts *o,
			const struct conversation *c)
{
	int len = bn_chat_render(v, o->tmpl, c->m, c->n, NULL, 0);
	char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
	if (len < 0 || !text)
		return render_failed(v, o->tmpl, len < 0 ? len : -ENOMEM);
	bn_chat_render(v, o->tmpl, c->m, c->n, text, (size_t)len + 1);
	fwrite(text, 1, (size_t)len, stdout);
	putchar('\n');
	free(text);
	return 0;
}

static int chat_ids(const struct bn_vocab *v, const struct chat_opts *o,
		    const struct conversation *c, uint32_t **ids, uint32_t *n)
{
	int k = bn_chat_tokenize(v, o->tmpl, c->m, c->n, NULL, 0);
	*ids = k > 0 ? malloc((size_t)k * sizeof(**ids)) : NULL;
	if (k < 0 || !*ids)
		return render_failed(v, o->tmpl, k < 0 ? k : -ENOMEM);
	bn_chat_tokenize(v, o->tmpl, c->m, c->n, *ids, (uint32_t)k);
	*n = (uint32_t)k;
	return 0;
}

static int print_render_ids(const struct bn_vocab *v, const struct chat_opts *o,
			    const struct conversation *c)
{
	uint32_t *ids, n;
	int rc = chat_ids(v, o, c, &ids, &n);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++)
		printf(i ? " %u" : "%u", ids[i]);
	putchar('\n');
	free(ids);
	return 0;
}

/* Streams the assistant's reply to the conversation and adds it to it. */
static int reply(struct bn_client *cl, const struct bn_vocab *v, const struct chat_opts *o,
		 struct conversation *c)
{
	uint32_t *ids, n;
	int rc = chat_ids(v, o, c, &ids, &n);
	if (rc)
		return rc;
	struct bn_request req = { .prompt = ids, .n_prompt = n, .max_tokens = o->max_tokens,
				  .flags = o->flags, .sampling = o->sampling ? &o->sp : NULL };
	struct bn_handle *h;
	struct cli_output out;
	rc = bn_submit(cl, &req, &h);
	free(ids);
	if (rc < 0)
		return cli_failed("chat", "sending", rc);
	rc = cli_output_init(&out, v, 0);
	if (rc == 0)
		rc = cli_output_stream(h, &out, -1);
	if (rc == 0)
		rc = cli_output_finish(&out);
	putchar('\n');
	fflush(stdout);
	struct bn_result r;
	if (rc == 0 && bn_result(h, &r) == 0 && r.status == BN_STATUS_ERROR)
		rc = r.error;
	int len = rc ? 0 : bn_detokenize_ex(v, out.ids, out.n, 0, NULL, 0);
	char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
	if (rc == 0 && text) {
		bn_detokenize_ex(v, out.ids, out.n, 0, text, (size_t)len + 1);
		rc = conv_add(c, "assistant", text);
	}
	free(text);
	cli_output_free(&out);
	bn_release(h);
	return rc < 0 ? cli_failed("chat", "reply", rc) : 0;
}

/* Reads user lines until end of input; /reset forgets all but the system message. */
static int interactive(struct bn_client *cl, const struct bn_vocab *v, const struct chat_opts *o,
		       struct conversation *c)
{
	size_t base = c->n; /* the system message, if any */
	char *line = NULL;
	size_t cap = 0;
	int tty = isatty(0), rc = 0;
	for (;;) {
		if (tty)
			fputs("> ", stderr);
		ssize_t len = getline(&line, &cap, stdin);
		if (len < 0)
			break;
		if (len && line[len - 1] == '\n')
			line[--len] = '\0';
		if (strcmp(line, "/reset") == 0) {
			conv_truncate(c, base);
			continue;
		}
		if (len == 0)
			continue;
		rc = conv_add(c, "user", line) < 0 ? cli_failed("chat", "reading", -ENOMEM) : 0;
		if (rc == 0)
			rc = reply(cl, v, o, c);
		if (rc)
			conv_truncate(c, c->n - 1); /* the message that got no reply */
	}
	free(line);
	if (tty)
		fputc('\n', stderr);
	return rc;
}

int cli_chat(struct bn_client *cl, int argc, char **argv)
{
	struct chat_opts o;
	int rc = parse_chat(&o, argc, argv);
	if (rc)
		return rc == 1 ? 0 : rc;
	const struct bn_vocab *v;
	rc = cli_text_vocab(cl, "chat", &v);
	struct conversation c = { 0 };
	if (rc == 0 && o.messages_file)
		rc = load_messages(o.messages_file, &c);
	else if (rc == 0 && o.system && conv_add(&c, "system", o.system) < 0)
		rc = cli_failed("chat", "", -ENOMEM);
	if (rc == 0 && o.message && conv_add(&c, "user", o.message) < 0)
		rc = cli_failed("chat", "", -ENOMEM);
	if (rc == 0) {
		if (o.render)
			rc = print_render(v, &o, &c);
		else if (o.render_ids)
			rc = print_render_ids(v, &o, &c);
		else if (o.message || o.messages_file)
			rc = reply(cl, v, &o, &c);
		else
			rc = interactive(cl, v, &o, &c);
	}
	conv_truncate(&c, 0);
	free(c.m);
	return rc;
}
