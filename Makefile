# delta — build. `make` builds the library, the tool and the tests;
# `make test` runs the tests; `make run` runs the main job; `make deps`
# installs what is needed. Switches: NO_BLAS=1 (built-in GEMM only),
# NO_OMP=1, SANITIZE=address,undefined | thread (separate build folder),
# DEBUG=1 (-O0 -g), V=1 (show commands), CUDA=0 / CUDA=1 (the CUDA backend:
# left out / required; default: built when nvcc is found), NO_MPI=1 (no
# data parallel across processes: every run is one rank).
CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

comma := ,
BUILD ?= build
ifdef SANITIZE
BUILD := build/san-$(subst $(comma),-,$(SANITIZE))
endif
# OpenMP's runtime is not instrumented for ThreadSanitizer, so a TSan build
# leaves it out (its races would be false reports).
ifeq ($(SANITIZE),thread)
NO_OMP := 1
endif

Q := @
ifdef V
Q :=
endif

# -fvisibility=hidden: libdelta.so exports only what include/delta/ marks
# DELTA_API (the tool and the tests link libdelta.a, where hidden symbols
# still link).
CFLAGS_BASE := -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -fvisibility=hidden -Iinclude -Isrc
ifdef DEBUG
OPT := -O0 -g
else ifdef SANITIZE
# -O1 keeps sanitizer reports readable and the instrumented build quick.
OPT := -O1 -g
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
# PCRE2 (libpcre2-dev) for the tokenizer's split regex (Unicode letter and
# number classes); without it encoding text is refused, decoding works.
HAVE_PCRE2 := $(call probe,pcre2.h,-DPCRE2_CODE_UNIT_WIDTH=8 -lpcre2-8)
# MPI (Open MPI from Debian: libopenmpi-dev) for data parallel across
# processes (mpirun -np P delta train ...); its flags from pkg-config.
MPI_CFLAGS := $(if $(NO_MPI),,$(shell pkg-config --cflags ompi-c 2>/dev/null))
MPI_LIBS := $(if $(NO_MPI),,$(shell pkg-config --libs ompi-c 2>/dev/null))
HAVE_MPI := $(if $(NO_MPI),,$(call probe,mpi.h,$(MPI_CFLAGS) $(MPI_LIBS)))
NVCC := $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
# nvcc alone is not enough: the runtime's and cuBLAS's headers and libraries
# must be there too (a machine may carry nvcc without them). CUDA_INC and
# CUDA_LIB are looked for beside nvcc, then in /usr/local/cuda; the probe
# builds and links a C program against them.
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_INC := $(patsubst %/cuda_runtime.h,%,$(firstword $(wildcard \
  $(addsuffix /cuda_runtime.h,$(CUDA_HOME)/include $(CUDA_HOME)/targets/x86_64-linux/include \
  /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include))))
