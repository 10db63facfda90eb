/* SPDX-License-Identifier: MIT */
#ifndef BITNETD_HF_MODEL_H
#define BITNETD_HF_MODEL_H

#include <stddef.h>

/* --model hf:REPO[:FILE]: *model becomes the file in huggingface_hub's cache (hub/hub.h),
 * written into buf, pulled from the Hub when the cache has none, with log lines for what
 * happens; any other *model (a path, or NULL) is left as it is. The cache's copy is used
 * without asking the Hub: a restart never waits on the network, and the model changes only
 * when someone pulls it again. Returns 0, or -1 after logging why. */
int bn_hf_model_resolve(const char **model, char *buf, size_t cap);

#endif /* BITNETD_HF_MODEL_H */
