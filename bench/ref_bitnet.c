/* SPDX-License-Identifier: MIT */
/*
 * ref_bitnet — an independent reference of the bitnet-b1.58 graph (BitNet b1.58 2B4T) in
 * double precision, to tell what the graph computes from what a way of quantising its
 * activations adds (docs/PERFORMANCE.md, "Against llama.cpp"). Written from the model's
 * definition, not from bitnetd's forward pass or kernels; it shares only the GGUF container
 * reader (daemon/model/gguf.c) and the score-file format (bench/agreement.h).
 *
 *   ref_bitnet --model F16.gguf --ids IDS --act bitlinear|q8k64|float [--f16-kv] [--f32-in]
 *              [--out SCORES_OUT] [--against SCORES] [--margin M] [--threads N]
 *
 * The model: a bitnet-b1.58 file whose linear weights are F16 and ternary (each tensor
 * {-s, 0, +s}: the F16 twin `llama-quantize --allow-requantize FILE.gguf F16.gguf F16` makes of
 * an I2_S file, read here as codes and one scale; a tensor that is not ternary is refused),
 * F32 norms, F16 embedding and head. Per layer: x += W_o(subnorm(attn(rope(W_q h), rope(W_k h),
 * W_v h))) with h = rmsnorm(x); x += W_down(subnorm(relu(W_gate h)^2 * W_up h)) with
 * h = rmsnorm(x); NeoX RoPE (pairs i, i + d/2), GQA, causal softmax with scale 1/sqrt(d);
 * logits = W_head rmsnorm(x). Everything is double except where --act or an option rounds.
 *
 * --act: how the input of every ternary projection is quantised:
 *   bitlinear  BitLinear's: one absmax scale per token, int8 (round half to even, 127/absmax)
 *   q8k64      ik_llama.cpp's IQ2_BN path (Q8_K64, iqk_quantize.cpp quantize_row_q8_K64_ref,
 *              its x86 branch): the row in float, four scales, scale i the absmax of the
 *              elements whose index mod 16 lies in [4i, 4i + 4), d = absmax / 127 and
 *              q = round-half-even(x * (1 / d)), all in float; the dot is exact here (the fork
 *              sums d * sum(code * q) - d * sum(q) in float)
 *   float      none (the unquantised graph)
 * --f16-kv: K (after RoPE) and V rounded to half, as ik_llama.cpp's default F16 KV cache
 * stores them. ik_llama.cpp multiplies an F16 matrix (the head; every matrix of the F16 twin)
 * by float activations as they are (iqk_gemm_floats.cpp: F16 x F32), so nothing else rounds:
 * --act q8k64 --f16-kv is the fork on an IQ2_BN file, --act float --f16-kv on the F16 twin.
 * --f32-in: every projection's input rounded to float before it is quantised, a perturbation
 * of one part in 2^24 (what computing in float instead of double does to the input, at
 * least): how far the same scheme moves when nothing but rounding changes.
 *
 * Output: --out writes this forward pass's score file (bench/agreement.h: what
 * `bitnet-cli score --top 2` writes, so `compare_llamacpp logits --bitnetd SCORES_OUT` puts
 * llama.cpp's logits beside it); --against SCORES prints the agreement of this pass's argmax
 * with SCORES' top-1 on SCORES' clear-margin positions (keys as compare_llamacpp's). IDS: one
 * sequence of token ids a line. Cost: every projection once per token in double, about 2.4 G
 * multiply-adds a token on the 30-layer 2B4T shape (a minute or two a 64-token line on 2
 * threads); bench/compare_llamacpp.sh's DRIFT mode runs it.
 */
#define _GNU_SOURCE
#include "agreement.h"
#include "bn_blocks.h"
#include "model/gguf.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 1024
#define LINE_MAX_BYTES (1 << 20)
#define MAX_THREADS 64

enum act { ACT_BITLINEAR, ACT_Q8K64, ACT_FLOAT };

struct opts {
	const char *model, *ids, *out, *against;
	enum act act;
	int f16_kv, f32_in, threads;
	double margin;
};

