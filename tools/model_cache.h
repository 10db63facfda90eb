/* SPDX-License-Identifier: MIT */
#ifndef BITNET_MODEL_CACHE_H
#define BITNET_MODEL_CACHE_H

/* `bitnet-model cache [--cache-dir DIR] [--prune]` (argv[0] is "cache"): every file of the
 * packed-weight cache directory (daemon/model/wcache.h) with its model, size, options and
 * whether it can still be used; --prune removes those that cannot. Returns the exit status:
 * 0, 1 when the directory cannot be read or a file cannot be removed, 2 for bad usage. */
int model_cache_main(int argc, char **argv);

#endif /* BITNET_MODEL_CACHE_H */
