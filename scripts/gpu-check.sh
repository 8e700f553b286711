#!/usr/bin/env bash
# The CUDA build, checked on a machine with an NVIDIA GPU, in one short run.
#
# The GPU machine may be lent for one run of about 10 minutes: a driver, nvcc, CMake and ninja,
# a python3 with torch / cupy / jax for CUDA, no network and no packages. So the programs are
# built on a CPU machine and carried over, and everything the run finds is written where it can
# be collected:
#
#   scripts/gpu-check.sh bundle [DIR]
#       On the CPU machine (after `scripts/setup.sh --cuda --adios2-cuda`): builds the `cuda`
#       preset's targets the run needs (incremental: a second call rebuilds nothing), then packs
#       DIR (default build/gpu-bundle): bin.tar.gz (bin/, unpacked by the run: the engine test
#       programs on CUDA columns, the CUDA-only cases, the ADIOS2 bridge's tests on CUDA columns
#       with the CUDA ADIOS2, kstage_perf; packed, as they are most of the bundle's bytes),
#       lib/ (libkstage, libkstage_adios2 and ADIOS2's, Kokkos, the CUDA runtime), lib/runtime/
#       (this machine's compiler runtimes, which the GPU machine's image may lack: libgomp,
#       libstdc++, libgcc_s; for the bundled programs only), deps/ (the Kokkos install, its
#       config header including the CUDA 13 compat header by name, and the DLPack / Catch2
#       prefix, for a rebuild there), python/ (only with KSTAGE_GPU_CHECK_PYTHON=<a CPython of the
#       GPU machine's minor version, with nanobind>: the Python package built here for it) and
#       this script. Says its size; fails over 60 MiB together with the repository.
#   scripts/gpu-check.sh run [--out OUT] [--dry-run] [DIR]
#       On the GPU machine, from a copy of the repository holding DIR, in about 7 minutes:
#         1. prints the GPU, the driver, nvcc, and whether the bundle has sm_90 machine code;
#         2. restores the execute bits (programs and the carried Kokkos tools), and checks that
#            the bundled programs start; if one cannot (a missing or older system library),
#            rebuilds them from the carried source with that machine's compiler and CMake
#            (KSTAGE_GPU_CHECK_REBUILD=1 forces it);
#         3. runs every test program, the most telling first (PRIORITY), each under its own cap
#            (KSTAGE_GPU_CHECK_PROGRAM_SECONDS, default 60), within the whole budget
#            (KSTAGE_GPU_CHECK_SECONDS, default 390) less KSTAGE_GPU_CHECK_RESERVE (120) kept
#            for the next two steps;
#         4. the GPU perf grid (`kstage_perf --device cuda --quick`);
#         5. the Python package's CUDA paths (torch and cupy writes and reads, __dlpack__) with
#            the bundle's prebuilt package when python3 has torch, cupy or warp and is the
#            bundle's Python version: tests/python_package, KSTAGE_GPU_CHECK_PYTHON_SECONDS
#            (default 60). Nothing is compiled there for it.
#       Only the bundled programs see the bundle's libraries (LD_LIBRARY_PATH on their command
#       lines); nothing is exported into the run's environment.
#       OUT (default DIR/results) gets at most 4 files, none over 16 MiB: summary.txt (written
#       as the run goes), logs.tar.gz (every program's log), perf.csv, python.txt. Exit 0 only
#       when every test program passes.
#       --dry-run checks the script itself on a machine without a GPU: the same steps, with
#       each program only asked to list its tests, the perf grid to list its workloads, and the
#       Python step to say what it would run.
#   scripts/gpu-check.sh bare-dry-run [DIR]
#       A dry run as on a bare machine (CI's cuda leg runs it): the repository's files and the
#       bundle copied into an empty folder, run there with this machine's build trees and
#       dependency cache hidden (tmpfs over them, in a private mount namespace) and HOME empty.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${1:-}
[ $# -gt 0 ] && shift
MAX_BYTES=$((60 * 1024 * 1024))
MAX_FILE_BYTES=$((16 * 1024 * 1024))
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}

