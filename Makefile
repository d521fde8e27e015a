# PGXS build of the idempotency extension. The pure C++ core is also built and unit-tested
# by CMake (CMakeLists.txt); here it is compiled without PostgreSQL's include paths, so an
# #include of a PostgreSQL header in src/core fails the build.

EXTENSION = idempotency
MODULE_big = idempotency

# The source tree: this Makefile's folder. It may differ from the folder make runs in (an out-of-
# tree build, `make -C build-15 -f ../Makefile`, as Debian's pg_buildext does): sources are
# then found through VPATH (set by PGXS), and every name below stays relative to the source tree.
IDEM_SRCDIR := $(patsubst %/,%,$(dir $(firstword $(MAKEFILE_LIST))))
idem_sources = $(patsubst $(IDEM_SRCDIR)/%,%,$(sort $(wildcard $(addprefix $(IDEM_SRCDIR)/,$(1)))))

CORE_SRCS = $(call idem_sources,src/core/*.cpp)
GLUE_SRCS = $(call idem_sources,src/pg/*.cpp src/pg/*/*.cpp)
OBJS = $(CORE_SRCS:.cpp=.o) $(GLUE_SRCS:.cpp=.o)

DATA = $(call idem_sources,extension/idempotency--*.sql)
PGFILEDESC = "idempotency - exactly-once processing inside PostgreSQL"

REGRESS = $(basename $(notdir $(call idem_sources,sql/*.sql)))
REGRESS_OPTS = --inputdir=$(IDEM_SRCDIR) --outputdir=. --load-extension=idempotency
ISOLATION = $(basename $(notdir $(call idem_sources,test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=$(IDEM_SRCDIR)/test/isolation --outputdir=output_iso \
	--load-extension=idempotency
# The tests' databases are UTF8 whatever the server's default (bad_input checks how invalid
# UTF-8 is refused).
ENCODING = UTF8
# Out of tree, installcheck first links what the tests read by relative path (below).
ifneq ($(IDEM_SRCDIR),.)
REGRESS_PREP = idem-test-files
endif

IDEM_WARNINGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
ifeq ($(IDEM_WERROR),1)
IDEM_WARNINGS += -Werror
endif

# The SQL version the library serves (src/pg/schema_version.cpp refuses any other).
IDEM_SCHEMA_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(IDEM_SRCDIR)/idempotency.control)
PG_CXXFLAGS = -std=c++17 -Wno-register -fno-omit-frame-pointer $(IDEM_WARNINGS) -I$(IDEM_SRCDIR)/src \
	-DIDEM_SCHEMA_VERSION='"$(IDEM_SCHEMA_VERSION)"'
# The faults suite's build for a server without injection points (15, 16, or 17 and 18 built
# without --enable-injection-points): the extension's own fault points, driven by the setting
# idempotency.fault_points (src/pg/fault_points.hpp). Never in a production build.
ifeq ($(IDEM_FAULT_POINTS),1)
PG_CXXFLAGS += -DIDEM_FAULT_POINTS
endif
SHLIB_LINK = -lcrypto -lstdc++

# A checking build (scripts/test.sh, suite sanitizers): IDEM_SANITIZE=undefined compiles the
# glue and the core with UBSan, every report fatal, and links its runtime into the library.
ifneq ($(IDEM_SANITIZE),)
IDEM_SANITIZE_FLAGS = -fsanitize=$(IDEM_SANITIZE) -fno-sanitize-recover=all
PG_CXXFLAGS += $(IDEM_SANITIZE_FLAGS)
SHLIB_LINK += $(IDEM_SANITIZE_FLAGS)
endif

# No LLVM bitcode: PostgreSQL's JIT would only inline these functions, and clang would
# need the same C++ flags.
override with_llvm = no

PG_CONFIG ?= pg_config
# The majors src/pg/compat.hpp knows; any other stops here, before anything is compiled.
IDEM_SUPPORTED_MAJORS = 15 16 17 18
PG_MAJOR := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
ifeq ($(filter $(PG_MAJOR),$(IDEM_SUPPORTED_MAJORS)),)
$(error $(PG_CONFIG) is PostgreSQL $(or $(PG_MAJOR),(unknown)); idempotency supports PostgreSQL $(IDEM_SUPPORTED_MAJORS))
endif
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

CORE_CXXFLAGS = -std=c++17 -O2 -g -fPIC -fvisibility=hidden $(IDEM_WARNINGS) -I$(IDEM_SRCDIR)/src \
	$(IDEM_SANITIZE_FLAGS)

# Objects compiled against another major's headers (or with the other IDEM_FAULT_POINTS) are
# never reused: the stamp names the server the last build was for, and changes (so everything
# rebuilds) when PG_CONFIG or IDEM_FAULT_POINTS does.
BUILD_STAMP = .build-for-pg
EXTRA_CLEAN += $(BUILD_STAMP)
$(BUILD_STAMP): FORCE
	@echo '$(PG_CONFIG) $(VERSION) $(IDEM_FAULT_POINTS)' | cmp -s - $@ || \
		echo '$(PG_CONFIG) $(VERSION) $(IDEM_FAULT_POINTS)' >$@
$(OBJS): $(BUILD_STAMP)
.PHONY: FORCE

src/core/%.o: src/core/%.cpp $(wildcard $(IDEM_SRCDIR)/src/core/*.hpp)
	$(CXX) $(CORE_CXXFLAGS) -c -o $@ $<

$(GLUE_SRCS:.cpp=.o): $(wildcard $(addprefix $(IDEM_SRCDIR)/,src/core/*.hpp src/pg/*.hpp \
	src/pg/*/*.hpp)) idempotency.control

# Out of tree: the object folders exist before anything compiles into them, and the files the
# regression tests read by relative path (psql's \i, \copy) are linked into the build folder.
ifneq ($(IDEM_SRCDIR),.)
$(shell mkdir -p $(sort $(dir $(OBJS))))
.PHONY: idem-test-files
idem-test-files:
	$(MKDIR_P) sql test
	ln -sfn $(abspath $(IDEM_SRCDIR))/sql/include sql/include
	ln -sfn $(abspath $(IDEM_SRCDIR))/test/vectors test/vectors
endif

.PHONY: format
format:
	clang-format -i src/core/*.[ch]pp src/pg/*.[ch]pp src/pg/*/*.[ch]pp test/unit/*.cpp

# A PGXN-ready zip of the committed tree (HEAD: uncommitted changes are not in it), named after
# idempotency.control's default_version, which META.json's version must equal.
DIST_NAME = $(EXTENSION)-$(IDEM_SCHEMA_VERSION)
DIST_DIR ?= .
.PHONY: dist
dist:
	git -C $(IDEM_SRCDIR) archive --format=zip --prefix=$(DIST_NAME)/ \
		-o $(abspath $(DIST_DIR))/$(DIST_NAME).zip HEAD
	@echo "$(abspath $(DIST_DIR))/$(DIST_NAME).zip"
