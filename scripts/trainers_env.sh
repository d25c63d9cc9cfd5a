#!/usr/bin/env bash
# Builds the trainers' virtual environment (default .venv-trainers, or $LIBSHARD_TRAINERS_VENV)
# for the integration tests of libshard.specforge / libshard.speculators / libshard.modelopt
# (tests/python/test_trainer_*.py), idempotently. --system-site-packages so the system's
# torch==2.13.0 is the one the trainers see; the trainers themselves go in with --no-deps (their
# metadata pins other torch, sglang and vllm builds), their data-path dependencies at the pinned
# versions below, and a constraint keeps pip from ever replacing torch. Does nothing when the
# environment already has everything; a failed install only warns (the tests then skip and say why).
# libshard.automodel's tests (test_trainer_automodel.py) use nemo-automodel from the same list.
set -uo pipefail
PY=${PYTHON:-python3}
VENV=${LIBSHARD_TRAINERS_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-trainers}
TRAINERS=("specforge==0.2.0" "speculators==0.9.0" "hs-connectors==0.9.0" "nvidia-modelopt==0.47.0"
          "nemo-automodel==0.7.0")
# What the trainers' data and training paths import, at the versions the tests were run with.
EXTRAS=("transformers==5.8.1" "datasets==5.1.0" "accelerate==1.15.0" "loguru==0.7.3"
        "omegaconf==2.3.0" "pulp==3.3.2" "rich" "typer" "httpx" "openai" "pyyaml" "pillow")
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) || {
  echo "trainers env: skipped: the system python has no torch (scripts/deps.sh installs it)"; exit 0; }

check() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$TORCH_VERSION" "${TRAINERS[@]}" "${EXTRAS[@]}" <<'PYEOF' 2>/dev/null
import sys, importlib.metadata as m
import torch
assert torch.__version__.split("+")[0] == sys.argv[1], torch.__version__
for spec in sys.argv[2:]:
    name, _, ver = spec.partition("==")
    have = m.version(name)
    assert not ver or have == ver, (name, have)
PYEOF
}
if check; then echo "trainers env: ok ($VENV)"; exit 0; fi

t0=$SECONDS
[ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV" || {
  echo "trainers env: warning: could not create $VENV; the trainer tests will skip"; exit 0; }
CONSTRAINT=$(mktemp); trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==$TORCH_VERSION" >"$CONSTRAINT"
PIP=("$VENV/bin/python" -m pip install -q -c "$CONSTRAINT")
"${PIP[@]}" --no-deps "${TRAINERS[@]}" ||
  echo "trainers env: warning: a trainer is not installable here; its tests will skip"
"${PIP[@]}" "${EXTRAS[@]}" ||
  echo "trainers env: warning: the trainers' dependencies did not all install; their tests will skip"
have=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
case "$have" in "$TORCH_VERSION"*) ;; *)
  echo "trainers env: error: pip replaced torch ($have, want $TORCH_VERSION)"; exit 1 ;; esac
echo "trainers env: built $VENV in $((SECONDS - t0)) s (torch $have)"
