# SPDX-License-Identifier: Apache-2.0
# Top-level entry points. `make run` and `make test` install missing Debian
# packages (as root), build with CMake, then run the benchmark / the tests.
# `make test-asan` and `make test-tsan` run the same suite in sanitizer
# builds (AddressSanitizer + UndefinedBehaviorSanitizer, ThreadSanitizer) of
# their own build directories; `make fuzz` builds the libFuzzer targets with
# clang and runs each briefly over its seed corpus (fuzz/run.sh).
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# Sanitizer builds leave CUDA out (fast, and no CUDA runtime noise under the
# sanitizers) and keep optimisation on so the suite stays fast.
SAN_CMAKE_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVL_WITH_CUDA=OFF
# Any sanitizer report fails the test that caused it.
# (tests/tsan.supp lists ThreadSanitizer reports that are known false
# positives, each with its reason; it is used when it exists.)
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1$(if \
	$(wildcard tests/tsan.supp), suppressions=$(CURDIR)/tests/tsan.supp)"

.PHONY: all deps build run test test-asan test-tsan fuzz clean install

all: build

deps:
	@sh scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/kvlink bench

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) $(SAN_CMAKE_FLAGS) \
		-DKVL_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	$(ASAN_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) $(SAN_CMAKE_FLAGS) \
		-DKVL_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS)

fuzz: deps
	FUZZ_BUILD=$(FUZZ_BUILD) JOBS=$(JOBS) sh fuzz/run.sh

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
