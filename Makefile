# libshard: `make demo`, `make check` and `make test` work on a fresh machine (they run `make deps`
# first; demo and check install only what they need, DEPS=core).
BUILD     ?= build
PYTHON    ?= python3
JOBS      ?= $(shell nproc)
# Release at -O2 (the optimisation every figure in docs/performance.md was measured with), without
# debug information, which took ~40% of the compile time; BUILD_TYPE=RelWithDebInfo for a debugger.
BUILD_TYPE ?= Release
RELEASE_FLAGS = -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG"
TORCH_PREFIX = $(shell $(PYTHON) -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
CMAKE_ARGS ?=
DEMO_DIR  ?= demo_data
# The demo's directory of torch.save files (CI runs a small one: scripts/test.sh).
DEMO_SAMPLES ?= 64
DEMO_HIDDEN  ?= 1024
DEMO_MIN_LEN ?= 256
DEMO_MAX_LEN ?= 1024
# What `make demo` builds: the library, the `libshard` command line and the Python module it runs
# (libshard._core and the package's files); no test, benchmark or LibTorch target.
DEMO_TARGETS = libshard_cli libshard_python
# all: everything `make test` needs; core: the build and the quick suites (scripts/deps.sh).
DEPS ?= all
# gcov instrumentation of the Python bindings' own C++ (bindings/src/*.cc; not the library):
# `make test` and `make coverage` turn it ON to measure the bindings' line coverage; every other
# target configures it OFF explicitly, so a build tree they share does not keep it (docs/testing.md).
BINDINGS_COVERAGE ?= OFF

.PHONY: all deps configure build check test coverage test-cpp test-python test-sanitizers test-install test-faults demo bench bench-deps fuzz fuzz-replay wheel test-wheel sdist clean

all: build

deps:
	@LIBSHARD_DEPS=$(DEPS) bash scripts/deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(RELEASE_FLAGS) \
	  -DCMAKE_PREFIX_PATH="$(TORCH_PREFIX)" -DLIBSHARD_BUILD_PYTHON=ON \
	  -DPython_EXECUTABLE=$$(command -v $(PYTHON)) \
	  -DLIBSHARD_BINDINGS_COVERAGE=$(BINDINGS_COVERAGE) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The quick suites (scripts/check.sh): every C++ suite but the scale ones (ctest label `check`)
# and the Python suites of the library's own behaviour, without sanitizers, fuzzing, the trainers'
# environment, the S3 server, fault injection, multi-process runs or wheels: those are left to
# `make test`. A few minutes on 2 cores once built.
check: DEPS = core
check: build
	@bash scripts/check.sh "$(BUILD)" "$(PYTHON)"

# Everything CI runs: `make check`'s suites and the rest of the C++ and Python suites, sanitizer
# builds, fuzz replay, the installed package, the portable wheel (CI), `make demo` on a small
# directory. The bindings' C++ is built instrumented for its line coverage (BINDINGS_COVERAGE).
test: BINDINGS_COVERAGE = ON
test: build
	@bash scripts/test.sh "$(BUILD)" "$(PYTHON)"

# The Python steps of `make test` (make check's Python suites, the rest, the trainer integrations)
# under coverage.py, with the bindings' C++ instrumented for gcov, then the line coverage of the
# Python package and of the bindings' C++, per file and in total (scripts/coverage.sh; `make test`
# prints the same reports last). docs/testing.md.
coverage: BINDINGS_COVERAGE = ON
coverage: build
	@bash scripts/coverage.sh "$(BUILD)" "$(PYTHON)"

# Fuzzing (fuzz/, scripts/fuzz.sh): clang, ASan+UBSan, in build-fuzz. `make fuzz` runs each target
# for FUZZ_SECONDS; `make fuzz-replay` (also a step of `make test`) replays the committed corpus and
# crash reproducers, then fuzzes each target briefly.
FUZZ_SECONDS ?= 600
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh run build-fuzz

fuzz-replay: deps
	@bash scripts/fuzz.sh replay build-fuzz

# The write-path fault harness at every fault point (`make test` runs a bounded spread of them).
test-faults: build
	LIBSHARD_FAULTS=full LIBSHARD_CLI=$(CURDIR)/$(BUILD)/converters/libshard \
	  PYTHONPATH=$(CURDIR)/$(BUILD)/python $(PYTHON) -m pytest -q -p no:cacheprovider \
	  tests/python/test_write_faults.py

# Portable manylinux wheels for CPython 3.9-3.13 in dist/, repaired with auditwheel so liburing,
# zstd, xxHash and libdeflate travel inside (scripts/build_wheels.sh; WHEEL_PYTHONS="3.12" for one).
wheel: deps
	@bash scripts/build_wheels.sh

# The running interpreter's wheel (built first when dist/ has none) in a fresh venv with the
# system's copies of those libraries hidden (scripts/test_wheel.sh; `make test` runs it when
# dist/ holds that wheel).
test-wheel: deps
	@tag=$$($(PYTHON) -c 'import sys; print("cp%d%d" % sys.version_info[:2])'); \
	  ls dist/libshard-*-$$tag-$$tag-*manylinux*.whl >/dev/null 2>&1 || \
	  bash scripts/build_wheels.sh $$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	@bash scripts/test_wheel.sh $(PYTHON)

# The source distribution, dist/libshard-VERSION.tar.gz: `pip install --no-build-isolation` of it
# builds against the system's libraries, found through pkg-config (README.md, Install).
sdist: deps
	cd /tmp && $(PYTHON) -m build --sdist --no-isolation --outdir $(CURDIR)/dist $(CURDIR)

demo: DEPS = core
demo: configure
	cmake --build $(BUILD) -j$(JOBS) --target $(DEMO_TARGETS)
	@DEMO_SAMPLES=$(DEMO_SAMPLES) DEMO_HIDDEN=$(DEMO_HIDDEN) DEMO_MIN_LEN=$(DEMO_MIN_LEN) \
	  DEMO_MAX_LEN=$(DEMO_MAX_LEN) bash scripts/demo.sh "$(BUILD)" "$(PYTHON)" "$(DEMO_DIR)"

bench: build
	@echo "see bench/README.md"

# Bench-only: Mosaic Streaming and LitData in .venv-peers for `bench/s3_bench.py --peers`
# (bench/peers_env.sh; idempotent, torch kept at the system's 2.13.0). Not part of deps or CI.
bench-deps: deps
	@PYTHON=$(PYTHON) bash bench/peers_env.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz $(DEMO_DIR)
