#!/usr/bin/env bash
# The portable-wheel check: installs the repaired wheel of the running interpreter (dist/, from
# `make wheel`) into a fresh virtual environment, hides the system's liburing, zstd, xxHash and
# libdeflate from the dynamic loader (a private mount namespace, `unshare -m`, with an empty file
# bind-mounted over each of their files), then checks that the wheel needs nothing outside it:
#   - the hidden libraries really do not load any more (ctypes), so the check below can fail;
#   - `import libshard` takes the package from the venv, and the extension's liburing, zstd, xxHash
#     and libdeflate are the copies inside the wheel (libshard.libs/, read from /proc/self/maps);
#   - the wheel's `libshard` console script packs a small real torch.save directory, verifies it,
#     and exits 1 on a missing dataset and 2 on a bad command line, as the C++ executable does;
#   - a shuffled Loader pass yields every sample exactly once, bit-exact against torch.load.
# Then every other interpreter's wheel in dist/ whose interpreter is here (no torch there): with the
# same libraries hidden, the extension maps the wheel's copies and the console script packs and
# verifies, with the executable's exit codes.
# It checks the wheel it names, whatever else is installed: the venv sees the interpreter's
# packages (torch, numpy) through a view of its site directories (the user's included) that leaves
# out every other libshard, so pip cannot find one "already satisfied" and install nothing, and
# no other copy can be imported; the installed files are compared with the wheel's RECORD.
# pip installs with --no-index: nothing is downloaded, and no other torch can come in.
# (scripts/test_wheel_decoys.sh checks this with decoy libshards beside the interpreter.)
#
#   scripts/test_wheel.sh [PYTHON] [WHEEL]    PYTHON: default python3; WHEEL: default the newest
#                                             dist/libshard-*-cpXY-cpXY-manylinux*.whl for it
# Needs root (or unprivileged user namespaces) for unshare. Exit 0 when everything passed.
set -euo pipefail
# The wheel alone: a build tree on PYTHONPATH (make test exports one) would be imported instead.
unset PYTHONPATH LIBSHARD_PYTHONPATH
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${1:-python3}
WHEEL=${2:-}
T0=$SECONDS
say() { echo "--- test_wheel: $* ($((SECONDS - T0)) s)"; }
fail() { echo "test_wheel: FAILED: $*" >&2; exit 1; }

tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
if [ -z "$WHEEL" ]; then
  WHEEL=$(ls -t "$ROOT"/dist/libshard-*-"$tag-$tag"-*manylinux*.whl 2>/dev/null | head -1) ||
    true
  [ -n "$WHEEL" ] || fail "no repaired $tag wheel in $ROOT/dist (run: make wheel)"
fi
[ -f "$WHEEL" ] || fail "no such wheel: $WHEEL"
newer=$(cd "$ROOT" && find CMakeLists.txt pyproject.toml cmake libshard converters bindings \
        -type f -newer "$WHEEL" 2>/dev/null | head -3 | tr '\n' ' ')
[ -z "$newer" ] || echo "test_wheel: note: ${newer}changed after $(basename "$WHEEL") was built;" \
  "this checks the wheel as built (make wheel to rebuild it)"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/libshard_wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 1. A fresh venv with the wheel. torch and numpy come from the interpreter's site directories,
# through a view of each (symbolic links to every entry but libshard's own files) that a .pth file
# of the venv adds after the venv's own site-packages. Not --system-site-packages: pip would then
# take a libshard installed there (or in the user's site, which comes before the venv's) as
# "already satisfied" and install nothing from the wheel.
"$PY" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
"$PY" - "$WORK/view" "$("$VPY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" <<'PYEOF'
import os, sys
view, venv_site = sys.argv[1:3]
def libshard_own(name):
    n = name.lower()
    return (n in ("libshard", "libshard.libs", "_libshard_cli.py", "__pycache__") or
            n.startswith(("libshard-", "__editable__.libshard", "__editable___libshard")) or
            (n.endswith((".pth", ".egg-link")) and "libshard" in n))
