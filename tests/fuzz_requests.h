/* SPDX-License-Identifier: MIT */
/*
 * fuzz_requests.h — the script format of the request-path fuzz target (fuzz_requests.c),
 * shared with the program that writes its seed corpus (make_request_corpus.c).
 */
#ifndef BITNET_FUZZ_REQUESTS_H
#define BITNET_FUZZ_REQUESTS_H

#define FUZZ_CONTEXT 64        /* context, prompt and output capacity: small segments */
#define FUZZ_SLOTS 4           /* the most slots a script's hello gets */
#define FUZZ_LOGPROBS 2        /* --max-logprobs */
#define FUZZ_VOCAB 100         /* the loopback vocabulary */
#define FUZZ_KV_MEMORY (48 * 1024) /* 12 blocks of 4 positions at 1 KiB a position */
#define FUZZ_KV_BLOCK 4
#define FUZZ_MAX_STEPS 256     /* each input does bounded work */

/* After the two hello bytes (requested_slots, weight), each command is an opcode byte (taken
 * mod FUZZ_OPS) and its operands, little-endian. */
#define FUZZ_OPS 6
enum fuzz_op {
	FUZZ_WRITE = 0, /* u16 offset (mod the segment size), u8 length - 1, the bytes */
	FUZZ_TAIL = 1,  /* u32: a raw ring tail */
	FUZZ_QUEUE = 2, /* u8 slot (mod 8): an honest sqe, then tail + 1 */
	FUZZ_POLL = 3,  /* the daemon takes the ring */
	FUZZ_STEP = 4,  /* one scheduler step */
	FUZZ_DRAIN = 5, /* the daemon begins shutting down */
};

#endif /* BITNET_FUZZ_REQUESTS_H */
