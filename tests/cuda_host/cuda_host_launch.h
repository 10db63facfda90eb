// SPDX-License-Identifier: MIT
//
// cuda_host_launch.h — BN_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) in the
// CUDA host harness. kernels/cuda/launch.cuh expands it to kernel<<<...>>>(args...) under nvcc;
// here it converts the arguments to the kernel's parameter types (as a launch does), checks
// that each pointer argument points into device or pinned memory, and hands the grid to
// grid.c, which runs every GPU thread as the kernel called on its own copy of them.
#ifndef BN_CUDA_HOST_LAUNCH_H
#define BN_CUDA_HOST_LAUNCH_H

#ifndef __cplusplus
#error "cuda_host_launch.h is for device code compiled as C++"
#endif

#include "cuda_host.h"

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace bn_cuda_host {

template <typename... P>
class launch_call {
public:
	launch_call(void (*kernel)(P...), const char *name, dim3 grid, dim3 block, size_t shared_bytes,
		    cudaStream_t stream)
		: kernel_(kernel), name_(name), grid_(grid), block_(block), shared_bytes_(shared_bytes),
		  stream_(stream)
	{
	}

	template <typename... A>
	void operator()(A &&...args) const
	{
		static_assert(sizeof...(A) == sizeof...(P), "a launch passes every kernel parameter");
		const frame f{ kernel_, std::tuple<P...>(std::forward<A>(args)...) };
		check_pointers(f.values, std::index_sequence_for<P...>{});
		bn_cuda_host_launch l{};
		l.kernel_name = name_;
		l.kernel = reinterpret_cast<const void *>(kernel_);
		l.grid = grid_;
		l.block = block_;
		l.shared_bytes = shared_bytes_;
		l.stream = stream_;
		l.run_thread = &run_thread;
		l.args = &f;
		l.args_size = sizeof(f);
		bn_cuda_host_launch_grid(&l);
	}

private:
	struct frame {
		void (*kernel)(P...);
		std::tuple<P...> values;
	};

	// One GPU thread: the kernel takes its parameters by value, so each thread gets copies.
	static void run_thread(const void *args)
	{
		const frame *f = static_cast<const frame *>(args);
		std::apply(f->kernel, f->values);
	}

	template <typename T>
	void check_pointer(unsigned i, const T &v) const
	{
		if constexpr (std::is_pointer<T>::value)
			bn_cuda_host_check_pointer(name_, i, (const void *)v);
		else
			(void)i, (void)v;
	}

	template <std::size_t... I>
	void check_pointers(const std::tuple<P...> &values, std::index_sequence<I...>) const
	{
		(check_pointer((unsigned)I, std::get<I>(values)), ...);
	}

	void (*kernel_)(P...);
	const char *name_;
	dim3 grid_, block_;
	size_t shared_bytes_;
	cudaStream_t stream_;
};

template <typename... P>
launch_call<P...> launch(void (*kernel)(P...), const char *name, dim3 grid, dim3 block,
			 size_t shared_bytes, cudaStream_t stream)
{
	return launch_call<P...>(kernel, name, grid, block, shared_bytes, stream);
}

} // namespace bn_cuda_host

#define BN_LAUNCH(kernel, grid, block, shared_bytes, stream)                                    \
	::bn_cuda_host::launch(kernel, #kernel, grid, block, shared_bytes, stream)

#endif // BN_CUDA_HOST_LAUNCH_H
