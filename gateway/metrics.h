/* SPDX-License-Identifier: MIT */
/*
 * metrics.h — the gateway's own counters (GET /metrics, Prometheus text): requests by route
 * and status, their durations and streams' time to first token as histograms, tokens,
 * running requests, open connections, clients that left mid-request. The daemon's metrics
 * are its own (bitnet-cli stats).
 */
#ifndef BITNET_GATEWAY_METRICS_H
#define BITNET_GATEWAY_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum gw_route { GW_ROUTE_CHAT, GW_ROUTE_COMPLETIONS, GW_ROUTE_MODELS, GW_ROUTE_HEALTH,
		GW_ROUTE_METRICS, GW_ROUTE_EMBEDDINGS, GW_ROUTE_OTHER, GW_N_ROUTES };

void gw_metrics_request(enum gw_route route, int status, double seconds);
void gw_metrics_first_token(double seconds);
void gw_metrics_tokens(uint32_t prompt, uint32_t completion);
void gw_metrics_running(int delta);
void gw_metrics_connections(int delta);
void gw_metrics_client_gone(void);

/* The exposition, malloc'd (NULL without memory). */
char *gw_metrics_render(size_t *len);

#endif /* BITNET_GATEWAY_METRICS_H */
