/* SPDX-License-Identifier: MIT */
#ifndef BITNET_MODEL_PULL_H
#define BITNET_MODEL_PULL_H

/* `bitnet-model pull REPO[:FILE] [--revision REV] [--cache-dir DIR] [--dry-run] [--quiet]`
 * (argv[0] is "pull"): the file into huggingface_hub's cache (hub/hub.h), its path printed as
 * the last line on stdout. Returns the exit status: 0, 1 when the pull failed, 2 for bad
 * usage. */
int model_pull_main(int argc, char **argv);

#endif /* BITNET_MODEL_PULL_H */
