/* SPDX-License-Identifier: MIT */
/* model_cmd.c — bitnet-model's subcommands' usage errors (model_cmd.h). */
#include "model_cmd.h"

#include <stdio.h>

int model_cmd_usage(const char *cmd, const char *what, const char *arg)
{
	fprintf(stderr, "bitnet-model %s: %s%s%s (see bitnet-model %s --help)\n", cmd, what,
		arg ? " " : "", arg ? arg : "", cmd);
	return 2;
}

int model_cmd_bad_option(const char *cmd, int opt, const char *arg)
{
	return model_cmd_usage(cmd, opt == ':' ? "this option needs a value:" : "unknown option",
			       arg);
}
