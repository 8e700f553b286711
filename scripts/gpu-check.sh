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
#       DIR (default build/gpu-bundle): bin/ (the engine test programs on CUDA columns, the
#       CUDA-only cases, the ADIOS2 bridge's tests on CUDA columns with the CUDA ADIOS2, kstage_perf),
#       lib/ (libkstage, libkstage_adios2 and ADIOS2's, Kokkos, the CUDA runtime, and the compiler runtimes the
#       GPU machine's image may lack: libgomp, libstdc++, libgcc_s), deps/ (the Kokkos install and
#       the DLPack / Catch2 prefix, for a rebuild or the Python build there) and this script.
#       Says its size; fails over 60 MiB together with the repository.
#   scripts/gpu-check.sh run [--out OUT] [--dry-run] [DIR]
#       On the GPU machine, from a copy of the repository holding DIR:
#         1. prints the GPU, the driver, nvcc, and whether the bundle has sm_90 machine code;
#         2. restores the execute bits, and checks that the bundled programs start; if one
#            cannot (a missing or older system library), rebuilds them from the carried source
#            with that machine's compiler and CMake (KSTAGE_GPU_CHECK_REBUILD=1 forces it);
#         3. runs every test program, each under its own cap (KSTAGE_GPU_CHECK_PROGRAM_SECONDS,
#            default 90), within the whole budget (KSTAGE_GPU_CHECK_SECONDS, default 540);
#         4. the GPU perf grid (`kstage_perf --device cuda --quick`);
#         5. the Python package's CUDA paths (torch and cupy writes, reads, __dlpack__(stream=);
#            Warp kernels on read and map groups, tests/python_package/test_warp.py) when python3
#            has torch, cupy or warp: builds the package there against the bundle's
#            Kokkos, for that python3, and runs tests/python_package.
#       OUT (default DIR/results) gets at most 4 files, none over 16 MiB: summary.txt,
#       logs.tar.gz (every program's log), perf.csv, python.txt. Exit 0 only when every test
#       program passes.
#       --dry-run checks the script itself on a machine without a GPU (CI does, on the cuda
#       leg's bundle): the same steps, with each program only asked to list its tests, the perf
#       grid to list its workloads, and the Python step to say what it would run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${1:-}
[ $# -gt 0 ] && shift
MAX_BYTES=$((60 * 1024 * 1024))
MAX_FILE_BYTES=$((16 * 1024 * 1024))
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit 2
}
absolute() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# The programs a run executes (basenames), from a cuda build folder.
programs_of() {
  local build=$1 p
  for p in "$build"/tests/kstage_test_*_cuda "$build/tests/kstage_test_cuda_device" \
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
            grep -owE 'kstage_test_[a-z0-9_]+_cuda|kstage_test_cuda_device|kstage_perf' | sort -u)
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
  ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libgomp.so*|libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$dir/lib/$(basename "$lib")" ;;
      *) case $lib in /lib/*|/usr/lib/*) ;; *) cp -L "$lib" "$dir/lib/$(basename "$lib")" ;; esac ;;
    esac
  done
  strip --strip-unneeded "$dir"/bin/* "$dir"/lib/* 2>/dev/null || true
  # For a rebuild or the Python build there: the Kokkos install (nvcc_wrapper, headers,
  # libraries, CMake config) and the DLPack / Catch2 prefix.
  cp -a "$DEPS_DIR/kokkos-cuda" "$dir/deps/kokkos-cuda"
  cp -a "$DEPS_DIR/usr-prefix" "$dir/deps/usr-prefix"
  cp "$ROOT/scripts/gpu-check.sh" "$dir/"
  local bytes repo
  bytes=$(du -sb "$dir" | cut -f1)
  repo=$(cd "$ROOT" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n1 | cut -f1)
  echo "gpu-check: bundle in $dir: $(ls "$dir/bin" | wc -l) programs, $((bytes / 1024 / 1024)) MiB" \
       "($(((bytes + repo) / 1024 / 1024)) MiB with the repository)"
  if [ $((bytes + repo)) -gt "$MAX_BYTES" ]; then
    echo "gpu-check: the bundle and the repository are over 60 MiB" >&2
    exit 1
  fi
}

# Whether the bundled programs start here (the loader finds every library they need).
programs_start() {
  local p out
  for p in "$1"/*; do
    out=$("$p" --help 2>&1 >/dev/null) && continue
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
  [ -d "$dir/bin" ] || { echo "gpu-check: no bundle in $dir (run 'gpu-check.sh bundle' on a CPU machine)" >&2; exit 1; }
  out=${out:-$dir/results}
  local budget=${KSTAGE_GPU_CHECK_SECONDS:-540} cap=${KSTAGE_GPU_CHECK_PROGRAM_SECONDS:-90}
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

  # 2. Programs that start.
  chmod +x "$dir"/bin/* "$dir"/gpu-check.sh 2>/dev/null || true
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMP_PROC_BIND=spread OMP_PLACES=threads
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
      say "gpu-check: rebuilt ($((SECONDS - start)) s)"
    else
      say "gpu-check: the rebuild FAILED (logs.tar.gz: rebuild.log)"
    fi
  fi

  # 3. The test programs, each under its cap.
  local passed=() failed=() t name rc left limit
  for t in "$dir"/bin/kstage_test_*; do
    name=$(basename "$t")
    left=$((budget - (SECONDS - start) - 150))  # keep time for the perf grid and Python
    if [ "$left" -lt 10 ]; then failed+=("$name(no time left)"); continue; fi
    limit=$((cap < left ? cap : left))
    rc=0
    # As for the emulated device (tests/CMakeLists.txt): host-only cases are not device cases.
    local args=('~[host_adoption]~[host_bridge]' --reporter compact)
    [ "$dry" = 1 ] && args=(--list-tests)
    timeout "$limit" "$t" "${args[@]}" >"$logs/$name.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then passed+=("$name"); else failed+=("$name(rc=$rc)"); fi
    say "$(printf '%-45s %s  %s' "$name" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL rc=$rc")" \
      "$(tail -n 1 "$logs/$name.log")")"
  done

  # 4. The GPU perf grid.
  local perf_rc=0
  left=$((budget - (SECONDS - start) - 90))
  if [ "$dry" = 1 ]; then
    "$dir/bin/kstage_perf" --list >"$logs/perf.log" 2>&1 || perf_rc=$?
    echo "workload,dry_run" >"$out/perf.csv"
  elif [ "$left" -gt 20 ]; then
    timeout "$left" "$dir/bin/kstage_perf" --device cuda --quick --out "$logs/perf" \
      >"$logs/perf.log" 2>&1 || perf_rc=$?
    [ -f "$logs/perf/device_results.csv" ] && cp "$logs/perf/device_results.csv" "$out/perf.csv"
  else
    perf_rc=124
  fi
  say "gpu-check: perf grid $([ "$perf_rc" -eq 0 ] && echo done || echo "FAILED rc=$perf_rc")"

  # 5. Python's CUDA paths.
  python_step "$dir" "$dry" "$((budget - (SECONDS - start)))" >"$out/python.txt" 2>&1 || true
  say "python: $(tail -n 1 "$out/python.txt")"

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

# The Python package built there for that machine's python3 (its torch / cupy), against the
# bundle's Kokkos, and tests/python_package run with it. Its last line is the outcome.
python_step() {
  local dir=$1 dry=$2 left=$3 py
  py=$(command -v python3 || true)
  [ -n "$py" ] || { echo "python: no python3: skipped"; return 0; }
  local have
  have=$("$py" - <<'PY' 2>/dev/null || true
import importlib.util as u
print(" ".join(m for m in ("torch", "cupy", "warp", "jax", "nanobind", "pytest", "numpy") if u.find_spec(m)))
PY
)
  echo "python: $("$py" --version 2>&1) with: ${have:-nothing}"
  case " $have " in *" torch "*|*" cupy "*|*" warp "*) ;; *) echo "python: none of torch, cupy, warp: skipped"; return 0 ;; esac
  case " $have " in *" nanobind "*) ;; *) echo "python: no nanobind to build the package: skipped"; return 0 ;; esac
  if [ "$dry" = 1 ]; then
    echo "python: (dry run) would build the package for $py and run tests/python_package"
    return 0
  fi
  [ "$left" -gt 60 ] || { echo "python: no time left: skipped"; return 0; }
  local build=$dir/python-build jobs
  jobs=$(nproc 2>/dev/null || echo 8)
  cuda_environment
  if ! timeout $((left - 30)) bash -c '
      cmake --preset cuda -S "$1" -B "$2" -DKokkos_ROOT="$3/deps/kokkos-cuda" \
            -DCMAKE_PREFIX_PATH="$3/deps/usr-prefix/usr" -DKSTAGE_WITH_MPI=OFF \
            -DBUILD_TESTING=OFF -DKSTAGE_BUILD_PERF=OFF -DKSTAGE_BUILD_PYTHON=ON \
            -DPython_EXECUTABLE="$4" && cmake --build "$2" -j "$5" --target _kstage' \
      _ "$ROOT" "$build" "$dir" "$py" "$jobs"; then
    echo "python: the package build FAILED"
    return 1
  fi
  local rc=0
  (cd "$build" && PYTHONPATH="$build/python" timeout $((left > 120 ? 120 : left)) \
     "$py" -m pytest "$ROOT/tests/python_package" -q -p no:cacheprovider -rs) || rc=$?
  echo "python: tests/python_package $([ "$rc" -eq 0 ] && echo passed || echo "FAILED rc=$rc")"
  return "$rc"
}

case $MODE in
  bundle) bundle "$@" ;;
  run) run "$@" ;;
  *) usage ;;
esac