# The test programs a run takes first, most telling first: the CUDA-only cases (the device
# itself, then releases and device index maps with a stream held on the GPU: never run on one
# yet), the world transforms' kernel (never run on a GPU yet), the ADIOS2 bridge's GPU path,
# maps and writes with device index maps, reads, then the rest.
PRIORITY=(kstage_test_cuda_device kstage_test_cuda_releases kstage_test_cuda_device_maps
  kstage_test_world_transforms_cuda kstage_test_clone_cuda
  kstage_test_adios2_cuda
  kstage_test_map_cuda kstage_test_write_fixed_cuda kstage_test_reads_cuda kstage_test_array_cuda
  kstage_test_managed_cuda kstage_test_arrow_cuda kstage_test_transport_errors_cuda)

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 2
}
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# The programs a run executes (basenames), from a cuda build folder.
programs_of() {
  local build=$1 p
  for p in "$build"/tests/kstage_test_*_cuda "$build"/tests/kstage_test_cuda_* \
           "$build"/tests/adios2/kstage_test_*_cuda "$build/perf/kstage_perf"; do
    [ -e "$p" ] && echo "$p"
  done
}

bundle() {
  local dir=$ROOT/build/gpu-bundle
  [ $# -gt 0 ] && dir=$(absolute "$1")
  local build=$ROOT/build/cuda jobs=${KSTAGE_JOBS:-2}
  cmake --preset cuda -S "$ROOT" -DKokkos_ROOT="$DEPS_DIR/kokkos-cuda" >/dev/null
  # Only what the run needs: the CUDA test programs and the perf suite (not examples, the
  # host-only programs or the package tests).
  local targets
  targets=$(cmake --build --preset cuda --target help |
            grep -owE 'kstage_test_[a-z0-9_]+_cuda|kstage_test_cuda_[a-z0-9_]+|kstage_perf' | sort -u)
  # shellcheck disable=SC2086
  cmake --build --preset cuda -j "$jobs" --target $targets
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/deps"
  local programs=()
  mapfile -t programs < <(programs_of "$build")
  [ "${#programs[@]}" -gt 2 ] || { echo "gpu-check: the cuda build has no test programs" >&2; exit 1; }
  cp "${programs[@]}" "$dir/bin/"
  # The shared libraries the programs load from outside the system, and the compiler runtimes
  # of this machine's g++ (newer than many images'); glibc itself must be there.
  # The compiler runtimes go to lib/runtime: only the bundled programs load them (a newer
  # system's Python and torch must keep their own libstdc++).
  mkdir -p "$dir/lib/runtime"
  ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libgomp.so*|libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$dir/lib/runtime/$(basename "$lib")" ;;
      *) case $lib in /lib/*|/usr/lib/*) ;; *) cp -L "$lib" "$dir/lib/$(basename "$lib")" ;; esac ;;
    esac
  done
  strip --strip-unneeded "$dir"/bin/* "$dir"/lib/*.so* "$dir"/lib/runtime/* 2>/dev/null || true
  # The programs travel packed (the run unpacks them; tar keeps their execute bits).
  rm -f "$dir/bin.tar.gz"
  tar -C "$dir" -czf "$dir/bin.tar.gz" bin
  rm -rf "$dir/bin"
  # For a rebuild there: the Kokkos install (nvcc_wrapper, headers, libraries, CMake config)
  # and the DLPack / Catch2 prefix. setup.sh's Kokkos config header may include the CUDA 13
  # compat header by this machine's absolute path: the bundle's copy includes it by name,
  # from the folder it sits in.
  cp -a "$DEPS_DIR/kokkos-cuda" "$dir/deps/kokkos-cuda"
  cp -a "$DEPS_DIR/usr-prefix" "$dir/deps/usr-prefix"
  sed -i -E 's|^#include ".*/(kstage_cuda13_compat\.h)"|#include "\1"|' \
    "$dir/deps/kokkos-cuda/include/KokkosCore_config.h"
  if grep -q "#include \"/" "$dir/deps/kokkos-cuda/include/KokkosCore_config.h"; then
    echo "gpu-check: the bundled KokkosCore_config.h still includes an absolute path" >&2
    exit 1
  fi
  bundle_python "$dir"
  cp "$ROOT/scripts/gpu-check.sh" "$dir/"
  local bytes repo
  bytes=$(du -sb "$dir" | cut -f1)
  repo=$(cd "$ROOT" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n1 | cut -f1)
  echo "gpu-check: bundle in $dir: ${#programs[@]} programs, $((bytes / 1024 / 1024)) MiB" \
       "($(((bytes + repo) / 1024 / 1024)) MiB with the repository)"
  if [ $((bytes + repo)) -gt "$MAX_BYTES" ]; then
    echo "gpu-check: the bundle and the repository are over 60 MiB" >&2
    exit 1
  fi
}

