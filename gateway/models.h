/* SPDX-License-Identifier: MIT */
/*
 * models.h — the daemon's models as the gateway serves them (shm/PROTOCOL.md §15): the model
 * a request's `model` field names (the default when it names none; 404 model_not_found for
 * a name the daemon does not serve), each one's info and vocabulary, and /v1/models.
 */
#ifndef BITNET_GATEWAY_MODELS_H
#define BITNET_GATEWAY_MODELS_H

#include "ring.h"

#include <jansson.h>

void gw_ring_init(struct gw_ring *r, const char *socket_path, const char *model_name);
void gw_ring_free(struct gw_ring *r);

/* The model `name` asks for (NULL or "": the default), with a reference (gw_model_put). One
 * the gateway has not seen is looked up in the daemon's list and a session of it opened
 * through probe (0, or its -BN_E_* / -errno in *err: -BN_E_MODEL_NOT_FOUND for a name the
 * daemon does not serve). NULL without probe when it is not known yet. */
struct gw_model *gw_ring_model(struct gw_ring *r, struct gw_pool *probe, const char *name,
			       int *err);
void gw_model_put(struct gw_ring *r, struct gw_model *m);
/* Whether `name` (NULL, "": none) names m: its id, its name in the daemon, and for the
 * default also --served-model-name and its file's name. */
int gw_model_named(const struct gw_ring *r, const struct gw_model *m, const char *name);
/* A session just opened (for the model `asked`, "" the default) reports its model: a new or
 * changed one is fetched (its vocabulary) and made current. */
void gw_models_note(struct gw_ring *r, struct bn_client *c, const char *asked);

/* /v1/models: the list object of every model the daemon serves, with its state; with `one`,
 * that model's object only (-BN_E_MODEL_NOT_FOUND when none is). NULL with *err on failure. */
json_t *gw_models_json(struct gw_ring *r, struct gw_pool *probe, const char *one, int *err);

#endif /* BITNET_GATEWAY_MODELS_H */
