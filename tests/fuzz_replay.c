/* SPDX-License-Identifier: MIT */
/*
 * fuzz_replay.c — runs the fuzz target over the files named on the command line, with any
 * compiler and without libFuzzer: `make check` replays the seed corpus this way, so the
 * target and the corpus stay working between fuzzing runs. A crash ends the process, so
 * reaching the summary line means there were none.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole file in an allocation of exactly its size, so ASan catches reads past the end. */
static uint8_t *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *buf = NULL;
	long len = -1;
	if (fseek(f, 0, SEEK_END) == 0)
		len = ftell(f);
	if (len >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc(len > 0 ? (size_t)len : 1);
		if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	*size = len > 0 ? (size_t)len : 0;
	return buf;
}

int main(int argc, char **argv)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		size_t size;
		errno = 0;
		uint8_t *buf = read_file(argv[i], &size);
		if (!buf) {
			fprintf(stderr, "fuzz-replay: %s: %s\n", argv[i],
				errno ? strerror(errno) : "cannot read");
			return 1;
		}
		LLVMFuzzerTestOneInput(buf, size);
		free(buf);
		n++;
	}
	printf("fuzz-replay: %d inputs, 0 crashes\n", n);
	return 0;
}