/* A matrix: rows of n_in F16 values; ternary ones are read as codes times one scale. */
struct lin {
	struct bn_gguf_str name;         /* into the mapping: not NUL-terminated */
	const uint16_t *w;
	uint32_t n_in, n_out;
	int ternary;
	uint16_t scale_bits;             /* |w| of every nonzero weight (ternary) */
	double scale;
};

struct layer {
	const float *attn_norm, *attn_sub_norm, *ffn_norm, *ffn_sub_norm;
	struct lin wq, wk, wv, wo, gate, up, down;
};

struct model {
	struct bn_gguf g;
	uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
	double rope_base, eps;
	const uint16_t *tok_embd;
	const float *output_norm;
	struct lin head;
	struct layer *layers;
};

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ref_bitnet: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Half precision (IEEE binary16), written out so that nothing depends on the compiler's       */
/* ------------------------------------------------------------------------------------------ */

static double half_to_double(uint16_t h)
{
	int exp = (h >> 10) & 0x1f;
	double mant = h & 0x3ff, v;
	if (exp == 0)
		v = ldexp(mant, -24);
	else if (exp == 31)
		v = mant != 0 ? NAN : INFINITY;
	else
		v = ldexp(1024.0 + mant, exp - 25);
	return h & 0x8000 ? -v : v;
}

/* float to half, round to nearest even (F. Giesen's float_to_half_fast3_rtne). */
static uint16_t float_to_half(float fl)
{
	const uint32_t f32_inf = 255u << 23, f16_max = (127u + 16u) << 23;
	const uint32_t denorm_magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
	uint32_t f, sign;
	float denorm_magic;
	uint16_t o;
	memcpy(&f, &fl, sizeof(f));
	memcpy(&denorm_magic, &denorm_magic_bits, sizeof(denorm_magic));
	sign = f & 0x80000000u;
	f ^= sign;
	if (f >= f16_max) {
		o = f > f32_inf ? 0x7e00 : 0x7c00;
	} else if (f < (113u << 23)) { /* a half subnormal or zero: let the FPU round */
		float t;
		memcpy(&t, &f, sizeof(t));
		t += denorm_magic;
		memcpy(&f, &t, sizeof(f));
		o = (uint16_t)(f - denorm_magic_bits);
	} else {
		uint32_t mant_odd = (f >> 13) & 1;
		f += ((uint32_t)(15 - 127) << 23) + 0xfff;
		f += mant_odd;
		o = (uint16_t)(f >> 13);
	}
	return (uint16_t)(o | (sign >> 16));
}

/* What llama.cpp's F16 KV cache stores for a value (it holds the value in float). */
static double round_half(double x)
{
	return half_to_double(float_to_half((float)x));
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static const struct bn_gguf_tensor *tensor(const struct model *m, const char *name,
					   uint32_t type, uint64_t ne0, uint64_t ne1)
{
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&m->g, name);
	if (!t) {
		fail("%s: no tensor %s", m->g.path, name);
		return NULL;
	}
	uint64_t ne1_got = t->n_dims > 1 ? t->ne[1] : 1;
	if (t->type != type || t->ne[0] != ne0 || ne1_got != ne1) {
		fail("%s: tensor %s is type %u [%llu, %llu], expected type %u [%llu, %llu] (an F16 "
		     "twin of a bitnet-b1.58 file: llama-quantize --allow-requantize IN OUT F16)",
		     m->g.path, name, t->type, (unsigned long long)t->ne[0],
		     (unsigned long long)ne1_got, type, (unsigned long long)ne0,
		     (unsigned long long)ne1);
		return NULL;
	}
	return t;
}

static const float *norm_weight(const struct model *m, const char *name, uint32_t n)
{
	const struct bn_gguf_tensor *t = tensor(m, name, BN_TYPE_F32, n, 1);
	return t ? (const float *)t->data : NULL;
}

/* A ternary matrix's scale: the magnitude of its first nonzero weight (every other nonzero
 * weight is checked against it as its row is read). */
