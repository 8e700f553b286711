#!/usr/bin/env bash
# Tests a wheel of scripts/build-wheel.sh as a user who installs it from nothing but the wheel:
# a fresh venv, `pip install "<wheel>[test]"` (the test extras from the machine's pip index), then
# tests/python_package (with the USD assets of scripts/setup/usd.sh), examples/python/particles.py
# and usd_scene.py, and perf/python_bench.py --quick and perf/usd_bench.py --quick, run from
# a copy outside the source tree.
#
#   scripts/test-wheel.sh WHEEL [WORK_DIR]        (default: /tmp/kstage-wheel-test)
#
# No kstage dependency cache or build tree is visible to it: run as root (CI), everything runs as
# the unprivileged user `nobody` with its own HOME in WORK_DIR, which cannot read root's home
# (the cache) and for which the build tree is made unreadable for the run (its mode is put back
# after); and every shared object of the installed package is checked to resolve its libraries
# inside the venv (ldd), with no RPATH outside it (readelf). Not root: the same checks as the
# calling user, with KSTAGE_DEPS_DIR, HOME and the build tree left visible -- and it says so.
# KSTAGE_WHEEL_PYTHON: the Python of the venv (default: python3 on the system PATH, which for
# `nobody` is Debian's); one `nobody` cannot run (a pyenv build under /root) runs as the caller.
# Exits non-zero on any failure; the pytest summary is the last line but one.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEEL=${1:?usage: scripts/test-wheel.sh WHEEL [WORK_DIR]}
WORK=${2:-/tmp/kstage-wheel-test}
WHEEL=$(readlink -f "$WHEEL")
log() { echo "[kstage-wheel-test] $*"; }
die() { echo "[kstage-wheel-test] error: $*" >&2; exit 1; }
[ -f "$WHEEL" ] || die "no wheel $WHEEL"

rm -rf "$WORK"
mkdir -p "$WORK/home" "$WORK/src"
cp "$WHEEL" "$WORK/"
mkdir -p "$WORK/src/tests/python"
cp -r "$ROOT/tests/python_package" "$WORK/src/tests/"
cp "$ROOT/tests/python/dlpack_ctypes.py" "$WORK/src/tests/python/"  # ks_support's DLPack structs
cp "$ROOT/README.md" "$ROOT/CMakeLists.txt" "$WORK/src/"  # what the tests check the package against
mkdir -p "$WORK/src/examples" "$WORK/src/perf"
cp "$ROOT/examples/python/particles.py" "$ROOT/examples/python/usd_scene.py" "$WORK/src/examples/"
# The Newton wheel's USD assets of kstage.usd's tests and example (scripts/setup/usd.sh), copied
# beside the tests: the cache itself is not readable to `nobody`.
USD_ASSETS=${KSTAGE_USD_ASSETS:-${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}/usd-assets}
usd_env=()
if [ -f "$USD_ASSETS/newton/tests/assets/ant_multi.usda" ]; then
  cp -r "$USD_ASSETS" "$WORK/src/usd-assets"
  usd_env=(KSTAGE_USD_ASSETS="$WORK/src/usd-assets" KSTAGE_REQUIRE_USD_ASSETS=1)
else
  log "no USD assets in $USD_ASSETS (scripts/setup.sh --python): kstage.usd's asset tests skip and the USD example does not run"
fi
[ -f "$ROOT/perf/python_bench.py" ] && cp "$ROOT/perf/python_bench.py" "$WORK/src/perf/"
[ -f "$ROOT/perf/usd_bench.py" ] && cp "$ROOT/perf/usd_bench.py" "$WORK/src/perf/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +

as_user=()
restore_build=""
VENV_PY=${KSTAGE_WHEEL_PYTHON:-python3}
nobody_can=0
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null 2>&1; then
  runuser -u nobody -- env -i PATH=/usr/local/bin:/usr/bin:/bin "$VENV_PY" -c pass >/dev/null 2>&1 && nobody_can=1
fi
if [ "$nobody_can" = 1 ]; then
  chown -R nobody:nogroup "$WORK"
  as_user=(runuser -u nobody --)
  if [ -d "$ROOT/build" ]; then  # the build tree, unreadable to `nobody` for the run
    restore_build=$(stat -c %a "$ROOT/build")
    chmod o-rwx "$ROOT/build"
    trap 'chmod "$restore_build" "$ROOT/build"' EXIT
  fi
  log "as user nobody (HOME=$WORK/home): root's home, with the dependency cache, and the build tree are not readable to it"
else
  log "as $(id -un) (not root, or $VENV_PY is not runnable by nobody), who can see the dependency cache and the build tree (the ldd/readelf checks still run)"
