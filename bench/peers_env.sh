#!/usr/bin/env bash
# Builds the peers' virtual environment for `bench/s3_bench.py --peers` (default .venv-peers, or
# $LIBSHARD_PEERS_VENV), idempotently: Mosaic Streaming and LitData from PyPI, at the versions the
# figures in docs/performance.md were measured with. Bench-only: `make deps` and CI do not run it.
# --system-site-packages so the system's torch==2.13.0 (CPU) is the one the peers see, and a
# constraint keeps pip from ever replacing it. Mosaic pins numpy<2.2, which goes into the venv
# only. torchvision, which both name as a dependency, is removed again: PyPI's wheels of it are
# built against CUDA torch and fail to load beside the CPU torch (bench/s3_bench.py stands in for
# the two names streaming.vision imports; the bench reads no images). Does nothing when the
# environment already has everything.
set -uo pipefail
PY=${PYTHON:-python3}
VENV=${LIBSHARD_PEERS_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-peers}
PEERS=("mosaicml-streaming==0.13.0" "litdata==0.2.76")
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) || {
  echo "peers env: the system python has no torch (scripts/deps.sh installs it)"; exit 1; }

check() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$TORCH_VERSION" "${PEERS[@]}" <<'PYEOF' 2>/dev/null
import sys, importlib.metadata as m
import torch
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
for spec in sys.argv[2:]:
    name, _, ver = spec.partition("==")
    assert m.version(name) == ver, (name, m.version(name))
try:
    m.version("torchvision")
    raise SystemExit("torchvision is installed")
except m.PackageNotFoundError:
    pass
import obstore, boto3  # noqa: F401
PYEOF
}
if check; then echo "peers env: ok ($VENV)"; exit 0; fi

t0=$SECONDS
[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV" || {
  echo "peers env: error: could not create $VENV"; exit 1; }
CONSTRAINT=$(mktemp); trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==$TORCH_VERSION" >"$CONSTRAINT"
"$VENV/bin/python" -m pip install -q -c "$CONSTRAINT" "${PEERS[@]}" || {
  echo "peers env: error: pip could not install ${PEERS[*]}"; exit 1; }
"$VENV/bin/python" -m pip uninstall -q -y torchvision >/dev/null 2>&1 || true
have=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
case "$have" in "$TORCH_VERSION"*) ;; *)
  echo "peers env: error: pip replaced torch ($have, want $TORCH_VERSION)"; exit 1 ;; esac
check || { echo "peers env: error: $VENV is incomplete after the install"; exit 1; }
echo "peers env: built $VENV in $((SECONDS - t0)) s (torch $have)"