static int load_lin(const struct model *m, struct lin *l, const char *name, uint32_t n_in,
		    uint32_t n_out, int ternary)
{
	const struct bn_gguf_tensor *t = tensor(m, name, BN_TYPE_F16, n_in, n_out);
	if (!t)
		return -1;
	*l = (struct lin){ .name = t->name, .w = (const uint16_t *)t->data, .n_in = n_in,
			   .n_out = n_out, .ternary = ternary, .scale = 1.0 };
	for (uint64_t k = 0; ternary && k < (uint64_t)n_in * n_out; k++)
		if (l->w[k] & 0x7fff) {
			l->scale_bits = l->w[k] & 0x7fff;
			l->scale = half_to_double(l->scale_bits);
			break;
		}
	return 0;
}

static int get_u32(const struct model *m, const char *suffix, uint32_t *out)
{
	char key[128];
	snprintf(key, sizeof(key), "bitnet-b1.58.%s", suffix);
	return bn_gguf_get_u32(&m->g, key, out) ? fail("%s: no %s", m->g.path, key) : 0;
}

static int load_hparams(struct model *m)
{
	struct bn_gguf_str arch;
	float base, eps;
	if (bn_gguf_get_str(&m->g, "general.architecture", &arch) ||
	    !bn_gguf_str_eq(arch, "bitnet-b1.58"))
		return fail("%s: not a bitnet-b1.58 file", m->g.path);
	if (get_u32(m, "embedding_length", &m->n_embd) || get_u32(m, "block_count", &m->n_layer) ||
	    get_u32(m, "attention.head_count", &m->n_head) ||
	    get_u32(m, "attention.head_count_kv", &m->n_head_kv) ||
	    get_u32(m, "feed_forward_length", &m->n_ff))
		return 1;
	if (bn_gguf_get_f32(&m->g, "bitnet-b1.58.rope.freq_base", &base) ||
	    bn_gguf_get_f32(&m->g, "bitnet-b1.58.attention.layer_norm_rms_epsilon", &eps))
		return fail("%s: no rope.freq_base or layer_norm_rms_epsilon", m->g.path);
	m->rope_base = base;
	m->eps = eps;
	if (!m->n_head || !m->n_head_kv || m->n_embd % m->n_head || m->n_head % m->n_head_kv)
		return fail("%s: heads that do not divide", m->g.path);
	m->head_dim = m->n_embd / m->n_head;
	const struct bn_gguf_tensor *e = bn_gguf_find_tensor(&m->g, "token_embd.weight");
	if (!e || e->n_dims != 2 || e->type != BN_TYPE_F16 || e->ne[0] != m->n_embd)
		return fail("%s: no F16 token_embd.weight of width %u", m->g.path, m->n_embd);
	m->n_vocab = (uint32_t)e->ne[1];
	m->tok_embd = (const uint16_t *)e->data;
	return 0;
}

static int load_layer(struct model *m, uint32_t i)
{
	struct layer *L = &m->layers[i];
	uint32_t e = m->n_embd, q = m->n_head * m->head_dim, kv = m->n_head_kv * m->head_dim;
	char n[4][64];
	const char *const fmt[4] = { "blk.%u.attn_norm.weight", "blk.%u.attn_sub_norm.weight",
			       "blk.%u.ffn_norm.weight", "blk.%u.ffn_sub_norm.weight" };
	for (int k = 0; k < 4; k++)
		snprintf(n[k], sizeof(n[k]), fmt[k], i);
	L->attn_norm = norm_weight(m, n[0], e);
	L->attn_sub_norm = norm_weight(m, n[1], q);
	L->ffn_norm = norm_weight(m, n[2], e);
	L->ffn_sub_norm = norm_weight(m, n[3], m->n_ff);
	if (!L->attn_norm || !L->attn_sub_norm || !L->ffn_norm || !L->ffn_sub_norm)
		return -1;
	struct { struct lin *l; const char *fmt; uint32_t n_in, n_out; } lins[7] = {
		{ &L->wq, "blk.%u.attn_q.weight", e, q },
		{ &L->wk, "blk.%u.attn_k.weight", e, kv },
		{ &L->wv, "blk.%u.attn_v.weight", e, kv },
		{ &L->wo, "blk.%u.attn_output.weight", q, e },
		{ &L->gate, "blk.%u.ffn_gate.weight", e, m->n_ff },
		{ &L->up, "blk.%u.ffn_up.weight", e, m->n_ff },
		{ &L->down, "blk.%u.ffn_down.weight", m->n_ff, e },
	};
	for (int k = 0; k < 7; k++) {
		char name[64];
		snprintf(name, sizeof(name), lins[k].fmt, i);
		if (load_lin(m, lins[k].l, name, lins[k].n_in, lins[k].n_out, 1))
			return -1;
	}
	return 0;
}

