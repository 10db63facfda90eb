/* SPDX-License-Identifier: MIT */
/*
 * ckassert.c — where a test process was when a signal killed it (ckassert.h): Check no longer
 * hears of assertions that hold, so its "Received signal" report names only the test.
 */
#include "ckassert.h"
#include "timescale.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

_Thread_local const char *tu_ck_held_file;
_Thread_local int tu_ck_held_line;

#if !TU_SANITIZED
static void say(const char *text)
{
	ssize_t ignored = write(STDERR_FILENO, text, strlen(text));
	(void)ignored;
}

/* Async-signal-safe: write() and a number formatted by hand. The handler is reset on entry
 * (SA_RESETHAND), so the fault, met again on return, or abort's second raise, kills the
 * process with the same signal, which is what Check reports. */
static void say_where(int sig)
{
	char line[16];
	size_t n = sizeof(line);
	line[--n] = '\0';
	for (int v = tu_ck_held_line; n > 0 && (v > 0 || n == sizeof(line) - 1); v /= 10)
		line[--n] = (char)('0' + v % 10);
	say("test process: killed by signal ");
	say(sig == SIGSEGV ? "SEGV" : sig == SIGBUS ? "BUS" : sig == SIGFPE ? "FPE" :
	    sig == SIGILL ? "ILL" : "ABRT");
	if (tu_ck_held_file) {
		say("; the last assertion that held in its thread: ");
		say(tu_ck_held_file);
		say(":");
		say(line + n);
	} else {
		say("; no assertion had held in its thread");
	}
	say("\n");
}

__attribute__((constructor)) static void report_where_signals_kill(void)
{
	static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = say_where;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
}
#endif