lines = []
for k, d in enumerate(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")
                      and os.path.isdir(p)):
    out = os.path.join(view, str(k))
    os.makedirs(out)
    for name in os.listdir(d):
        if not libshard_own(name):
            os.symlink(os.path.join(d, name), os.path.join(out, name))
    lines.append(f"import site; site.addsitedir({out!r})")
with open(os.path.join(venv_site, "zz_libshard_test_view.pth"), "w") as f:
    f.write("\n".join(lines) + "\n")
PYEOF
export PYTHONNOUSERSITE=1  # the user's site came into the view (filtered); not again, unfiltered
"$VPY" -m pip install -q --no-index --disable-pip-version-check "$WHEEL" 2>&1 |
  grep -v '^WARNING: Location' || true
"$VPY" -m pip show -q libshard >/dev/null 2>&1 || fail "pip did not install $WHEEL"
[ -x "$WORK/venv/bin/libshard" ] || fail "the wheel installed no libshard console script"
# Every file the wheel's RECORD lists is in the venv with the wheel's hash, and `libshard` resolves
# to the venv's copy: what runs below is this wheel.
"$VPY" - "$WHEEL" "$WORK/venv" <<'PYEOF' || fail "the venv does not hold $(basename "$WHEEL")'s files"
import base64, csv, hashlib, importlib.metadata as md, io, os, sys, sysconfig, zipfile
wheel, venv = sys.argv[1:3]
site = sysconfig.get_path("platlib")
with zipfile.ZipFile(wheel) as z:
    record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.TextIOWrapper(z.open(record), "utf-8")))
checked = 0
for path, digest, _ in rows:
    if not digest or ".data/" in path:
        continue
    algo, _, want = digest.partition("=")
    with open(os.path.join(site, path), "rb") as f:
        got = base64.urlsafe_b64encode(hashlib.new(algo, f.read()).digest()).rstrip(b"=").decode()
    if got != want:
        sys.exit(f"{path}: installed bytes differ from the wheel's")
    checked += 1
dist = md.distribution("libshard")
where = os.path.realpath(str(dist.locate_file("")))
if not where.startswith(os.path.realpath(venv)):
    sys.exit(f"the libshard distribution found is at {where}, not in the venv")
wheel_version = os.path.basename(wheel).split("-")[1]
if dist.version != wheel_version:
    sys.exit(f"libshard {dist.version} found, the wheel is {wheel_version}")
print(f"{checked} files of the wheel in the venv, byte for byte")
PYEOF
say "installed $(basename "$WHEEL") into a fresh venv"

# 2. The system copies of the bundled libraries: every file of their sonames, links resolved.
HIDE=()
while read -r lib; do
  for f in $("$PY" - "$lib" <<'PYEOF'
import ctypes.util, glob, os, sys
name = sys.argv[1]
# Every directory the loader searches here: ld.so.cache entries and the default paths.
dirs = {"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"}
dirs |= {os.path.dirname(p) for p in glob.glob("/usr/lib/*-linux-gnu/lib*.so*")}
dirs |= {os.path.dirname(p) for p in glob.glob("/lib/*-linux-gnu/lib*.so*")}
seen = set()
for d in sorted(dirs):
    for p in glob.glob(os.path.join(d, f"lib{name}.so*")):
        seen.add(os.path.realpath(p))
        seen.add(p)
print("\n".join(sorted(p for p in seen if os.path.isfile(p))))
PYEOF
  ); do HIDE+=("$f"); done
