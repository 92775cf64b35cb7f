# make install / uninstall (included by the Makefile), as a C library's
# users expect: headers, static and shared libraries with a versioned
# soname, the delta tool and a pkg-config file.
#   make install PREFIX=/usr/local [DESTDIR=/stage] [LIBDIR=... BINDIR=...]
#   make uninstall (same variables)
# The version comes from include/delta/common.h; the shared library is
# libdelta.so.MAJOR.MINOR.PATCH with soname libdelta.so.MAJOR and the
# links libdelta.so.MAJOR and libdelta.so. A sanitized build (SANITIZE=…)
# installs as well, and its delta.pc carries the -fsanitize flags that
# programs linking it need.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL ?= install

DELTA_VERSION := $(shell sed -n 's/.*define DELTA_VERSION_STRING "\(.*\)".*/\1/p' include/delta/common.h)
DELTA_MAJOR := $(firstword $(subst ., ,$(DELTA_VERSION)))
SONAME := libdelta.so.$(DELTA_MAJOR)
HEADERS := $(sort $(wildcard include/delta/*.h))

# What a program linked with libdelta.a needs besides it, as this build
# links it: zlib, cJSON and PCRE2 through their own .pc files where Debian ships
# them, OpenBLAS (the OpenMP build, so not openblas.pc, which names the
# default one), libgomp for OpenMP, pthread and libm.
pc_has = $(shell pkg-config --exists $(1) 2>/dev/null && echo yes)
PC_REQ := $(if $(HAVE_ZLIB),$(if $(call pc_has,zlib),zlib)) \
          $(if $(HAVE_CJSON),$(if $(call pc_has,libcjson),libcjson)) \
          $(if $(HAVE_PCRE2),$(if $(call pc_has,libpcre2-8),libpcre2-8))
PC_PRIV := $(filter-out $(if $(filter zlib,$(PC_REQ)),-lz) \
             $(if $(filter libcjson,$(PC_REQ)),-lcjson) \
             $(if $(filter libpcre2-8,$(PC_REQ)),-lpcre2-8),$(LDLIBS)) \
           $(if $(HAVE_OMP),-lgomp)
PC_SAN := $(if $(SANITIZE),-fsanitize=$(SANITIZE))

$(BUILD)/delta.pc: $(BUILD)/flags mk/install.mk include/delta/common.h
	@printf '%s\n' \
	  'prefix=@PREFIX@' 'includedir=@INCLUDEDIR@' 'libdir=@LIBDIR@' '' \
	  'Name: delta' \
	  'Description: train neural networks inside a fixed device-memory budget' \
	  'Version: $(DELTA_VERSION)' \
	  'Requires.private: $(strip $(PC_REQ))' \
	  'Cflags: $(strip -I$${includedir} $(PC_SAN))' \
	  'Libs: $(strip -L$${libdir} -ldelta $(PC_SAN))' \
	  'Libs.private: $(strip $(PC_PRIV))' >$@

.PHONY: install uninstall
install: lib tool $(BUILD)/delta.pc
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/delta $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/delta/
	$(INSTALL) -m 644 $(BUILD)/libdelta.a $(DESTDIR)$(LIBDIR)/libdelta.a
	$(INSTALL) -m 755 $(BUILD)/libdelta.so \
	  $(DESTDIR)$(LIBDIR)/libdelta.so.$(DELTA_VERSION)
	ln -sf libdelta.so.$(DELTA_VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdelta.so
	$(INSTALL) -m 755 $(BUILD)/delta $(DESTDIR)$(BINDIR)/delta
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@LIBDIR@|$(LIBDIR)|' $(BUILD)/delta.pc \
	  >$(DESTDIR)$(PKGCONFIGDIR)/delta.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/delta.pc

uninstall:
	rm -f $(HEADERS:include/delta/%=$(DESTDIR)$(INCLUDEDIR)/delta/%)
	rmdir $(DESTDIR)$(INCLUDEDIR)/delta 2>/dev/null || true
	rm -f $(DESTDIR)$(LIBDIR)/libdelta.a $(DESTDIR)$(LIBDIR)/libdelta.so \
	  $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/libdelta.so.$(DELTA_VERSION) \
	  $(DESTDIR)$(BINDIR)/delta $(DESTDIR)$(PKGCONFIGDIR)/delta.pc
