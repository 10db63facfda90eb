// SPDX-License-Identifier: MIT
//
// launch.cuh — BN_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) is
// kernel<<<grid, block, shared_bytes, stream>>>(args...). The kernel files launch through it
// so that the CUDA host harness (tests/cuda_host), which compiles them unchanged with the host
// compiler, can run the grid on the CPU: it defines BN_LAUNCH before this header.
#ifndef BITNET_CUDA_LAUNCH_CUH
#define BITNET_CUDA_LAUNCH_CUH

#ifndef BN_LAUNCH
#define BN_LAUNCH(kernel, grid, block, shared_bytes, stream)                                    \
	kernel<<<(grid), (block), (shared_bytes), (stream)>>>
#endif

#endif // BITNET_CUDA_LAUNCH_CUH