CUDA_LIB := $(patsubst %/libcudart.so,%,$(firstword $(wildcard \
  $(addsuffix /libcudart.so,$(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib \
  /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/$(shell $(CC) -print-multiarch)))))
CUDA_USABLE := $(if $(filter 0,$(CUDA)),,$(if $(and $(NVCC),$(CUDA_INC),$(CUDA_LIB)),$(call probe,cuda_runtime.h -include cublas_v2.h -include cublasLt.h,-I$(CUDA_INC) -L$(CUDA_LIB) -lcublasLt -lcublas -lcudart),))

# The CUDA backend (docs/CUDA.md): built whenever nvcc and a usable CUDA
# runtime are found; CUDA=0 leaves it out, CUDA=1 requires it. Sanitizer
# builds leave it out unless CUDA=1 (the CUDA runtime and ASan/TSan do not
# mix). Without it the build is unchanged and --backend cuda says it was
# built without CUDA.
SAN_NO_CUDA := $(if $(SANITIZE),$(if $(filter 1,$(CUDA)),,yes),)
ifeq ($(CUDA),0)
HAVE_CUDA :=
else ifeq ($(CUDA_USABLE),)
ifeq ($(CUDA),1)
$(error CUDA=1 but no usable CUDA toolkit: nvcc '$(NVCC)', cuda_runtime.h in '$(CUDA_INC)', libcudart.so in '$(CUDA_LIB)' (looked beside nvcc and in /usr/local/cuda; cublas_v2.h, cublasLt.h, libcublas and libcublasLt are needed too))
endif
HAVE_CUDA :=
else ifeq ($(SAN_NO_CUDA),yes)
HAVE_CUDA :=
else
HAVE_CUDA := yes
endif

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
ifeq ($(HAVE_PCRE2),yes)
CFLAGS += -DDELTA_HAVE_PCRE2
LDLIBS += -lpcre2-8
endif
ifeq ($(HAVE_MPI),yes)
CFLAGS += -DDELTA_HAVE_MPI $(MPI_CFLAGS)
LDLIBS += $(MPI_LIBS)
endif
ifeq ($(HAVE_CUDA),yes)
CUDA_VERSION := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
CFLAGS += -DDELTA_HAVE_CUDA -I$(CUDA_INC)
# cuDNN is loaded at run time (dlopen); its header only gives the types
ifneq ($(wildcard $(CUDA_INC)/cudnn.h),)
CFLAGS += -DDELTA_HAVE_CUDNN_H
endif
# NCCL likewise (data parallel on GPUs): dlopen'ed, nccl.h for its types
ifneq ($(wildcard $(CUDA_INC)/nccl.h),)
CFLAGS += -DDELTA_HAVE_NCCL_H
endif
LDLIBS += -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcublasLt -lcublas -lcudart -ldl -lstdc++
# sm_80 (A100) and sm_90 (H100) machine code, plus sm_90 PTX for newer GPUs
# (CUDA 13 has no Volta). --fmad=false: no FMA contraction, so pointwise
# kernels round as the CPU's do.
NVCCFLAGS := -std=c++17 -O2 -g -Iinclude -Isrc -I$(CUDA_INC) --fmad=false \
  -Xcompiler -fPIC,-Wall,-Wextra,-fvisibility=hidden -DDELTA_HAVE_CUDA \
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_90,code=compute_90
endif
ifdef SANITIZE
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

mark = $(if $(1),✓,✗)
ifeq ($(MAKELEVEL),0)
$(info delta build: $(call mark,$(HAVE_BLAS)) OpenBLAS$(if $(BLAS_KIND), $(BLAS_KIND),)  $(call mark,$(HAVE_OMP)) OpenMP  $(call mark,$(HAVE_ZLIB)) zlib  $(call mark,$(HAVE_CJSON)) cJSON  $(call mark,$(HAVE_PCRE2)) PCRE2  $(call mark,$(HAVE_MPI)) MPI  $(call mark,$(HAVE_CUDA)) CUDA$(if $(HAVE_CUDA), $(CUDA_VERSION),$(if $(NVCC), (nvcc found; off: $(if $(filter 0,$(CUDA)),CUDA=0,$(if $(CUDA_USABLE),a sanitizer build,no usable cuda_runtime.h + cublas_v2.h + cublasLt.h + libcudart + libcublas + libcublasLt))),))$(if $(SANITIZE),  sanitize=$(SANITIZE),))
endif

# ---- sources -------------------------------------------------------------
LIB_SRC := $(sort $(shell find src -name '*.c'))
# the CUDA backend, or its absence (src/backend/cuda/cuda_absent.c)
ifeq ($(HAVE_CUDA),yes)
LIB_SRC := $(filter-out src/backend/cuda/cuda_absent.c,$(LIB_SRC))
CU_SRC := $(sort $(wildcard src/backend/cuda/*.cu))
else
LIB_SRC := $(filter-out $(filter-out %/cuda_absent.c,$(wildcard src/backend/cuda/*.c)),$(LIB_SRC))
CU_SRC :=
endif
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all lib tool tests test run deps deps-check clean bench-kernels bench-pool bench-train bench-policies bench-delta-feasible bench-sim-fidelity test-tsan bench-cuda test-cuda results
all: lib tool tests

lib: $(BUILD)/libdelta.a $(BUILD)/libdelta.so
tool: $(BUILD)/delta
tests: $(TEST_BIN)

# Rebuild everything when the flags change.
$(BUILD)/flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS) $(NVCCFLAGS)' | cmp -s - $@ || \
	  echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS) $(NVCCFLAGS)' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<",true)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.cu $(BUILD)/flags
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<",true)
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdelta.a: $(LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/libdelta.so: $(LIB_OBJ)
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/delta: $(TOOL_OBJ) $(BUILD)/libdelta.a
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libdelta.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libdelta.a $(LDLIBS)

# Tests of the tool's own code link its objects (all but main's).
TOOL_LIB_OBJ := $(filter-out $(BUILD)/obj/tools/delta.o,$(TOOL_OBJ))
$(BUILD)/obj/tests/test_train_args.o: CFLAGS += -Itools
$(BUILD)/tests/test_train_args: $(BUILD)/obj/tests/test_train_args.o $(TOOL_LIB_OBJ) $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/libdelta.a $(LDLIBS)

deps:
	@scripts/deps.sh install

deps-check:
	@scripts/deps.sh ensure

# The test and run targets install what they need first, then build in a
# sub-make so the probe sees the installed libraries.
# SANITIZE=thread runs the threaded code only (stream engines, session,
# runtime): TSAN_TESTS. Sanitizer reports end the test that hit them
# (halt_on_error; -fno-sanitize-recover for UBSan), so run.sh counts it.
TSAN_TESTS := test_backend test_cpu_async test_session test_managed test_policies test_plan_cache
ifeq ($(SANITIZE),thread)
TEST_RUN_BIN := $(TSAN_TESTS:%=$(BUILD)/tests/%)
TEST_ENV := OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1
else
TEST_RUN_BIN := $(TEST_BIN)
TEST_ENV := UBSAN_OPTIONS=print_stacktrace=1
endif
# tests/test_install.sh installs this build (make install with the same
# variables) and builds examples/ against it; tests/test_exports.sh reads
# this build's libdelta.so, so `lib` is built first (without it the check
# skipped itself on a fresh clone, or read a stale library).
TEST_MAKE_VARS := $(foreach v,SANITIZE NO_BLAS NO_OMP DEBUG CC BUILD,$(if $(filter command line,$(origin $(v))),$(v)=$($(v))))
test: deps-check
	@$(MAKE) --no-print-directory $(TEST_RUN_BIN) tool lib
	@DELTA_MAKE_VARS='$(TEST_MAKE_VARS)' DELTA_BUILD='$(BUILD)' $(TEST_ENV) tests/run.sh $(TEST_RUN_BIN) \
	  $(if $(filter thread,$(SANITIZE)),,tests/test_exports.sh tests/test_install.sh tests/test_bench_peers.sh)

test-tsan:
	@$(MAKE) --no-print-directory test SANITIZE=thread

# The main job (scripts/mission.sh): a small ResNet-18 (base width 16) learns
# Fashion-MNIST twice with one seed, unconstrained and inside 40% of that peak
# with the delta policy, in a minute or two on 2 cores; it prints each run's
# peak memory, the memory saved, the step-time overhead, and checks that the
# final weights are bit-identical and the test accuracy the same (synthetic
# data, and no accuracy, when the dataset cannot be installed). BUDGET=,
# STEPS= change the budget and the steps of each run.
run: deps-check
	@$(MAKE) --no-print-directory tool
	@$(if $(BUDGET),BUDGET='$(BUDGET)') $(if $(STEPS),STEPS='$(STEPS)') scripts/mission.sh $(BUILD)/delta $(BUILD)/run

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

# delta against its peers on the simulated H100 from 100% of keep's peak down
# to the minimum budget: MISS where a peer trains and delta does not
# (scripts/bench_delta_feasible.sh; about 80 s).
bench-delta-feasible:
	@$(MAKE) --no-print-directory tool
	@scripts/bench_delta_feasible.sh $(BUILD)/delta

# The simulator with the cpu's calibration (delta calibrate) against the cpu
# itself: keep's steps and the policies' overheads, measured and predicted
# (scripts/bench_sim_fidelity.sh; a few minutes).
bench-sim-fidelity:
	@$(MAKE) --no-print-directory tool
	@scripts/bench_sim_fidelity.sh $(BUILD)/delta

# On a machine with an NVIDIA GPU: the CUDA tests (they skip themselves,
# saying why, anywhere else; make test runs them too).
test-cuda: deps-check
	@$(MAKE) --no-print-directory CUDA=1 tool $(BUILD)/tests/test_cuda
	@tests/run.sh $(BUILD)/tests/test_cuda

# On a machine with an NVIDIA GPU: delta's cuda backend beside PyTorch on
# the same GPU, overhead per policy, and the simulator's prediction
# (scripts/bench_cuda.sh; writes build/bench_cuda.md).
bench-cuda:
	@$(MAKE) --no-print-directory CUDA=1 tool
	@scripts/bench_cuda.sh $(BUILD)/delta

# docs/RESULTS.md from measurements: the papers' figures on sim, PyTorch's
# saved activations beside the simulator's, loss curves on the cpu.
results:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory tool
	@scripts/results.sh $(BUILD)/delta

clean:
	rm -rf build

include fuzz/fuzz.mk
include mk/install.mk

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_BIN:$(BUILD)/tests/%=$(BUILD)/obj/tests/%.d)
