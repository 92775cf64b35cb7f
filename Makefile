# delta — build. `make` builds the library, the tool and the tests;
# `make test` runs the tests; `make run` runs the main job; `make deps`
# installs what is needed. Switches: NO_BLAS=1 (built-in GEMM only),
# NO_OMP=1, SANITIZE=address,undefined | thread (separate build folder),
# DEBUG=1 (-O0 -g), V=1 (show commands).
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

comma := ,
BUILD ?= build
ifdef SANITIZE
BUILD := build/san-$(subst $(comma),-,$(SANITIZE))
endif

Q := @
ifdef V
Q :=
endif

CFLAGS_BASE := -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -Iinclude -Isrc
ifdef DEBUG
OPT := -O0 -g
else
OPT := -O2 -g
endif
CFLAGS := $(CFLAGS_BASE) $(OPT)
LDLIBS := -lm -lpthread

# ---- probe the machine -------------------------------------------------
# $(call probe,HEADER,FLAGS): yes when a program including HEADER builds
probe = $(shell echo 'int main(void){return 0;}' | \
          $(CC) -include $(1) -x c - -o /dev/null $(2) >/dev/null 2>&1 && echo yes)

HAVE_OMP := $(if $(NO_OMP),,$(call probe,omp.h,-fopenmp))
HAVE_BLAS := $(if $(NO_BLAS),,$(call probe,cblas.h,-lopenblas))
HAVE_ZLIB := $(call probe,zlib.h,-lz)
HAVE_CJSON := $(call probe,cjson/cJSON.h,-lcjson)
NVCC := $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))


ifeq ($(HAVE_OMP),yes)
CFLAGS += -fopenmp
LDFLAGS += -fopenmp
else
CFLAGS += -Wno-unknown-pragmas
endif
ifeq ($(HAVE_BLAS),yes)
CFLAGS += -DDELTA_HAVE_OPENBLAS
# Prefer Debian's OpenMP build of OpenBLAS (libopenblas0-openmp): it shares
# delta's OpenMP thread pool instead of running its own pthreads, whose
# spinning competes with OpenMP's on a few cores.
BLAS_OMP_DIR := $(wildcard /usr/lib/$(shell $(CC) -print-multiarch)/openblas-openmp)
ifneq ($(and $(HAVE_OMP),$(BLAS_OMP_DIR)),)
LDLIBS += -L$(BLAS_OMP_DIR) -Wl,-rpath,$(BLAS_OMP_DIR) -l:libopenblas.so.0
BLAS_KIND := (OpenMP build)
else
LDLIBS += -lopenblas
endif
endif
ifeq ($(HAVE_ZLIB),yes)
CFLAGS += -DDELTA_HAVE_ZLIB
LDLIBS += -lz
endif
ifeq ($(HAVE_CJSON),yes)
CFLAGS += -DDELTA_HAVE_CJSON
LDLIBS += -lcjson
endif
ifdef SANITIZE
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

mark = $(if $(1),✓,✗)
ifeq ($(MAKELEVEL),0)
$(info delta build: $(call mark,$(HAVE_BLAS)) OpenBLAS$(if $(BLAS_KIND), $(BLAS_KIND),)  $(call mark,$(HAVE_OMP)) OpenMP  $(call mark,$(HAVE_ZLIB)) zlib  $(call mark,$(HAVE_CJSON)) cJSON  $(call mark,$(NVCC)) CUDA$(if $(NVCC), (nvcc found; backend comes with the CUDA issue),)$(if $(SANITIZE),  sanitize=$(SANITIZE),))
endif

# ---- sources -------------------------------------------------------------
LIB_SRC := $(sort $(shell find src -name '*.c'))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all lib tool tests test run deps deps-check clean bench-kernels bench-pool bench-train bench-policies test-tsan results
all: lib tool tests

lib: $(BUILD)/libdelta.a $(BUILD)/libdelta.so
tool: $(BUILD)/delta
tests: $(TEST_BIN)

# Rebuild everything when the flags change.
$(BUILD)/flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' | cmp -s - $@ || \
	  echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<",true)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdelta.a: $(LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libdelta.so: $(LIB_OBJ)
	$(Q)$(CC) -shared -Wl,-soname,libdelta.so.0 $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/delta: $(TOOL_OBJ) $(BUILD)/libdelta.a
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libdelta.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libdelta.a $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libdelta.a $(LDLIBS)

deps:
	@scripts/deps.sh install

deps-check:
	@scripts/deps.sh ensure

# The test and run targets install what they need first, then build in a
# sub-make so the probe sees the installed libraries.
test: deps-check
	@$(MAKE) --no-print-directory tests tool
	@tests/run.sh $(TEST_BIN)

# The threaded code (copy engines, session) under ThreadSanitizer. OpenMP's
# runtime is not instrumented, so this build leaves it out.
TSAN_TESTS := test_backend test_session test_managed test_policies test_plan_cache
test-tsan: deps-check
	@$(MAKE) --no-print-directory SANITIZE=thread NO_OMP=1 \
	  $(TSAN_TESTS:%=build/san-thread/tests/%)
	@OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
	  tests/run.sh $(TSAN_TESTS:%=build/san-thread/tests/%)

# The main job: a small ResNet-18 (base width 16) learns Fashion-MNIST in
# about a minute on 2 cores, then reports its test accuracy (synthetic data,
# and no accuracy, when the dataset cannot be installed).
run: deps-check
	@$(MAKE) --no-print-directory tool
	$(BUILD)/delta train --model resnet18 --width 16 --batch 128 --steps 1400 --lr 0.05

bench-kernels:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory $(BUILD)/bench/bench_kernels
	@scripts/bench_kernels.sh $(BUILD)/bench/bench_kernels

bench-train:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory tool
	@scripts/bench_train.sh $(BUILD)/delta

bench-pool:
	@$(MAKE) --no-print-directory $(BUILD)/bench/bench_pool
	$(BUILD)/bench/bench_pool

bench-policies:
	@$(MAKE) --no-print-directory tool
	@scripts/bench_policies.sh $(BUILD)/delta

# docs/RESULTS.md from measurements: the papers' figures on sim, PyTorch's
# saved activations beside the simulator's, loss curves on the cpu.
results:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory tool
	@scripts/results.sh $(BUILD)/delta

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_BIN:$(BUILD)/tests/%=$(BUILD)/obj/tests/%.d)
