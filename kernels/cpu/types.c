/* SPDX-License-Identifier: MIT */
/* types.c — the tensor types as data: names, block sizes, size rules, half and bfloat16. */
#include "quant.h"

#include <string.h>

struct type_info {
	uint32_t id;
	const char *name;
	uint32_t block_weights;
	uint32_t block_bytes;   /* 0 for I2_S: its size rule is per tensor */
};

static const struct type_info type_table[] = {
	{ BN_TYPE_F32, "F32", 1, 4 },
	{ BN_TYPE_F16, "F16", 1, 2 },
	{ BN_TYPE_Q4_0, "Q4_0", BN_QK4_0, sizeof(struct bn_block_q4_0) },
	{ BN_TYPE_Q8_0, "Q8_0", BN_QK8_0, sizeof(struct bn_block_q8_0) },
	{ BN_TYPE_Q6_K, "Q6_K", BN_QK_K, sizeof(struct bn_block_q6_k) },
	{ BN_TYPE_BF16, "BF16", 1, 2 },
	{ BN_TYPE_TQ1_0, "TQ1_0", BN_QK_K, sizeof(struct bn_block_tq1_0) },
	{ BN_TYPE_TQ2_0, "TQ2_0", BN_QK_K, sizeof(struct bn_block_tq2_0) },
	{ BN_TYPE_I2_S, "I2_S", BN_QK_I2_S, 0 },
};

static const struct type_info *type_find(uint32_t type)
{
	for (size_t i = 0; i < sizeof(type_table) / sizeof(type_table[0]); i++)
		if (type_table[i].id == type)
			return &type_table[i];
	return NULL;
}

const char *bn_type_name(uint32_t type)
{
	const struct type_info *t = type_find(type);
	return t ? t->name : NULL;
}

uint32_t bn_type_block_weights(uint32_t type)
{
	const struct type_info *t = type_find(type);
	return t ? t->block_weights : 0;
}

int bn_type_is_ternary(uint32_t type)
{
	return type == BN_TYPE_TQ1_0 || type == BN_TYPE_TQ2_0 || type == BN_TYPE_I2_S;
}

uint64_t bn_row_bytes(uint32_t type, uint64_t n)
{
	const struct type_info *t = type_find(type);
	if (!t || t->block_bytes == 0 || n % t->block_weights != 0)
		return 0;
	return n / t->block_weights * t->block_bytes;
}

uint64_t bn_tensor_bytes(uint32_t type, uint64_t n)
{
	if (type == BN_TYPE_I2_S)
		return n % BN_QK_I2_S == 0 ? bn_i2_s_bytes(n) : 0;
	return bn_row_bytes(type, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Half and bfloat16, bit by bit (no F16C needed: these are the portable oracles)             */
/* ------------------------------------------------------------------------------------------ */

static uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

float bn_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	if (exp == 0x1f) /* inf or nan */
		return bits_float(sign | 0x7f800000u | (mant << 13));
	if (exp != 0)
		return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
	/* zero or subnormal: mant * 2^-24, exact in float */
	float v = (float)mant * bits_float(0x33800000u);
	return sign ? -v : v;
}

uint16_t bn_float_to_half(float f)
{
	uint32_t u = float_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t abs = u & 0x7fffffffu;
	if (abs >= 0x7f800000u) /* inf or nan: keep nan a (quiet) nan */
		return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0);
	if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return sign | 0x7c00u;
	if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
		/* Adding 0.5 (2^-1) aligns the mantissa so the FPU rounds to nearest even at the
		 * half subnormal step of 2^-24. */
		float v = bits_float(abs) + 0.5f;
		return sign | (uint16_t)(float_bits(v) - 0x3f000000u);
	}
	uint32_t mant_odd = (abs >> 13) & 1u;
	abs += 0xc8000fffu + mant_odd; /* re-bias exponent (-112 << 23) and round to nearest even */
	return sign | (uint16_t)(abs >> 13);
}

float bn_bf16_to_float(uint16_t b)
{
	return bits_float((uint32_t)b << 16);
}

uint16_t bn_float_to_bf16(float f)
{
	uint32_t u = float_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it quiet */
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}
