/* SPDX-License-Identifier: MIT */
/*
 * log.h — structured log lines on stderr: `level=info msg="..." key=value ...`, one per event,
 * so journald keeps them whole and a grep or a parser can read them.
 */
#ifndef BITNETD_LOG_H
#define BITNETD_LOG_H

enum bn_log_level { BN_LOG_ERROR = 0, BN_LOG_WARN = 1, BN_LOG_INFO = 2, BN_LOG_DEBUG = 3 };

void bn_log_set_level(enum bn_log_level level);
/* Parses "error", "warn", "info", "debug". Returns 0 or -1. */
int bn_log_parse_level(const char *name, enum bn_log_level *out);
int bn_log_enabled(enum bn_log_level level);

/* fmt continues the line after `level=... `: by convention `msg="..." key=value ...`. */
void bn_log(enum bn_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define bn_log_error(...) bn_log(BN_LOG_ERROR, __VA_ARGS__)
#define bn_log_warn(...) bn_log(BN_LOG_WARN, __VA_ARGS__)
#define bn_log_info(...) bn_log(BN_LOG_INFO, __VA_ARGS__)
#define bn_log_debug(...)                                                                       \
	do {                                                                                    \
		if (bn_log_enabled(BN_LOG_DEBUG))                                               \
			bn_log(BN_LOG_DEBUG, __VA_ARGS__);                                      \
	} while (0)

#endif /* BITNETD_LOG_H */
