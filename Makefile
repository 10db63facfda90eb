# bitnetd — top-level build. `make help` lists the targets.
#
#   make                      daemon, client library (.so/.a/.pc), CLI, tests
#   make check                every test that runs on a CPU-only machine (Check runner output)
#   make SANITIZE=address,undefined check   the same under sanitizers (separate build dir)
#   make bench-ipc            transport benchmark (starts and stops its own daemon)
#   make install PREFIX=/usr/local DESTDIR=   installs files only; enables/starts nothing
#   make V=1 ...              show full commands

CC       ?= cc
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR  ?= $(PREFIX)/lib/systemd/system
PKG_CONFIG ?= pkg-config

SANITIZE ?=
BUILD    ?= build$(if $(SANITIZE),-san)

LIB_VERSION := 1.0.0
LIB_SONAME  := libbitnet-client.so.1

ifeq ($(V),1)
Q :=
else
Q := @
endif

URING_CFLAGS := $(shell $(PKG_CONFIG) --cflags liburing 2>/dev/null)
URING_LIBS   := $(shell $(PKG_CONFIG) --libs liburing 2>/dev/null || echo -luring)
CHECK_CFLAGS := $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell $(PKG_CONFIG) --libs check 2>/dev/null || echo -lcheck)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS   ?= -O2 -g
BASE_CFLAGS := -std=gnu11 $(WARN) -pthread -Ishm -Ilibclient
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all)
ALL_CFLAGS := $(BASE_CFLAGS) $(CFLAGS) $(SAN_FLAGS)
ALL_LDFLAGS := -pthread $(LDFLAGS) $(SAN_FLAGS)

DAEMON_SRCS := $(wildcard daemon/*.c)
CLIENT_SRCS := libclient/client.c
CLI_SRCS    := tools/bitnet-cli.c tools/bench_ipc.c
TEST_UNIT   := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
TEST_TOOLS  := bn-hostile

DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(BUILD)/%.o)
CLIENT_PIC  := $(CLIENT_SRCS:%.c=$(BUILD)/pic/%.o)
CLIENT_OBJS := $(CLIENT_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS    := $(CLI_SRCS:%.c=$(BUILD)/%.o)

BITNETD  := $(BUILD)/bitnetd
CLI      := $(BUILD)/bitnet-cli
LIB_SO   := $(BUILD)/$(LIB_SONAME)
LIB_A    := $(BUILD)/libbitnet-client.a
LIB_PC   := $(BUILD)/bitnet-client.pc
TESTS    := $(TEST_UNIT:%=$(BUILD)/tests/%) $(TEST_TOOLS:%=$(BUILD)/tests/%)

.PHONY: all check check-c check-san check-python check-systemd bench-ipc install uninstall clean help
all: $(BITNETD) $(CLI) $(LIB_SO) $(LIB_A) $(LIB_PC) $(TESTS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(URING_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC [pic] $<")
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c $< -o $@

$(BITNETD): $(DAEMON_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(URING_LIBS) -lm

$(LIB_SO): $(CLIENT_PIC) libclient/libbitnet-client.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(LIB_SONAME) -Wl,--version-script=libclient/libbitnet-client.map \
		-Wl,--no-undefined $(CLIENT_PIC) -o $@ $(ALL_LDFLAGS)
	$(Q)ln -sf $(LIB_SONAME) $(BUILD)/libbitnet-client.so

$(LIB_A): $(CLIENT_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_PC): libclient/bitnet-client.pc.in Makefile
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
		-e 's|@VERSION@|$(LIB_VERSION)|g' $< > $@

# Tools and tests link the static library: they run from the build tree without LD_LIBRARY_PATH.
$(CLI): $(CLI_OBJS) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lm

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(BUILD)/tests/testutil.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) -lm

$(BUILD)/tests/bn-hostile: $(BUILD)/tests/hostile.o $(BUILD)/tests/testutil.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) -lm

# ---------------------------------------------------------------------------------------------
# Tests: each Check program prints its runner summary; a failing one fails the target.

# Without SANITIZE, `check` also runs the C tests once under ASan+UBSan (its own build dir).
check: check-c check-python check-systemd $(if $(SANITIZE),,check-san)

check-san:
	@echo "== sanitizer pass (address,undefined)"
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined check-c

check-c: all
	@set -e; for t in $(TEST_UNIT); do \
		echo "== $$t"; \
		BITNETD=$(BITNETD) BN_HOSTILE=$(BUILD)/tests/bn-hostile $(BUILD)/tests/$$t; \
	done

check-python: all
	@echo "== conformance (python3, written from shm/PROTOCOL.md)"
	@BITNETD=$(BITNETD) python3 tests/conformance.py

check-systemd:
	@echo "== systemd units"
	@sh systemd/verify.sh; rc=$$?; if [ $$rc = 77 ]; then echo "SKIP: systemd-analyze not installed"; \
		elif [ $$rc != 0 ]; then exit $$rc; fi

bench-ipc: $(BITNETD) $(CLI)
	$(CLI) bench --start-daemon $(BITNETD)

# ---------------------------------------------------------------------------------------------

install: $(BITNETD) $(CLI) $(LIB_SO) $(LIB_A) $(LIB_PC)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/bitnet \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(BITNETD) $(CLI) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libbitnet-client.so.$(LIB_VERSION)
	ln -sf libbitnet-client.so.$(LIB_VERSION) $(DESTDIR)$(LIBDIR)/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(LIBDIR)/libbitnet-client.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 0644 $(LIB_PC) $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 0644 libclient/bitnet_client.h shm/bitnet_shm.h $(DESTDIR)$(INCDIR)/bitnet/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' systemd/bitnetd.service \
		> $(DESTDIR)$(UNITDIR)/bitnetd.service
	install -m 0644 systemd/bitnetd.socket $(DESTDIR)$(UNITDIR)/
	install -m 0644 systemd/bitnetd.env $(DESTDIR)$(SYSCONFDIR)/default/bitnetd
	install -m 0644 docs/bitnetd.8 $(DESTDIR)$(MANDIR)/man8/
	install -d $(DESTDIR)$(PREFIX)/lib/sysusers.d
	install -m 0644 systemd/sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/bitnetd.conf

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/bitnetd $(DESTDIR)$(BINDIR)/bitnet-cli \
		$(DESTDIR)$(LIBDIR)/libbitnet-client.* $(DESTDIR)$(LIBDIR)/pkgconfig/bitnet-client.pc \
		$(DESTDIR)$(UNITDIR)/bitnetd.service $(DESTDIR)$(UNITDIR)/bitnetd.socket \
		$(DESTDIR)$(MANDIR)/man8/bitnetd.8 $(DESTDIR)$(PREFIX)/lib/sysusers.d/bitnetd.conf
	rm -rf $(DESTDIR)$(INCDIR)/bitnet

clean:
	rm -rf build build-san

help:
	@sed -n '2,10p' Makefile | sed 's/^# \{0,1\}//'

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
