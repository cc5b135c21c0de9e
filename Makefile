# bigc: make demo | make test | make build
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Nothing here asks an installed tool anything: make reads this file before `deps` has run, so
# CMake finds MLIR 19 itself (CMakeLists.txt: llvm-config-19, then the Debian prefix).

.PHONY: all deps python-env configure build test test-asan test-asan-runtime demo clean runtime

all: build

deps:
	@bash scripts/install-deps.sh

# The Python environment of `bigc import` and of the tests that check it against PyTorch
# (.venv: torch 2.15, transformers 5.23 from PyPI; nothing to do when it is there).
python-env: deps
	@bash scripts/setup-python.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The runtime alone (no MLIR), as on a GPU machine.
runtime:
	cmake -S . -B build-runtime -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGC_ENABLE_COMPILER=OFF
	cmake --build build-runtime -j $(JOBS)

test: build python-env
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer (gcc; UB aborts) build of everything but the CUDA
# backend, running the unit tests, lit and the end-to-end tests (ASAN_CTEST_ARGS narrows them).
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# -O1, as the sanitizers' documentation advises: a third faster to compile than Release's -O3.
ASAN_OPT := -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG"
ASAN_CTEST_ARGS ?= -LE gpu
test-asan: deps python-env
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGC_ENABLE_CUDA=OFF \
	  -DCMAKE_C_FLAGS="$(ASAN_FLAGS)" -DCMAKE_CXX_FLAGS="$(ASAN_FLAGS)" $(ASAN_OPT) $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) $(ASAN_CTEST_ARGS)

# The sanitizer run CI makes (the full one above is too long for CI's 20 minutes on 2 cores): the
# runtime alone under ASan + UBSan (no MLIR): its unit tests (executor, streams, communicator,
# checkpoints, loading, initial values, CPU Adam, kernels), the fuzz corpora's replay of the program
# loader, token files and safetensors, and bigc-run inspect/verify.
test-asan-runtime: deps
	cmake -S . -B build-asan-runtime -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGC_ENABLE_CUDA=OFF \
	  -DBIGC_ENABLE_COMPILER=OFF -DCMAKE_C_FLAGS="$(ASAN_FLAGS)" -DCMAKE_CXX_FLAGS="$(ASAN_FLAGS)" $(ASAN_OPT) $(CMAKE_FLAGS)
	cmake --build build-asan-runtime -j $(JOBS)
	cd build-asan-runtime && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -LE gpu

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-runtime build-asan build-asan-runtime build-fuzz
