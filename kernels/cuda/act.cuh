// SPDX-License-Identifier: MIT
//
// act.cuh — the FFN's gated activation, act(g) * u, one expression for every kernel that
// applies it (gate_kernel in float.cu, gate_quant_kernel in fused.cu), so the fused kernel
// gives the unfused one's bits. act: BN_CUDA_ACT_* (cuda_kernels.h), the CPU's forward_layer.c
// expressions: silu g / (1 + e^-g), relu2 relu(g)^2, GELU's tanh approximation
// 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
#ifndef BITNET_CUDA_ACT_CUH
#define BITNET_CUDA_ACT_CUH

#include "cuda_kernels.h"

__device__ __forceinline__ float bn_act_mul(float g, float u, int act)
{
	float a;
	if (act == BN_CUDA_ACT_RELU2)
		a = g > 0.0f ? g * g : 0.0f;
	else if (act == BN_CUDA_ACT_GELU)
		a = 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
	else
		a = g / (1.0f + expf(-g));
	return a * u;
}

#endif
