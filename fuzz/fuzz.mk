# Fuzzing with clang's libFuzzer (included by the Makefile). Each
# fuzz/fuzz_NAME.c is one harness, linked with the library and the tool's
# objects, everything built by clang with ASan + UBSan and coverage in
# build/san-fuzzer-no-link-address-undefined; fuzz/corpus/NAME holds its
# seeds and fuzz/NAME.dict, when there is one, its dictionary.
#   make fuzz                       builds the harnesses
#   make fuzz-run FUZZ_SECONDS=60   runs each that long; what they find
#                                   goes to build/fuzz/NAME (new inputs)
#                                   and build/fuzz/crash-NAME-* (crashes)
FUZZ_CC ?= $(firstword $(shell command -v clang-14 clang 2>/dev/null) clang-14)
FUZZ_SECONDS ?= 60
FUZZ_SAN := fuzzer-no-link,address,undefined
FUZZ_BUILD := build/san-$(subst $(comma),-,$(FUZZ_SAN))
FUZZ_NAMES := $(patsubst fuzz/fuzz_%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_BIN := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz/fuzz_%)

.PHONY: fuzz fuzz-run
fuzz:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) SANITIZE=$(FUZZ_SAN) NO_OMP=1 \
	  $(FUZZ_BIN)

# libFuzzer writes new inputs into the first folder, so the committed seeds
# (the second) stay as they are. -close_fd_mask=3 keeps the parsers' own
# messages out of the log; a crash report still shows.
fuzz-run: fuzz
	@mkdir -p build/fuzz
	@for n in $(FUZZ_NAMES); do \
	  echo "== fuzz $$n: $(FUZZ_SECONDS) s"; \
	  mkdir -p build/fuzz/$$n; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=20 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/crash-$$n- \
	    $$(test -f fuzz/$$n.dict && echo -dict=fuzz/$$n.dict) \
	    build/fuzz/$$n fuzz/corpus/$$n >build/fuzz/$$n.log 2>&1; \
	  rc=$$?; \
	  grep -E '^(stat::number_of_executed_units|stat::new_units_added|==[0-9]+==|SUMMARY|Test unit written)' build/fuzz/$$n.log; \
	  test $$rc = 0 || { tail -60 build/fuzz/$$n.log; echo "fuzz $$n: FAILED (input in build/fuzz/crash-$$n-*)"; exit 1; }; \
	done

# In the sub-make above: the harnesses and their link (-fsanitize=fuzzer
# brings libFuzzer's main).
ifeq ($(SANITIZE),$(FUZZ_SAN))
$(BUILD)/obj/fuzz/%.o: CFLAGS += -Itools
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/fuzz/fuzz_%.o $(TOOL_LIB_OBJ) $(BUILD)/libdelta.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
-include $(FUZZ_NAMES:%=$(BUILD)/obj/fuzz/fuzz_%.d)
.SECONDARY: $(FUZZ_NAMES:%=$(BUILD)/obj/fuzz/fuzz_%.o)
endif
