/* SPDX-License-Identifier: MIT */
/*
 * unicode.h — Unicode properties as code-point sets (unicode.c, through PCRE2's tables).
 */
#ifndef BITNETD_GRAMMAR_UNICODE_H
#define BITNETD_GRAMMAR_UNICODE_H

#include "ir.h"

/* Adds the code points of property name[0..len) (what \p{name} names in PCRE2: a general
 * category like L or Nd, a script like Greek) to out. 0, or -1 with the error in c (an unknown
 * name is an error naming it). Thread-safe; each property is enumerated once per process. */
int gr_unicode_property(struct gr_ctx *c, const char *name, size_t len, struct gr_cpset *out);

#endif /* BITNETD_GRAMMAR_UNICODE_H */
