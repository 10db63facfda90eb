/* SPDX-License-Identifier: MIT */
/*
 * log.h — bitnet-gateway's log lines: logfmt on stderr (journald takes them as they are),
 * like bitnetd's. Never a key or a request's text.
 */
#ifndef BITNET_GATEWAY_LOG_H
#define BITNET_GATEWAY_LOG_H

enum { GW_LOG_ERROR, GW_LOG_WARN, GW_LOG_INFO, GW_LOG_DEBUG };

void gw_log_set_level(int level);
void gw_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define gw_log_error(...) gw_log(GW_LOG_ERROR, __VA_ARGS__)
#define gw_log_warn(...) gw_log(GW_LOG_WARN, __VA_ARGS__)
#define gw_log_info(...) gw_log(GW_LOG_INFO, __VA_ARGS__)
#define gw_log_debug(...) gw_log(GW_LOG_DEBUG, __VA_ARGS__)

#endif /* BITNET_GATEWAY_LOG_H */