fi
# A clean environment: PATH, the new HOME, the threads and platform settings, and the machine's pip
# configuration (PIP_* variables: its index, certificates, find-links).
pip_env=()
while IFS= read -r v; do pip_env+=("$v=${!v}"); done < <(compgen -e | grep '^PIP_' || true)
run() { "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$WORK/home" \
          OMP_PROC_BIND=spread OMP_PLACES=threads JAX_PLATFORMS=cpu PIP_DISABLE_PIP_VERSION_CHECK=1 \
          "${pip_env[@]}" "${usd_env[@]}" "$@"; }

py=$WORK/venv/bin/python
if [ "$nobody_can" = 1 ]; then run "$VENV_PY" -m venv "$WORK/venv"; else "$VENV_PY" -m venv "$WORK/venv"; fi
log "pip install $(basename "$WHEEL")[test] into a fresh venv"
run "$py" -m pip install -q "$WORK/$(basename "$WHEEL")[test]" >"$WORK/pip.log" 2>&1 \
  || { tail -n 30 "$WORK/pip.log"; die "pip install of the wheel failed"; }

# The installed package: where it imports from, and its shared objects' libraries.
where=$(cd "$WORK" && run "$py" -c 'import kstage, os; print(os.path.dirname(os.path.realpath(kstage.__file__)))')
case $where in "$WORK"/venv/*) log "kstage imports from $where" ;; *) die "kstage imports from ${where:-nowhere}, not the venv" ;; esac
site=$(dirname "$where")
bad=0
while IFS= read -r so; do
  if rpath=$(readelf -d "$so" | grep -E 'R(UN)?PATH' | sed -E 's/.*\[(.*)\]/\1/'); [ -n "$rpath" ]; then
    IFS=: read -ra parts <<<"$rpath"
    for p in "${parts[@]}"; do
      case $p in '$ORIGIN'*) ;; *) echo "  $so: RPATH entry $p is outside the wheel"; bad=1 ;; esac
    done
  fi
  while IFS= read -r line; do
    case $line in
      *"not found"*) echo "  $so: $line"; bad=1 ;;
      *"=> $site/"*|*linux-vdso*|*ld-linux*) ;;
      *"=> /lib/"*|*"=> /usr/lib/"*|*"=> /lib64/"*)  # the system's: only what manylinux allows
        case $line in *libc.so*|*libm.so*|*libstdc++.so*|*libgcc_s.so*|*libpthread.so*|*libdl.so*|*librt.so*) ;;
          *) echo "  $so: $line (a system library the wheel should carry)"; bad=1 ;; esac ;;
      *"=>"*) echo "  $so: $line (outside the venv)"; bad=1 ;;
    esac
  done < <(run ldd "$so")
done < <(find "$site/kstage" "$site/kstage.libs" -name '*.so*' -type f 2>/dev/null)
[ "$bad" = 0 ] || die "the installed package reaches outside the wheel for its libraries"
log "every shared object of the installed package resolves its libraries inside the venv (or manylinux's system set)"

rc=0
(cd "$WORK" && run "$py" -m pytest "$WORK/src/tests/python_package" -q -p no:cacheprovider -rs) 2>&1 | tee "$WORK/pytest.log" || rc=$?
[ "$rc" = 0 ] || die "tests/python_package failed against the wheel"
(cd "$WORK" && run "$py" "$WORK/src/examples/particles.py" -n 20000 -t 10 --out "$WORK/particles.png") \
  || die "examples/python/particles.py failed against the wheel"
if [ ${#usd_env[@]} -gt 0 ]; then
  (cd "$WORK" && run "$py" "$WORK/src/examples/usd_scene.py" --envs 64 --ticks 3 --out "$WORK/usd_scene") \
    || die "examples/python/usd_scene.py failed against the wheel"
fi
if [ ${#usd_env[@]} -gt 0 ] && [ -f "$WORK/src/perf/usd_bench.py" ]; then
  (cd "$WORK" && run "$py" "$WORK/src/perf/usd_bench.py" --quick) >"$WORK/usd_bench.log" 2>&1 \
    || { tail -n 20 "$WORK/usd_bench.log"; die "perf/usd_bench.py --quick failed against the wheel"; }
fi
if [ -f "$WORK/src/perf/python_bench.py" ]; then
  (cd "$WORK" && run "$py" "$WORK/src/perf/python_bench.py" --quick) >"$WORK/python_bench.log" 2>&1 \
    || { tail -n 20 "$WORK/python_bench.log"; die "perf/python_bench.py --quick failed against the wheel"; }
fi
grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$WORK/pytest.log" | tail -n 1
log "OK: $(basename "$WHEEL")"
