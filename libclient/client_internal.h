/* SPDX-License-Identifier: MIT */
/*
 * client_internal.h — what the library's source files share without exporting it (the version
 * script keeps every name not listed there out of the shared library).
 */
#ifndef BITNET_CLIENT_INTERNAL_H
#define BITNET_CLIENT_INTERNAL_H

#include "bitnet_client.h"

/* One control round trip (shm/PROTOCOL.md §10) for an op whose reply carries no payload bytes
 * on the socket: sends the request, receives the reply head into *r and the descriptor that
 * came with it into *fd (-1 when none; the caller closes it). Takes the client's lock, as
 * every use of the control socket does. 0, or -BN_E_PROTOCOL for a reply that is not this
 * op's, -BN_E_DISCONNECTED, -errno. The reply's own error is left in r->error. */
int bn_client_ctl(struct bn_client *c, uint32_t op, struct bn_ctl_reply *r, int *fd);

#endif /* BITNET_CLIENT_INTERNAL_H */