# The Python package prebuilt for the GPU machine's CPython (its minor version must match;
# the GPU image's is 3.12), so that the run does not spend minutes compiling it there:
# KSTAGE_GPU_CHECK_PYTHON names that interpreter here (it needs nanobind; `setup.sh --python`
# does not make it). Without it the bundle has no python/ and the run skips the Python step.
bundle_python() {
  local dir=$1 py=${KSTAGE_GPU_CHECK_PYTHON:-} build=$ROOT/build/cuda-python jobs=${KSTAGE_JOBS:-2}
  if [ -z "$py" ]; then
    echo "gpu-check: no KSTAGE_GPU_CHECK_PYTHON: the bundle carries no Python package"
    return 0
  fi
  cmake --preset cuda -S "$ROOT" -B "$build" -DKokkos_ROOT="$DEPS_DIR/kokkos-cuda" \
        -DBUILD_TESTING=OFF -DKSTAGE_BUILD_PERF=OFF -DKSTAGE_WITH_ADIOS2=OFF -DKSTAGE_WITH_MPI=OFF \
        -DKSTAGE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" >/dev/null
  cmake --build "$build" -j "$jobs" --target _kstage
  mkdir -p "$dir/python"
  cp -a "$build/python/kstage" "$dir/python/kstage"
  find "$dir/python" -name __pycache__ -prune -exec rm -rf {} +
  # The extension binds the C API alone, so it loads lib/'s libkstage (the same sources and
  # Kokkos): no second copy in the bundle.
  strip --strip-unneeded "$dir"/python/kstage/*.so* 2>/dev/null || true
  "$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' >"$dir/python/version"
}

# Whether the bundled programs start here (the loader finds every library they need, with
# the bundle's on their command line).
programs_start() {
  local p out
  for p in "$1"/*; do
    out=$(env LD_LIBRARY_PATH="$BUNDLED_LIBS" "$p" --help 2>&1 >/dev/null) && continue
    case $out in *"error while loading shared libraries"*|*"GLIBC"*|*"not found"*) echo "$p: $out"; return 1 ;; esac
  done
  return 0
}

# Rebuilds the programs there, with that machine's compiler and CMake, against the carried
# Kokkos install: a few minutes on a 16-core machine.
# What the cuda preset's environment says (a build outside `cmake --build --preset` needs it):
# Hopper machine code, and the CUDA toolkit on PATH.
cuda_environment() {
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:--gencode=arch=compute_90,code=sm_90}"
  [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
  return 0
}

rebuild() {
  local dir=$1 build=$1/rebuild jobs
  cuda_environment
  jobs=$(nproc 2>/dev/null || echo 8)
  echo "gpu-check: rebuilding the test programs from the carried source ($build, $jobs jobs)"
  cmake --preset cuda -S "$ROOT" -B "$build" -DKokkos_ROOT="$dir/deps/kokkos-cuda" \
        -DCMAKE_PREFIX_PATH="$dir/deps/usr-prefix/usr" -DKSTAGE_WITH_MPI=OFF
  cmake --build "$build" -j "$jobs"
  rm -rf "$dir/bin"
  mkdir -p "$dir/bin"
  local programs=()
  mapfile -t programs < <(programs_of "$build")
  cp "${programs[@]}" "$dir/bin/"
}

run() {
  local dir=$ROOT/build/gpu-bundle out="" dry=0
  while [ $# -gt 0 ]; do
    case $1 in
      --out) out=$(absolute "$2"); shift 2 ;;
      --dry-run) dry=1; shift ;;
      -*) usage ;;
      *) dir=$(absolute "$1"); shift ;;
    esac
  done
  if [ ! -d "$dir/bin" ] && [ -f "$dir/bin.tar.gz" ]; then tar -C "$dir" -xzf "$dir/bin.tar.gz"; fi
  [ -d "$dir/bin" ] || { echo "gpu-check: no bundle in $dir (run 'gpu-check.sh bundle' on a CPU machine)" >&2; exit 1; }
  out=${out:-$dir/results}
  local budget=${KSTAGE_GPU_CHECK_SECONDS:-390} cap=${KSTAGE_GPU_CHECK_PROGRAM_SECONDS:-60}
  local start=$SECONDS logs summary
  logs=$(mktemp -d)
  mkdir -p "$out"
  rm -f "$out"/summary.txt "$out"/logs.tar.gz "$out"/perf.csv "$out"/python.txt
  summary=$out/summary.txt
  say() { echo "$*" | tee -a "$summary"; }

  # 1. Where we are.
  say "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(nproc 2>/dev/null || echo '?') cores)$([ "$dry" = 1 ] && echo ', DRY RUN')"
  if command -v nvidia-smi >/dev/null 2>&1; then
    say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
  else
    say "gpu: no nvidia-smi on this machine"
  fi
  say "nvcc: $(command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2 | head -n 1 || echo none)"
  say "cmake: $(cmake --version 2>/dev/null | head -n 1 || echo none)"
  local sm90="unknown (no cuobjdump)" lib cuobjdump
  cuobjdump=$(command -v cuobjdump || echo "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump")
  lib=$(ls "$dir"/lib/libkstage.so* 2>/dev/null | head -n 1 || true)
  if [ -x "$cuobjdump" ] && [ -n "$lib" ]; then
    if "$cuobjdump" --list-elf "$lib" 2>/dev/null | grep -q sm_90; then sm90=yes; else sm90=no; fi
  elif [ -n "$lib" ]; then  # the link options nvcc leaves in the fat binary
    if grep -aq -- "-arch sm_90" "$lib"; then sm90="yes (-arch sm_90 in its fat binary)"; else sm90=no; fi
  fi
  say "sm_90 machine code in the bundle's libkstage: $sm90"

  # 2. Programs that start. The carried tools lose their execute bits in transit. The bundled
  # programs, and only they, see the bundle's libraries (LD_LIBRARY_PATH on their command
  # lines, never exported): a rebuilt program must load its own libkstage, and Python this
  # machine's libstdc++.
  chmod +x "$dir"/bin/* "$dir"/gpu-check.sh "$dir"/deps/kokkos-cuda/bin/* 2>/dev/null || true
  export OMP_PROC_BIND=spread OMP_PLACES=threads
  BUNDLED_LIBS="$dir/lib:$dir/lib/runtime${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local why=""
  if [ "${KSTAGE_GPU_CHECK_REBUILD:-0}" = 1 ]; then
    why="asked for (KSTAGE_GPU_CHECK_REBUILD=1)"
  elif ! why=$(programs_start "$dir/bin"); then
    :
  else
    why=""
  fi
  if [ -n "$why" ]; then
    say "gpu-check: the bundled programs cannot run here: $why"
    if [ "$dry" = 1 ]; then
      say "gpu-check: (dry run) would rebuild from the carried source"
    elif rebuild "$dir" >"$logs/rebuild.log" 2>&1; then
      BUNDLED_LIBS=${LD_LIBRARY_PATH:-}  # rebuilt: their RPATHs name their own libraries
      say "gpu-check: rebuilt ($((SECONDS - start)) s)"
    else
      say "gpu-check: the rebuild FAILED (logs.tar.gz: rebuild.log)"
    fi
  fi

  # 3. The test programs, the most telling first, each under its cap, inside the budget less
  # what the perf grid and the Python step keep (KSTAGE_GPU_CHECK_RESERVE).
  local passed=() failed=() t name rc left limit reserve=${KSTAGE_GPU_CHECK_RESERVE:-120}
  local p ordered=()
  for p in "${PRIORITY[@]}"; do [ -e "$dir/bin/$p" ] && ordered+=("$dir/bin/$p"); done
  for t in "$dir"/bin/kstage_test_*; do
    case " ${PRIORITY[*]} " in *" $(basename "$t") "*) ;; *) ordered+=("$t") ;; esac
  done
  for t in "${ordered[@]}"; do
    name=$(basename "$t")
    left=$((budget - (SECONDS - start) - reserve))
    if [ "$left" -lt 10 ]; then
      failed+=("$name(no time left)"); say "$(printf '%-45s %s' "$name" "NOT RUN (no time left)")"; continue
    fi
    limit=$((cap < left ? cap : left))
    rc=0
    # As for the emulated device (tests/CMakeLists.txt): host-only cases are not device cases.
    local args=('~[host_adoption]~[host_bridge]' --reporter compact)
    [ "$dry" = 1 ] && args=(--list-tests)
    timeout -k 5 "$limit" env LD_LIBRARY_PATH="$BUNDLED_LIBS" "$t" "${args[@]}" >"$logs/$name.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then passed+=("$name"); else failed+=("$name(rc=$rc)"); fi
    say "$(printf '%-45s %s %4ss  %s' "$name" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL rc=$rc")" \
      "$(( SECONDS - start ))" "$(tail -n 1 "$logs/$name.log" | cut -c1-160)")"
  done

  # 4. The GPU perf grid, with what is left but the Python step's share.
  local perf_rc=0 python_share=${KSTAGE_GPU_CHECK_PYTHON_SECONDS:-60}
  left=$((budget - (SECONDS - start) - python_share))
  if [ "$dry" = 1 ]; then
    env LD_LIBRARY_PATH="$BUNDLED_LIBS" "$dir/bin/kstage_perf" --list >"$logs/perf.log" 2>&1 || perf_rc=$?
    echo "workload,dry_run" >"$out/perf.csv"
  elif [ "$left" -gt 20 ]; then
    timeout -k 5 "$left" env LD_LIBRARY_PATH="$BUNDLED_LIBS" "$dir/bin/kstage_perf" --device cuda --quick \
      --out "$logs/perf" >"$logs/perf.log" 2>&1 || perf_rc=$?
    [ -f "$logs/perf/device_results.csv" ] && cp "$logs/perf/device_results.csv" "$out/perf.csv"
  else
    perf_rc=124
  fi
  say "gpu-check: perf grid $([ "$perf_rc" -eq 0 ] && echo done || echo "FAILED rc=$perf_rc") ($((SECONDS - start)) s)"

  # 5. Python's CUDA paths.
  python_step "$dir" "$dry" "$((budget - (SECONDS - start)))" >"$out/python.txt" 2>&1 || true
  say "$(tail -n 1 "$out/python.txt")"

  say "gpu-check: ${#passed[@]} test programs passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
  say "gpu-check: $((SECONDS - start)) s"
  tar -C "$logs" -czf "$out/logs.tar.gz" .
  rm -rf "$logs"
  local f
  for f in "$out"/*; do
    if [ "$(stat -c %s "$f")" -gt "$MAX_FILE_BYTES" ]; then
      truncate -s "$MAX_FILE_BYTES" "$f"
      say "gpu-check: $(basename "$f") cut to 16 MiB"
    fi
  done
  [ "${#failed[@]}" -eq 0 ]
}

# The Python package the bundle carries (prebuilt for that machine's CPython: bundle_python)
# and tests/python_package run with it. Its last line is the outcome. Nothing is compiled there.
python_step() {
  local dir=$1 dry=$2 left=$3 py
  py=$(command -v python3 || true)
  [ -n "$py" ] || { echo "python: no python3: skipped"; return 0; }
  local have version
  have=$("$py" - <<'PY' 2>/dev/null || true
import importlib.util as u
print(" ".join(m for m in ("torch", "cupy", "warp", "jax", "pytest", "pytest_timeout", "numpy") if u.find_spec(m)))
PY
)
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo '?')
  echo "python: $("$py" --version 2>&1) with: ${have:-nothing}"
  [ -f "$dir/python/version" ] || { echo "python: the bundle carries no Python package: skipped"; return 0; }
  if [ "$(cat "$dir/python/version")" != "$version" ]; then
    echo "python: the bundle's package is for Python $(cat "$dir/python/version"), this is $version: skipped"
    return 0
  fi
  case " $have " in *" torch "*|*" cupy "*|*" warp "*) ;; *) echo "python: none of torch, cupy, warp: skipped"; return 0 ;; esac
  case " $have " in *" pytest "*) ;; *) echo "python: no pytest: skipped"; return 0 ;; esac
  if [ "$dry" = 1 ]; then
    echo "python: (dry run) would run tests/python_package with the bundled package for $py"
    return 0
  fi
  [ "$left" -gt 20 ] || { echo "python: no time left: skipped"; return 0; }
  local rc=0 per_test=()
  case " $have " in *" pytest_timeout "*) per_test=(--timeout=60) ;; esac
  (cd "$dir" && PYTHONPATH="$dir/python" LD_LIBRARY_PATH="$dir/lib" \
     timeout -k 5 "$left" "$py" -m pytest "$ROOT/tests/python_package" -q -p no:cacheprovider -rs \
     "${per_test[@]}" 2>&1) || rc=$?
  echo "python: tests/python_package $([ "$rc" -eq 0 ] && echo passed || echo "FAILED rc=$rc")"
  return "$rc"
}

# A dry run as on a bare machine (see the header). The copy's files lose their execute bits, as
# in transit; the run must restore them.
bare_dry_run() {
  local dir=$ROOT/build/gpu-bundle
  [ $# -gt 0 ] && dir=$(absolute "$1")
  [ -f "$dir/bin.tar.gz" ] || { echo "gpu-check: no bundle in $dir" >&2; exit 1; }
  local tmp
  tmp=$(mktemp -d /tmp/kstage-bare.XXXXXX)
  mkdir -p "$tmp/repo/build" "$tmp/home" "$tmp/out"
  (cd "$ROOT" && git ls-files -z | xargs -0 cp --parents -t "$tmp/repo")
  cp -a "$dir" "$tmp/repo/build/gpu-bundle"
  chmod -R a-x+X "$tmp/repo/build/gpu-bundle" "$tmp/repo/scripts"
  local hide=("$ROOT/build" "$DEPS_DIR") rc=0
  local script="set -e; for d in \"\$@\"; do [ -d \"\$d\" ] && mount -t tmpfs tmpfs \"\$d\"; done
    exec env -i HOME='$tmp/home' PATH='$PATH' bash '$tmp/repo/scripts/gpu-check.sh' run --dry-run \
      --out '$tmp/out' '$tmp/repo/build/gpu-bundle'"
  if unshare -m true 2>/dev/null; then
    unshare -m bash -c "$script" _ "${hide[@]}" || rc=$?
  else
    echo "gpu-check: no private mount namespace here (unshare -m): the build trees stay visible"
    bash -c "$script" _ || rc=$?
  fi
  cat "$tmp/out/summary.txt" 2>/dev/null || true
  if [ "$rc" -eq 0 ] && ! grep -q "cannot run here" "$tmp/out/summary.txt"; then
    echo "gpu-check: bare dry run OK"
    rm -rf "$tmp"
  else
    echo "gpu-check: bare dry run FAILED (rc=$rc; files in $tmp)" >&2
    exit 1
  fi
}

case $MODE in
  bundle) bundle "$@" ;;
  run) run "$@" ;;
  bare-dry-run) bare_dry_run "$@" ;;
  *) usage ;;
esac