static int load_model(struct model *m, const char *path)
{
	char err[BN_GGUF_ERR_LEN];
	if (bn_gguf_open(&m->g, path, err))
		return fail("%s", err);
	if (load_hparams(m))
		return 1;
	m->layers = calloc(m->n_layer, sizeof(*m->layers));
	if (!m->layers)
		return fail("%s", strerror(ENOMEM));
	for (uint32_t i = 0; i < m->n_layer; i++)
		if (load_layer(m, i))
			return 1;
	m->output_norm = norm_weight(m, "output_norm.weight", m->n_embd);
	const char *head = bn_gguf_find_tensor(&m->g, "output.weight") ? "output.weight"
								      : "token_embd.weight";
	if (!m->output_norm || load_lin(m, &m->head, head, m->n_embd, m->n_vocab, 0))
		return 1;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Matrix products: y[t][o] = sum_k W[o][k] x[t][k], rows split over threads                   */
/* ------------------------------------------------------------------------------------------ */

/* Eight partial sums in a fixed order; vectorised where the machine can. */
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
static double dot(const double *a, const double *b, uint32_t n)
{
	double acc[8] = { 0 };
	uint32_t k = 0;
	for (; k + 8 <= n; k += 8)
		for (int j = 0; j < 8; j++)
			acc[j] += a[k + j] * b[k + j];
	for (; k < n; k++)
		acc[k & 7] += a[k] * b[k];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

struct mm_job {
	const struct lin *l;
	const double *x;                 /* [T][n_in] */
	double *y;                       /* [T][n_out] */
	uint32_t T, row0, row1;
	int bad;                         /* a weight of a ternary matrix that is not 0 or +-s */
};

/* Row o of l as doubles: the codes -1, 0, +1 of a ternary matrix, else the values. */
static int decode_row(const struct lin *l, uint32_t o, double *row)
{
	const uint16_t *w = l->w + (size_t)o * l->n_in;
	for (uint32_t k = 0; k < l->n_in; k++) {
		if (!l->ternary) {
			row[k] = half_to_double(w[k]);
		} else if (!(w[k] & 0x7fff)) {
			row[k] = 0.0;
		} else {
			if ((w[k] & 0x7fff) != l->scale_bits)
				return -1;
			row[k] = w[k] & 0x8000 ? -1.0 : 1.0;
		}
	}
	return 0;
}

static void *mm_worker(void *arg)
{
	struct mm_job *j = arg;
	const struct lin *l = j->l;
	double *row = malloc(sizeof(double) * l->n_in);
	if (!row) {
		j->bad = -ENOMEM;
		return NULL;
	}
	for (uint32_t o = j->row0; o < j->row1 && !j->bad; o++) {
		if (decode_row(l, o, row)) {
			j->bad = -EINVAL;
			break;
		}
		for (uint32_t t = 0; t < j->T; t++)
			j->y[(size_t)t * l->n_out + o] =
				l->scale * dot(row, j->x + (size_t)t * l->n_in, l->n_in);
	}
	free(row);
	return NULL;
}

static int matmul(const struct lin *l, const double *x, double *y, uint32_t T, int threads)
{
	struct mm_job jobs[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	int started[MAX_THREADS] = { 0 }, rc = 0;
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct mm_job){ .l = l, .x = x, .y = y, .T = T,
					   .row0 = (uint32_t)((uint64_t)l->n_out * i / threads),
					   .row1 = (uint32_t)((uint64_t)l->n_out * (i + 1) / threads) };
		started[i] = i > 0 && !pthread_create(&tid[i], NULL, mm_worker, &jobs[i]);
		if (i > 0 && !started[i])
			mm_worker(&jobs[i]);
	}
	mm_worker(&jobs[0]);
	for (int i = 0; i < threads; i++) {
		if (started[i])
			pthread_join(tid[i], NULL);
		if (jobs[i].bad)
			rc = jobs[i].bad;
	}
	if (rc == -EINVAL)
		return fail("%.*s is not ternary: a weight that is neither 0 nor +-%g",
			    (int)l->name.len, l->name.ptr, l->scale);
	return rc ? fail("%s", strerror(-rc)) : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Activation quantisation: each token's row replaced by the value its int8 codes stand for    */
/* ------------------------------------------------------------------------------------------ */

static double clamp_i8(double q)
{
	return q > 127.0 ? 127.0 : q < -128.0 ? -128.0 : q;
}

/* BitLinear: one absmax scale a token. */
static void quant_bitlinear(double *x, uint32_t n)
{
	double amax = 0.0;
	for (uint32_t k = 0; k < n; k++)
		amax = fmax(amax, fabs(x[k]));
	if (amax == 0.0)
		return;
	double s = 127.0 / amax;
	for (uint32_t k = 0; k < n; k++)
		x[k] = clamp_i8(nearbyint(x[k] * s)) * (amax / 127.0);
}

/* ik_llama.cpp's Q8_K64 (see the header): four interleaved scales, in float. */
static void quant_q8k64(double *x, uint32_t n)
{
	float max[4] = { 0 }, d[4], id[4];
	for (uint32_t k = 0; k < n; k++) {
		int lane = (k % 16) / 4;
		max[lane] = fmaxf(max[lane], fabsf((float)x[k]));
	}
	for (int i = 0; i < 4; i++) {
		d[i] = max[i] / 127;
		id[i] = d[i] > 0 ? 1 / d[i] : 0.f;
	}
	for (uint32_t k = 0; k < n; k++) {
		int lane = (k % 16) / 4;
		float q = nearbyintf(id[lane] * (float)x[k]);
		x[k] = clamp_i8(q) * (double)d[lane];
	}
}

/* The input of a ternary projection, token by token, as the options say. */
static void project_input(const struct opts *o, double *x, uint32_t n, uint32_t T)
{
	for (uint32_t t = 0; t < T; t++) {
		double *r = x + (size_t)t * n;
		for (uint32_t k = 0; o->f32_in && k < n; k++)
			r[k] = (float)r[k];
		if (o->act == ACT_BITLINEAR)
			quant_bitlinear(r, n);
		else if (o->act == ACT_Q8K64)
			quant_q8k64(r, n);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The forward pass of one sequence                                                             */
/* ------------------------------------------------------------------------------------------ */

struct state {
	uint32_t T;
	double *x, *h, *q, *k, *v, *att, *gate, *up, *tmp, *scores, *logits;
};

static void rmsnorm(double *y, const double *x, const float *w, uint32_t n, double eps)
{
	double ss = 0.0;
	for (uint32_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	double r = 1.0 / sqrt(ss / n + eps);
	for (uint32_t i = 0; i < n; i++)
		y[i] = x[i] * r * w[i];
}

static void rmsnorm_rows(double *y, const double *x, const float *w, uint32_t n, uint32_t T,
			 double eps)
{
	for (uint32_t t = 0; t < T; t++)
		rmsnorm(y + (size_t)t * n, x + (size_t)t * n, w, n, eps);
}

/* NeoX RoPE: pairs (i, i + d/2) of each head, angle pos * base^(-2i/d). */
static void rope(const struct model *m, double *v, uint32_t n_heads, uint32_t pos)
{
	uint32_t d = m->head_dim, half = d / 2;
	for (uint32_t h = 0; h < n_heads; h++)
		for (uint32_t i = 0; i < half; i++) {
			double angle = pos * pow(m->rope_base, -2.0 * i / d);
			double c = cos(angle), s = sin(angle), *p = v + (size_t)h * d;
			double a = p[i], b = p[i + half];
			p[i] = a * c - b * s;
			p[i + half] = a * s + b * c;
		}
}

/* Causal attention of every position; att[t] = the heads' outputs, concatenated. */
static void attention(const struct model *m, struct state *s)
{
	uint32_t d = m->head_dim, q_dim = m->n_head * d, kv_dim = m->n_head_kv * d;
	uint32_t group = m->n_head / m->n_head_kv;
	double scale = 1.0 / sqrt((double)d);
	for (uint32_t t = 0; t < s->T; t++)
		for (uint32_t h = 0; h < m->n_head; h++) {
			const double *q = s->q + (size_t)t * q_dim + (size_t)h * d;
			uint32_t off = (h / group) * d;
			double max = -INFINITY, sum = 0.0;
			for (uint32_t u = 0; u <= t; u++) {
				const double *k = s->k + (size_t)u * kv_dim + off;
				double dotp = 0.0;
				for (uint32_t i = 0; i < d; i++)
					dotp += q[i] * k[i];
				s->scores[u] = dotp * scale;
				max = fmax(max, s->scores[u]);
			}
			for (uint32_t u = 0; u <= t; u++) {
				s->scores[u] = exp(s->scores[u] - max);
				sum += s->scores[u];
			}
			double *out = s->att + (size_t)t * q_dim + (size_t)h * d;
			memset(out, 0, sizeof(double) * d);
			for (uint32_t u = 0; u <= t; u++) {
				const double *v = s->v + (size_t)u * kv_dim + off;
				double p = s->scores[u] / sum;
				for (uint32_t i = 0; i < d; i++)
					out[i] += p * v[i];
			}
		}
}

static void add_rows(double *x, const double *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

/* h (the normed input, [T][n]) through a projection: quantised copy in tmp, then W. */
static int project(const struct opts *o, const struct lin *l, const double *h, double *tmp,
		   double *y, uint32_t T)
{
	memcpy(tmp, h, sizeof(double) * T * l->n_in);
	project_input(o, tmp, l->n_in, T);
	return matmul(l, tmp, y, T, o->threads);
}

static int attention_block(const struct model *m, const struct layer *L, const struct opts *o,
			   struct state *s)
{
	uint32_t T = s->T, e = m->n_embd, d = m->head_dim, q_dim = m->n_head * d;
	uint32_t kv_dim = m->n_head_kv * d;
	rmsnorm_rows(s->h, s->x, L->attn_norm, e, T, m->eps);
	if (project(o, &L->wq, s->h, s->tmp, s->q, T) || project(o, &L->wk, s->h, s->tmp, s->k, T) ||
	    project(o, &L->wv, s->h, s->tmp, s->v, T))
		return 1;
	for (uint32_t t = 0; t < T; t++) {
		rope(m, s->q + (size_t)t * q_dim, m->n_head, t);
		rope(m, s->k + (size_t)t * kv_dim, m->n_head_kv, t);
	}
	for (size_t i = 0; o->f16_kv && i < (size_t)T * kv_dim; i++) {
		s->k[i] = round_half(s->k[i]);
		s->v[i] = round_half(s->v[i]);
	}
	attention(m, s);
	rmsnorm_rows(s->att, s->att, L->attn_sub_norm, q_dim, T, m->eps);
	if (project(o, &L->wo, s->att, s->tmp, s->h, T))
		return 1;
	add_rows(s->x, s->h, (size_t)T * e);
	return 0;
}

static int ffn_block(const struct model *m, const struct layer *L, const struct opts *o,
		     struct state *s)
{
	uint32_t T = s->T, e = m->n_embd, f = m->n_ff;
	rmsnorm_rows(s->h, s->x, L->ffn_norm, e, T, m->eps);
	if (project(o, &L->gate, s->h, s->tmp, s->gate, T) ||
	    project(o, &L->up, s->h, s->tmp, s->up, T))
		return 1;
	for (size_t i = 0; i < (size_t)T * f; i++) {
		double g = s->gate[i] > 0.0 ? s->gate[i] : 0.0;
		s->gate[i] = g * g * s->up[i];
	}
	rmsnorm_rows(s->gate, s->gate, L->ffn_sub_norm, f, T, m->eps);
	if (project(o, &L->down, s->gate, s->tmp, s->h, T))
		return 1;
	add_rows(s->x, s->h, (size_t)T * e);
	return 0;
}

/* Logits of positions 0..T-2 (the next token of each) into s->logits. */
static int forward(const struct model *m, const struct opts *o, const int32_t *ids,
		   struct state *s)
{
	uint32_t T = s->T, e = m->n_embd;
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t i = 0; i < e; i++)
			s->x[(size_t)t * e + i] = half_to_double(m->tok_embd[(size_t)ids[t] * e + i]);
	for (uint32_t li = 0; li < m->n_layer; li++)
		if (attention_block(m, &m->layers[li], o, s) || ffn_block(m, &m->layers[li], o, s))
			return 1;
	rmsnorm_rows(s->h, s->x, m->output_norm, e, T - 1, m->eps);
	return matmul(&m->head, s->h, s->logits, T - 1, o->threads);
}

static void state_free(struct state *s)
{
	double *all[] = { s->x, s->h, s->q, s->k, s->v, s->att, s->gate, s->up, s->tmp, s->scores,
			  s->logits };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]);
}

static int state_new(struct state *s, const struct model *m, uint32_t T)
{
	size_t q = (size_t)m->n_head * m->head_dim, kv = (size_t)m->n_head_kv * m->head_dim;
	size_t wide = m->n_ff > q ? m->n_ff : q;
	wide = wide > m->n_embd ? wide : m->n_embd;
	*s = (struct state){ .T = T };
	s->x = malloc(sizeof(double) * T * m->n_embd);
	s->h = malloc(sizeof(double) * T * wide);
	s->q = malloc(sizeof(double) * T * q);
	s->k = malloc(sizeof(double) * T * kv);
	s->v = malloc(sizeof(double) * T * kv);
	s->att = malloc(sizeof(double) * T * q);
	s->gate = malloc(sizeof(double) * T * m->n_ff);
	s->up = malloc(sizeof(double) * T * m->n_ff);
	s->tmp = malloc(sizeof(double) * T * wide);
	s->scores = malloc(sizeof(double) * T);
	s->logits = malloc(sizeof(double) * T * m->n_vocab);
	if (s->x && s->h && s->q && s->k && s->v && s->att && s->gate && s->up && s->tmp &&
	    s->scores && s->logits)
		return 0;
	state_free(s);
	return fail("%s", strerror(ENOMEM));
}

/* ------------------------------------------------------------------------------------------ */
/* Lines of IDS in, score files and agreement out                                              */
/* ------------------------------------------------------------------------------------------ */


/* This line's logits against its block of the score file, position by position. */
static int against_block(const struct model *m, const struct opts *o, const struct state *s,
			 const int32_t *ids, FILE *scores, char *buf, int line,
			 struct agreement *a)
{
	for (uint32_t i = 1; i < s->T; i++) {
		struct top2 t;
		if (!fgets(buf, LINE_MAX_BYTES, scores) || parse_score_line(buf, &t) ||
		    t.pos != (int)i || t.scored != ids[i])
			return fail("%s: not a score file of IDS's lines", o->against);
		if (t.id[0] < 0 || t.id[1] < 0 || (uint32_t)t.id[0] >= m->n_vocab ||
		    (uint32_t)t.id[1] >= m->n_vocab)
			return fail("%s: a token id beyond the vocabulary", o->against);
		count_position(a, s->logits + (size_t)(i - 1) * m->n_vocab, (int)m->n_vocab, &t,
			       line);
	}
	if (!fgets(buf, LINE_MAX_BYTES, scores) || strncmp(buf, "sum=", 4))
		return fail("%s: a block without its sum= line", o->against);
	return 0;
}

static void write_block(const struct model *m, const struct state *s, const int32_t *ids,
			FILE *out)
{
	double sum = 0.0;
	for (uint32_t i = 1; i < s->T; i++)
		write_score_line(out, (int)i, ids[i], s->logits + (size_t)(i - 1) * m->n_vocab,
				 (int)m->n_vocab, &sum);
	fprintf(out, "sum=%.17g tokens=%u scored=%u\n", sum, s->T, s->T - 1);
	fflush(out);
}

static int run(const struct model *m, const struct opts *o, FILE *ids_f, FILE *out,
	       FILE *against)
{
	static int32_t ids[MAX_IDS];
	char *line = malloc(LINE_MAX_BYTES), *buf = malloc(LINE_MAX_BYTES);
	struct agreement a = { .margin = o->margin };
	int n, rc = line && buf ? 0 : fail("%s", strerror(ENOMEM)), got;
	for (int k = 1; !rc && (got = read_ids_line(ids_f, line, LINE_MAX_BYTES, ids, MAX_IDS, &n,
						    m->n_vocab)) != 0; k++) {
		struct state s;
		if (got < 0 || n < 2) {
			rc = fail("%s: line %d is not 2 to %d token ids of the model", o->ids, k,
				  MAX_IDS);
			break;
		}
		if (state_new(&s, m, (uint32_t)n)) {
			rc = 1;
			break;
		}
		rc = forward(m, o, ids, &s);
		if (!rc && out)
			write_block(m, &s, ids, out);
		if (!rc && against)
			rc = against_block(m, o, &s, ids, against, buf, k, &a);
		state_free(&s);
	}
	if (!rc && against)
		print_agreement(&a);
	free(line);
	free(buf);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static int usage(void)
{
	fputs("usage: ref_bitnet --model F16.gguf --ids IDS --act bitlinear|q8k64|float\n"
	      "                  [--f16-kv] [--f32-in] [--out SCORES_OUT] [--against SCORES]\n"
	      "                  [--margin NATS] [--threads N]\n",
	      stderr);
	return 2;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	const char *act = NULL;
	*o = (struct opts){ .margin = 1.0, .threads = 2 };
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(k, "--f16-kv") || !strcmp(k, "--f32-in")) {
			*(!strcmp(k, "--f16-kv") ? &o->f16_kv : &o->f32_in) = 1;
			continue;
		}
		if (!v)
			return usage();
		i++;
		if (!strcmp(k, "--model"))
			o->model = v;
		else if (!strcmp(k, "--ids"))
			o->ids = v;
		else if (!strcmp(k, "--out"))
			o->out = v;
		else if (!strcmp(k, "--against"))
			o->against = v;
		else if (!strcmp(k, "--act"))
			act = v;
		else if (!strcmp(k, "--margin"))
			o->margin = strtod(v, NULL);
		else if (!strcmp(k, "--threads"))
			o->threads = atoi(v);
		else
			return usage();
	}
	if (act && !strcmp(act, "bitlinear"))
		o->act = ACT_BITLINEAR;
	else if (act && !strcmp(act, "q8k64"))
		o->act = ACT_Q8K64;
	else if (act && !strcmp(act, "float"))
		o->act = ACT_FLOAT;
	else
		return usage();
	if (!o->model || !o->ids || (!o->out && !o->against) || o->threads < 1 ||
	    o->threads > MAX_THREADS || !(o->margin >= 0))
		return usage();
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct model m = { 0 };
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc;
	if (load_model(&m, o.model))
		return 1;
	if (o.act == ACT_Q8K64 && (m.n_embd % 64 || m.n_ff % 64))
		return fail("q8k64 needs rows of a multiple of 64");
	FILE *ids = fopen(o.ids, "r");
	FILE *out = o.out ? fopen(o.out, "w") : NULL, *against = o.against ? fopen(o.against, "r") : NULL;
	if (!ids || (o.out && !out) || (o.against && !against))
		rc = fail("cannot open %s", !ids ? o.ids : o.out && !out ? o.out : o.against);
	else
		rc = run(&m, &o, ids, out, against);
	if (ids)
		fclose(ids);
	if (out && fclose(out))
		rc = fail("%s: %s", o.out, strerror(errno));
	if (against)
		fclose(against);
	free(m.layers);
	bn_gguf_close(&m.g);
	return rc;
}
