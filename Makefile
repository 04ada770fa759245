# The two commands of the README:
#   make demo   install what is missing, build, train examples/seed.yaml
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-asan test-tsan bench bench-peers clean

all: build

setup:
	@scripts/setup

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCOHORT_TEST_HOOKS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: setup build
	$(BUILD)/cohort train examples/seed.yaml --out runs/seed

# The Keras reference tests run in scripts/pyenv's test environment (~/.cache/cohort-test),
# made here where it is missing or out of date (about 30 s from PyPI), reused otherwise.
test: setup
	@scripts/pyenv test >/dev/null
	@$(MAKE) --no-print-directory build CMAKE_FLAGS="-DCOHORT_WERROR=ON -DCOHORT_TEST_HOOKS=ON $(CMAKE_FLAGS)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory test-tsan

# The suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan:
	@$(MAKE) --no-print-directory build BUILD=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DCOHORT_SANITIZE=ON -DCOHORT_WERROR=ON -DCOHORT_TEST_HOOKS=ON -DCOHORT_CUDA=OFF"
	cd build-asan && COHORT_SANITIZED=1 ASAN_OPTIONS=allocator_may_return_null=1 ctest --output-on-failure -j $(JOBS)

# The threads strategy under ThreadSanitizer.
test-tsan:
	@$(MAKE) --no-print-directory build BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DCOHORT_TSAN=ON -DCOHORT_WERROR=ON -DCOHORT_CUDA=OFF"
	bash tests/tsan.sh build-tsan/cohort

bench: setup build
	bench/run

# cohort beside TensorFlow/Keras, PyTorch 2.x, Optuna and Ray Tune (scripts/pyenv peers: a few GB).
bench-peers: setup build
	bench/peers/run

# libFuzzer on every reader, FUZZ_SECONDS (default 60) each; fails on a finding.
fuzz:
	tests/fuzz/run

clean:
	rm -rf build build-asan build-tsan
