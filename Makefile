# vkhost: the two commands are `make run` (the main job: `vkhost bench` on the default device)
# and `make test` (fmt, clippy, the whole test suite with the validation layer on, the
# fault-injection sweep, `vkhost check --all`, valgrind over the soundness tests (`make memcheck` runs nine device test binaries).
# Both first run scripts/setup, which installs a Vulkan loader, lavapipe and the validation
# layer where they are missing, and changes nothing where Vulkan already works.

CARGO ?= cargo
# Where cargo puts the release build ($CARGO_TARGET_DIR or $CARGO_BUILD_TARGET_DIR when set;
# a target-dir in a cargo config file is not read here).
TARGET := $(or $(CARGO_TARGET_DIR),$(CARGO_BUILD_TARGET_DIR),target)
BIN := $(TARGET)/release
FAULT_FEATURES := vkhost/fault-injection,vkhost-capi/fault-injection

.PHONY: run test setup build devices check fmt clippy bench-full memcheck capi-test

setup:
	@bash scripts/setup

build: setup
	$(CARGO) build --release

# The main job: a short sweep (under a minute on lavapipe), every point verified.
run: build
	$(BIN)/vkhost devices
	$(BIN)/vkhost bench --quick

devices: build
	$(BIN)/vkhost devices

check: build
	$(BIN)/vkhost check --all

# The full sweep of docs/PERFORMANCE.md (4K..1G, all paths and directions).
bench-full: build
	$(BIN)/vkhost bench --json bench.json --plot bench.svg

fmt:
	$(CARGO) fmt --all -- --check

# In the release profile, as the tests build: build scripts and proc macros compile once for both.
# One pass with the fault-injection features on, so the fault module and its tests are linted
# too: without them only `fault::check`'s two-line stub differs (src/fault.rs), and a second
# pass with `-p vkhost` re-checked dependencies under another feature set (53 s on 2 cores).
clippy:
	$(CARGO) clippy --release --workspace --all-targets --features $(FAULT_FEATURES) -- -D warnings

# Device tests run with the Khronos validation layer (each opens its device with validation on)
# and its synchronization validation, and assert zero errors and hazards. One test at a time
# per binary: the Debian 12 layer (1.3.239) races when devices are created or destroyed on one
# thread while another calls into the layer (KhronosGroup/Vulkan-ValidationLayers#4391, fixed
# in 1.4.304; docs/RELIABILITY.md), which parallel tests, each opening its own device, hit. Then the wgpu
# interop example (crates/vkhost-wgpu: a WGSL shader over two registered Vec<f32>s, checked, with
# validation; `cargo test` already built it, and the `vkhost` binary: running them directly
# keeps cargo from rebuilding dependencies for another feature set), the self-test, the fault-injection sweep and the
# fault module's doc examples, valgrind over the soundness tests, the C ABI and Python package, and the crate checks
# (rustdoc, package, a runnable doc example on every public item: scripts/doc-examples). The doc examples of every
# library crate run in the first `cargo test` (edition 2024 merges them into one binary per crate).
# That `cargo test` also builds libvkhost_capi.so and .a (in deps/: a test build does not copy
# them up to release/); they are copied aside for scripts/capi-test before scripts/fault-tests
# rebuilds them with fault injection under the same names.
test: export VK_LAYER_ENABLES = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
test: setup fmt clippy
	$(CARGO) test --workspace --release -- --test-threads=1
	mkdir -p $(TARGET)/capi-lib && cp -f $(BIN)/deps/libvkhost_capi.so $(BIN)/deps/libvkhost_capi.a $(TARGET)/capi-lib/
	VKHOST_VALIDATION=1 $(BIN)/examples/wgpu_compute
	$(BIN)/vkhost check --all
	bash scripts/fault-tests
	bash scripts/memcheck ci
	VKHOST_CAPI_PREBUILT=$(TARGET)/capi-lib bash scripts/capi-test
	bash scripts/crate-check

# Nine device test binaries under valgrind memcheck (0 errors, 0 definite leaks; scripts/memcheck
# lists them, ten runs two at a time); about 6 minutes on 2 cores after the test build (2026-12-05: the longest run 129 s, host.rs). `make test` (and CI) runs `bash scripts/memcheck ci` (the soundness and fork
# tests under valgrind, under 2 minutes) to stay inside its 20-minute budget with the wgpu
# crate's build; `bash scripts/memcheck quick` is the middle set.
memcheck: setup
	bash scripts/memcheck full

# The C ABI (crates/vkhost-capi, include/vkhost.h) and the Python package (python/): builds
# libvkhost_capi.so, checks the header for drift, runs the C test (also under valgrind) and the
# C example, pip-installs ./python into a venv and runs pytest and the Python example; about 2
# minutes on 2 cores. See scripts/capi-test.
capi-test: setup
	bash scripts/capi-test