done <<<$'uring\nzstd\nxxhash\ndeflate'
((${#HIDE[@]})) || fail "found no system copy of liburing/zstd/xxhash/libdeflate to hide"
say "hiding ${#HIDE[@]} system library files: ${HIDE[*]}"

# 3. The data: a small real torch.save directory (EAGLE-3 layout, several dtypes, varying lengths).
SRC=$WORK/src
"$PY" - "$SRC" <<'PYEOF'
import os, sys, torch
src = sys.argv[1]
os.makedirs(src)
g = torch.Generator().manual_seed(15)
for i in range(20):
    n = 5 + (7 * i) % 23
    raw = torch.randint(0, 256, (n * 8 * 4,), generator=g, dtype=torch.uint8)
    torch.save({
        "input_ids": torch.randint(0, 32000, (n,), generator=g, dtype=torch.int64),
        "loss_mask": torch.randint(0, 2, (n,), generator=g, dtype=torch.int64),
        "hidden_state": torch.randn(1, n, 16, generator=g).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, n, 48, generator=g).to(torch.bfloat16),
        "raw_f32": raw.view(torch.float32).reshape(n, 8),  # NaN/inf bit patterns included
    }, os.path.join(src, f"sample_{i:03d}.pt"))
PYEOF

# 4. Everything else runs in the namespace where the system copies are empty files.
cat >"$WORK/check.py" <<'PYEOF'
import ctypes, os, subprocess, sys
venv, src, out, hidden = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def fail(msg):
    sys.exit(f"test_wheel: FAILED: {msg}")

for name in ("liburing.so.2", "libzstd.so.1", "libxxhash.so.0", "libdeflate.so.0"):
    try:
        ctypes.CDLL(name)
    except OSError:
        continue
    fail(f"the system's {name} still loads: hiding it did not work, so this check proves nothing")

import libshard, torch
pkg = os.path.dirname(libshard.__file__)
if not pkg.startswith(venv):
    fail(f"libshard imported from {pkg}, not from the venv {venv}")
maps = open("/proc/self/maps").read()
# libxxhash is a header-only dependency since xxh3 is built per instruction set inside libshard
# (libshard/src/format/xxh3/): if it is mapped at all, it must be the wheel's copy.
for stem in ("liburing", "libzstd", "libxxhash", "libdeflate"):
    paths = {l.split()[-1] for l in maps.splitlines() if f"/{stem}" in l}
    if not paths and stem != "libxxhash":
        fail(f"no {stem} mapped after import libshard")
    outside = [p for p in paths if "/libshard.libs/" not in p]
    if outside:
        fail(f"{stem} mapped from outside the wheel: {outside}")
print(f"import libshard {libshard.__version__} from {pkg}; bundled libraries in use")

cli = os.path.join(venv, "bin", "libshard")
def run(*args):
    return subprocess.run([cli, *args], capture_output=True, text=True)

r = run("--version")
if r.returncode != 0 or r.stdout.strip() != f"libshard {libshard.__version__}":
    fail(f"libshard --version: rc {r.returncode}, {r.stdout!r} {r.stderr!r}")
r = run("pack", src, "-o", out, "--shard-size", "64KiB")
if r.returncode != 0 or not r.stdout.startswith("packed 20 samples"):
    fail(f"libshard pack: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
print(r.stdout.splitlines()[0])
r = run("verify", out)
if r.returncode != 0 or not r.stdout.startswith("ok: 20 samples"):
    fail(f"libshard verify: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
r = run("info", out + "-missing")
if r.returncode != 1 or "libshard info: error:" not in r.stderr:
    fail(f"libshard info on a missing dataset: rc {r.returncode} (want 1), {r.stderr!r}")
r = run("no-such-command")
if r.returncode != 2:
    fail(f"libshard with a bad subcommand: rc {r.returncode} (want 2), {r.stderr!r}")

def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()

seen = []
loader = libshard.Loader(out, shuffle=True, seed=3, return_index=True)
for sample in loader:
    i = int(sample.pop(libshard.INDEX_KEY))
    want = torch.load(os.path.join(src, f"sample_{i:03d}.pt"), weights_only=True)
    if list(sample) != list(want):
        fail(f"sample {i}: keys {list(sample)} != {list(want)}")
    for k, w in want.items():
        g = sample[k]
        if g.dtype != w.dtype or g.shape != w.shape or raw(g) != raw(w):
            fail(f"sample {i} field {k}: not bit-exact ({g.dtype} {tuple(g.shape)} vs "
                 f"{w.dtype} {tuple(w.shape)})")
    seen.append(i)
if sorted(seen) != list(range(20)) or seen == sorted(seen):
    fail(f"Loader pass: indices {seen} (want 0..19 once each, shuffled)")
print(f"Loader pass: 20 samples, shuffled, bit-exact against torch.load")
PYEOF

mounts=""
for f in "${HIDE[@]}"; do mounts+="mount --bind /dev/null '$f' && "; done
if [ "$(id -u)" -eq 0 ]; then NS=(unshare -m --propagation private); else NS=(unshare -r -m --propagation private); fi
"${NS[@]}" true 2>/dev/null ||
  fail "cannot make a mount namespace here (${NS[*]}); run as root or enable user namespaces"
hidden() { "${NS[@]}" bash -c "${mounts} exec \"\$@\"" _ "$@"; }  # hidden CMD...: runs CMD there

hidden "$VPY" "$WORK/check.py" "$WORK/venv" "$SRC" "$WORK/packed" ||
  fail "the $tag wheel does not work with the system libraries hidden"
say "$tag wheel passed"

# 5. The other interpreters' wheels in dist/ (`make wheel`), when their interpreter is here. They
# have no torch here (torch 2.13.0 is installed for this interpreter only, and this check never
# installs one), so `import libshard` cannot run; the console script needs no torch: it packs and
# verifies the same directory, with the same libraries hidden, after the extension it loads is
# checked to map the wheel's copies.
cat >"$WORK/check_core.py" <<'PYEOF'
import ctypes, os, subprocess, sys
venv, src, out = sys.argv[1:4]
for name in ("liburing.so.2", "libzstd.so.1", "libxxhash.so.0", "libdeflate.so.0"):
    try:
        ctypes.CDLL(name)
    except OSError:
        continue
    sys.exit(f"test_wheel: FAILED: the system's {name} still loads")
import _libshard_cli
core = _libshard_cli.load_core()
if not core.__file__.startswith(venv):
    sys.exit(f"test_wheel: FAILED: libshard._core loaded from {core.__file__}, not from {venv}")
for stem in ("liburing", "libzstd", "libxxhash", "libdeflate"):
    paths = {l.split()[-1] for l in open("/proc/self/maps") if f"/{stem}" in l}
    if (not paths and stem != "libxxhash") or any("/libshard.libs/" not in p for p in paths):
        sys.exit(f"test_wheel: FAILED: {stem} mapped from {sorted(paths)}, not the wheel's copy")
cli = os.path.join(venv, "bin", "libshard")
for args, want in ((["pack", src, "-o", out, "--shard-size", "64KiB", "-q"], 0),
                   (["verify", out], 0), (["info", out + "-missing"], 1), (["bogus"], 2)):
    r = subprocess.run([cli, *args], capture_output=True, text=True)
    if r.returncode != want:
        sys.exit(f"test_wheel: FAILED: libshard {' '.join(args)}: exit {r.returncode}, want {want}"
                 f"\n{r.stdout}{r.stderr}")
print(f"{os.path.basename(core.__file__)}: bundled libraries in use; libshard pack, verify, "
      f"exit codes ok")
PYEOF
pyroot=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
others=0
for whl in "$(dirname "$WHEEL")"/libshard-*-cp3*-cp3*-*manylinux*.whl; do
  [ -f "$whl" ] || continue
  t=$(basename "$whl" | cut -d- -f3)
  [ "$t" = "$tag" ] && continue
  v=3.${t#cp3}
  opy=$(ls -d "$pyroot"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -1) || true
  [ -n "$opy" ] || opy=$(command -v "python$v" 2>/dev/null) || true
  if [ -z "$opy" ] || ! "$opy" -c '' 2>/dev/null; then echo "($t: no python$v here, not checked)"; continue; fi
  "$opy" -m venv "$WORK/venv-$t"
  "$WORK/venv-$t/bin/python" -m pip install -q --no-index --no-deps "$whl" 2>&1 |
    grep -v '^WARNING: Location' || true
  [ -x "$WORK/venv-$t/bin/libshard" ] || fail "the $t wheel installed no libshard console script"
  hidden "$WORK/venv-$t/bin/python" "$WORK/check_core.py" "$WORK/venv-$t" "$SRC" "$WORK/packed-$t" ||
    fail "the $t wheel does not work with the system libraries hidden"
  others=$((others + 1))
done
say "passed ($tag in full, $others other wheels without torch)"
