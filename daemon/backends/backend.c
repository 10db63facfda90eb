/* SPDX-License-Identifier: MIT */
#include "backend.h"

#include <string.h>

/* Every backend this build has; the daemon looks them up by --backend name. */
static const struct bn_backend_ops *const all_backends[] = {
	&bn_backend_loopback,
	&bn_backend_cpu,
#ifdef BN_HAVE_CUDA
	&bn_backend_cuda,
#endif
};

const struct bn_backend_ops *bn_backend_find(const char *name)
{
	for (size_t i = 0; i < sizeof(all_backends) / sizeof(all_backends[0]); i++)
		if (strcmp(all_backends[i]->name, name) == 0)
			return all_backends[i];
	return NULL;
}
