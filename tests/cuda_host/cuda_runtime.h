/* SPDX-License-Identifier: MIT */
/*
 * cuda_runtime.h (CUDA host harness) — what nvcc puts in front of every .cu file, for the
 * host build: the runtime API and vector types (C and C++), and for C++ the CUDA language on
 * the host (cuda_host_device.h), its intrinsics and the launch macro. The Makefile passes
 * `-include cuda_runtime.h` when it compiles the kernel files with g++.
 */
#ifndef BN_CUDA_HOST_CUDA_RUNTIME_H
#define BN_CUDA_HOST_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"
#include "vector_types.h"

#ifdef __cplusplus
#include "cuda_host_device.h"
#include "cuda_host_intrinsics.h"
#include "cuda_host_launch.h"
#endif

#endif /* BN_CUDA_HOST_CUDA_RUNTIME_H */
