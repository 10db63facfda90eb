/* SPDX-License-Identifier: MIT */
/*
 * vocab.h — the model's vocabulary as the BN_CTL_VOCAB payload (shm/bitnet_shm.h: struct
 * bn_vocab_head, then one struct bn_vocab_entry and its text per token), built once at start-up
 * from the GGUF tokenizer keys and served from a sealed memfd, so a reply of any size costs the
 * loop one sendmsg of 16 bytes and a descriptor.
 *
 * Keys read: tokenizer.ggml.model ("llama": SentencePiece-style, else "other"),
 * tokenizer.ggml.tokens (required for a vocabulary), tokenizer.ggml.scores (f32) and
 * tokenizer.ggml.token_type (i32, 0..6), both optional but then one per token,
 * tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id (optional, < n_tokens) and
 * tokenizer.ggml.add_bos_token (bool, default true).
 */
#ifndef BITNETD_VOCAB_H
#define BITNETD_VOCAB_H

#include "gguf.h"

#include <stddef.h>
#include <stdint.h>

#define BN_VOCAB_ERR_LEN 256

/* Builds the payload from a parsed file into a malloc'd buffer (*out, *size; the caller frees).
 * Returns 1 when built; 0 when the file has no tokenizer.ggml.tokens, i.e. no vocabulary
 * (*out is then NULL); -1 with a one-line reason, naming the file, in err. */
int bn_vocab_payload_build(const struct bn_gguf *g, uint8_t **out, size_t *size,
			   char err[BN_VOCAB_ERR_LEN]);

/* A copy of `size` bytes in a new memfd (close-on-exec) sealed against every change
 * (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL). Returns the fd or -errno. */
int bn_vocab_payload_seal(const void *payload, size_t size);

/* Both for the file at path: opens it, builds, seals. Returns 1 with *fd and *size set, 0 when
 * the file has no vocabulary, -1 with a reason in err. When n_vocab is non-zero, a vocabulary
 * of another size is refused (its ids would not be the model's). */
int bn_vocab_payload_open(const char *path, uint32_t n_vocab, int *fd, size_t *size,
			  char err[BN_VOCAB_ERR_LEN]);

#endif /* BITNETD_VOCAB_H */
