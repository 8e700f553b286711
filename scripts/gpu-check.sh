#!/usr/bin/env bash
# The CUDA build, checked on a machine with an NVIDIA GPU.
#
# The GPU machine has a driver and nothing else (no compiler, no network, no packages), so the
# programs are built on a CPU machine and copied over:
#
#   scripts/gpu-check.sh bundle [DIR]   on the CPU machine (after `scripts/setup.sh --cuda`):
#       builds the `cuda` preset, then copies into DIR (default build/gpu-bundle) the test
#       programs with CUDA residencies, kstage_perf, the shared libraries they load (libkstage,
#       Kokkos, the CUDA runtime) and this script, stripped, at most 60 MiB.
#   scripts/gpu-check.sh run [DIR]      on the GPU machine, from a copy of the repository that
#       holds DIR: runs every test program of the bundle (the engine suite on CUDA columns and
#       the CUDA-only cases), the perf suite's quick GPU grid (`kstage_perf --device cuda`), and
#       prints a summary; results go to DIR/results. At most 6 minutes; exit 0 only when every
#       test program passes.
#
# Environment: KSTAGE_GPU_CHECK_SECONDS (default 330) bounds the run; KSTAGE_JOBS the build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${1:-}
DIR=${2:-$ROOT/build/gpu-bundle}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
MAX_BYTES=$((60 * 1024 * 1024))

bundle() {
  local build=$ROOT/build/cuda jobs=${KSTAGE_JOBS:-2}
  cmake --preset cuda -S "$ROOT" >/dev/null
  cmake --build --preset cuda -j "$jobs"
  rm -rf "$DIR"
  mkdir -p "$DIR/bin" "$DIR/lib"
  local programs=("$build"/tests/kstage_test_*_cuda "$build/tests/kstage_test_cuda_device"
                  "$build/perf/kstage_perf")
  local p
  for p in "${programs[@]}"; do
    [ -x "$p" ] || { echo "gpu-check: $p was not built" >&2; exit 1; }
    cp "$p" "$DIR/bin/"
  done
  # Every shared library the programs load from outside the system: libkstage, Kokkos, cudart.
  ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case $lib in
      /lib/*|/usr/lib/*) ;;  # the system's (glibc, libstdc++, libgomp): on the GPU machine too
      *) cp -L "$lib" "$DIR/lib/$(basename "$lib")" ;;
    esac
  done
  strip --strip-unneeded "$DIR"/bin/* "$DIR"/lib/* 2>/dev/null || true
  cp "$ROOT/scripts/gpu-check.sh" "$DIR/"
  local bytes
  bytes=$(du -sb "$DIR" | cut -f1)
  echo "gpu-check: bundle in $DIR: $(ls "$DIR/bin" | wc -l) programs, $((bytes / 1024 / 1024)) MiB"
  if [ "$bytes" -gt "$MAX_BYTES" ]; then
    echo "gpu-check: the bundle is over 60 MiB" >&2
    exit 1
  fi
}

run() {
  [ -d "$DIR/bin" ] || { echo "gpu-check: no bundle in $DIR (run 'gpu-check.sh bundle' on a CPU machine)" >&2; exit 1; }
  local budget=${KSTAGE_GPU_CHECK_SECONDS:-330} start=$SECONDS results=$DIR/results
  mkdir -p "$results"
  export LD_LIBRARY_PATH="$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMP_PROC_BIND=spread OMP_PLACES=threads
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$results/gpu.txt"
  fi
  local passed=() failed=() t name rc left
  for t in "$DIR"/bin/kstage_test_*; do
    name=$(basename "$t")
    left=$((budget - (SECONDS - start) - 60))  # keep a minute for the perf grid
    if [ "$left" -lt 10 ]; then failed+=("$name(no time left)"); continue; fi
    rc=0
    # As for the emulated device (tests/CMakeLists.txt): host-only cases are not device cases.
    local spec=()
    case $name in *_cuda) spec=('~[host_adoption]~[host_bridge]') ;; esac
    timeout "$left" "$t" "${spec[@]}" --reporter compact >"$results/$name.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then passed+=("$name"); else failed+=("$name(rc=$rc)"); fi
    printf '%-45s %s  %s\n' "$name" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL rc=$rc")" \
      "$(tail -n 1 "$results/$name.log")"
  done
  left=$((budget - (SECONDS - start)))
  local perf_rc=0
  if [ "$left" -gt 20 ]; then
    timeout "$left" "$DIR/bin/kstage_perf" --device cuda --quick --out "$results/perf" \
      >"$results/perf.log" 2>&1 || perf_rc=$?
    cat "$results/perf.log"
  else
    perf_rc=124
  fi
  echo
  echo "gpu-check: ${#passed[@]} test programs passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
  echo "gpu-check: perf grid $([ "$perf_rc" -eq 0 ] && echo done || echo "FAILED rc=$perf_rc") ($results/perf.log)"
  echo "gpu-check: $((SECONDS - start)) s"
  [ "${#failed[@]}" -eq 0 ]
}

case $MODE in
  bundle) bundle ;;
  run) run ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2 ;;
esac
