# bigc: make demo | make test | make build
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
LLVM_PREFIX := $(shell llvm-config-19 --prefix 2>/dev/null)

.PHONY: all deps configure build test demo clean runtime

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DMLIR_DIR=$(LLVM_PREFIX)/lib/cmake/mlir $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The runtime alone (no MLIR), as on a GPU machine.
runtime:
	cmake -S . -B build-runtime -G Ninja -DCMAKE_BUILD_TYPE=Release -DBIGC_ENABLE_COMPILER=OFF
	cmake --build build-runtime -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-runtime
