#!/usr/bin/env bash
# The kstage test command (what CI runs): get the dependencies, then for each preset
# configure, build and run the whole ctest suite.
#
#   scripts/test.sh                 presets "default", the Python package leg "python", "asan",
#                                   "tsan", the fuzz leg, then "cuda" and "hip" (built, not run)
#   KSTAGE_TEST_PRESETS=python scripts/test.sh               only the Python package leg
#   KSTAGE_TEST_PRESETS="default asan" scripts/test.sh        only these presets (no tsan/fuzz)
#   KSTAGE_TEST_PRESETS=adios2-mpi scripts/test.sh            only the ADIOS2 bridge on MPI ranks
#   KSTAGE_TEST_PRESETS="serial debug" scripts/test.sh
#   KSTAGE_TEST_PRESETS="default asan tsan" scripts/test.sh   everything but the fuzz leg
#   KSTAGE_FUZZ_SECONDS=0 scripts/test.sh                     fuzz leg: seed corpus replay only
#   KSTAGE_JOBS=4 scripts/test.sh   build parallelism (default 2)
#   KSTAGE_TEST_JAX=0 scripts/test.sh   no JAX interop tests of the C API in the default preset
#
# Legs:
#   <preset>  cmake --preset, cmake --build --preset, ctest --preset (the whole suite).
#   tsan      the same with ThreadSanitizer (g++, a TSan-instrumented Serial Kokkos that
#             `scripts/setup.sh --tsan` builds); TSAN_OPTIONS come from the test preset.
#   fuzz      the `fuzz` preset (clang-14 + libFuzzer + ASan/UBSan; `setup.sh --fuzz` installs
#             clang-14 and libclang-rt-14-dev with apt-get when missing): builds the fuzz target,
#             replays the seed corpus (ctest --preset fuzz), then runs scripts/fuzz.sh for
#             KSTAGE_FUZZ_SECONDS seconds (default 30; 0 skips the fuzzing run; scripts/fuzz.sh alone
#             fuzzes for as long as asked).
#   cuda      the CUDA build (`scripts/setup.sh --cuda` builds its Kokkos with the machine's nvcc,
#             `--adios2-cuda` a CUDA ADIOS2 for the bridge's device path, ~5 min once):
#             configure and build only, test programs included. They need a GPU and run with
#             scripts/gpu-check.sh; no GPU is needed here: the leg packs the GPU bundle and
#             checks the script with `gpu-check.sh bare-dry-run`. In the default list only when nvcc is
#             found (KSTAGE_NVCC, PATH or /usr/local/cuda/bin); named explicitly it is required.
#   hip       the HIP build with Debian's hipcc 5.2 (`scripts/setup.sh --hip` installs hipcc and
#             libamdhip64-dev with apt-get and builds its Kokkos): configure and build only, as
#             no AMD GPU is reachable. Always in the default list.
#   default   also builds and tests the ADIOS2 bridge (adios2/, tests/adios2: `setup.sh --adios2`
#             caches PyPI's serial ADIOS2 wheel; KSTAGE_WITH_ADIOS2=ON here) and the Fortran
#             module (fortran/, tests/fortran), and builds the API reference (the docs target, Doxygen, warnings as errors: ctest
#             docs_reference; `setup.sh --docs` installs doxygen) and builds the Python package in its tree with the emulated device and runs
#             tests/python_package there (ctest python_package: the device tests a pip install
#             skips), and the JAX interop tests of the C API (tests/python, ctest test
#             python_jax_interop; not with KSTAGE_TEST_JAX=0), both with the venv that
#             `scripts/setup.sh --python` makes (nanobind, numpy, pytest, jax[cpu], matplotlib
#             from the machine's pip index; ~20 s the first time).
#   adios2-mpi  the ADIOS2 bridge built against an MPI ADIOS2 (`setup.sh --adios2-mpi` builds
#             ADIOS2 from PyPI's source distribution with Open MPI, ~4 min once): the bridge and
#             its MPI form, tests/adios2 (its serial tests against this ADIOS2, and the mpirun
#             tests: 3 writing ranks read back by 1 to 4), the examples, the package test and the
#             Python package with its MPI test (mpi4py from `setup.sh --adios2-mpi --python`); no
#             other test program (the default leg runs them).
#   python    the self-contained wheel of the Python package (docs/python.md, "A wheel that
#             installs anywhere"): scripts/build-wheel.sh (`pip wheel .` with pip's build
#             isolation -- the source build users run -- then auditwheel repair: libkstage, Kokkos
#             and the OpenMP runtime inside, the manylinux tag this machine honestly has), then
#             scripts/test-wheel.sh: a fresh venv, `pip install "<wheel>[test]"`, and
#             tests/python_package, examples/python/particles.py and perf/python_bench.py --quick
#             from a copy outside the source tree, as user `nobody`, to whom the dependency cache
#             and the build tree are not readable (logs: build/test-logs/python-*.log).
# The default (KSTAGE_TEST_PRESETS unset) is "default python asan adios2-mpi tsan fuzz cuda hip".
# On 2 cores it takes about 20 minutes with the dependencies cached (measured 2026-12-04, every
# program rebuilt: default 193 s, python 72, asan 313, adios2-mpi 72, tsan 150, fuzz 82, cuda
# 236, hip 63; see the timings printed at the end); a fresh CI machine adds the setup (its
# Kokkos builds, and ~4 min each for the MPI and the CUDA ADIOS2).
#
# Exits non-zero if any step of any preset fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

have_nvcc() {
  [ -n "${KSTAGE_NVCC:-}" ] || command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]
}
if [ -n "${KSTAGE_TEST_PRESETS:-}" ]; then
  PRESETS=$KSTAGE_TEST_PRESETS
elif have_nvcc; then
  PRESETS="default python asan adios2-mpi tsan fuzz cuda hip"
else
  PRESETS="default python asan adios2-mpi tsan fuzz hip"
  echo "kstage test.sh: no nvcc on this machine: the cuda leg (build only) is skipped"
fi
JOBS=${KSTAGE_JOBS:-2}
FUZZ_SECONDS=${KSTAGE_FUZZ_SECONDS:-30}
TEST_JAX=${KSTAGE_TEST_JAX:-1}

setup_args=()
for preset in $PRESETS; do
  case $preset in
    default) setup_args+=(--python --docs --adios2) ;;
    python) setup_args+=(--python) ;;
    adios2-mpi) setup_args+=(--adios2-mpi --python) ;;
    tsan) setup_args+=(--tsan) ;;
    fuzz) setup_args+=(--fuzz) ;;
  esac
done
bash "$ROOT/scripts/setup.sh" "${setup_args[@]}"
if [ -z "${HOME:-}" ]; then HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME; fi
DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}

LOG_DIR=$ROOT/build/test-logs
mkdir -p "$LOG_DIR"

failed_presets=()
timings=()
total_passed=0
total_failed=0

# The `python` leg (see the header). Appends to failed_presets and the test totals.
python_leg() {
  local log=$LOG_DIR/python wheel rc=0 summary n
  rm -f "$log"-*.log   # no log of an earlier run next to this one's
  echo "==== python leg: scripts/build-wheel.sh (log: $log-wheel.log)"
  local t0=$SECONDS
  if ! KSTAGE_SKIP_SETUP=1 KSTAGE_JOBS=$JOBS bash "$ROOT/scripts/build-wheel.sh" "$ROOT/build/wheel/dist" \
      >"$log-wheel.log" 2>&1; then
    tail -n 40 "$log-wheel.log"
    echo "==== python leg: the wheel build FAILED"
    failed_presets+=("python(wheel)"); return
  fi
  wheel=$(tail -n 1 "$log-wheel.log")
  echo "==== python leg: $(basename "$wheel") ($((SECONDS - t0)) s); scripts/test-wheel.sh (log: $log-test.log)"
  bash "$ROOT/scripts/test-wheel.sh" "$wheel" 2>&1 | tee "$log-test.log" || rc=$?
  # "N passed, M failed, ... in 1.23s"
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log-test.log" | tail -n1 || true)
  n=$( (grep -oE '[0-9]+ passed' <<<"$summary" || true) | awk '{s += $1} END {print s + 0}')
  total_passed=$((total_passed + n))
  n=$( (grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" || true) | awk '{s += $1} END {print s + 0}')
  total_failed=$((total_failed + n))
  if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
    echo "==== python leg: the wheel's tests FAILED"
    failed_presets+=("python(test)")
  fi
}
for preset in $PRESETS; do
  echo
  echo "==== kstage: preset '$preset' ===="
  leg_start=$(date +%s)
  if [ "$preset" = python ]; then
    failed_before=${#failed_presets[@]}
    # Kokkos' OpenMP backend warns without these (the test presets set them for ctest); JAX: CPU.
    OMP_PROC_BIND=spread OMP_PLACES=threads JAX_PLATFORMS=cpu python_leg
    if [ "${#failed_presets[@]}" -eq "$failed_before" ]; then
      echo "==== preset 'python': OK"
    fi
    timings+=("$preset $(( $(date +%s) - leg_start ))s")
    continue
  fi
  # The GPU legs get their tools and Kokkos here, so that a failure there fails that leg only.
  case $preset in
    cuda|hip)
      gpu_setup=("--$preset")
      [ "$preset" = cuda ] && gpu_setup+=(--adios2-cuda)
      if ! bash "$ROOT/scripts/setup.sh" "${gpu_setup[@]}"; then
        echo "==== preset '$preset': setup FAILED"
        failed_presets+=("$preset(setup)"); continue
      fi ;;
  esac
  # The sanitizer presets use their own Kokkos variants (in a relocated cache too).
  configure_args=()
  case $preset in
    # The ADIOS2 bridge is tested in the default and asan legs (the wheel's ADIOS2 is neither
    # ThreadSanitizer-instrumented nor built for these compilers).
    tsan) configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-tsan" -DKSTAGE_WITH_ADIOS2=OFF) ;;
    # The CUDA build's bridge: against the CUDA ADIOS2 (setup.sh --adios2-cuda), for its device path.
    cuda) configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-cuda" -DKSTAGE_WITH_ADIOS2=ON
                          -DADIOS2_DIR="$DEPS_DIR/adios2-cuda/lib/cmake/adios2") ;;
    hip) configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-hip" -DKSTAGE_WITH_ADIOS2=OFF) ;;
    fuzz) configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-serial" -DKSTAGE_WITH_ADIOS2=OFF) ;;
    # ... and the Python package against it, for kstage.adios2 on MPI ranks (mpi4py).
    adios2-mpi) configure_args=(-DADIOS2_DIR="$DEPS_DIR/adios2-mpi/lib/cmake/adios2" -DKSTAGE_BUILD_PYTHON=ON
                                -DPython_EXECUTABLE="$DEPS_DIR/python-venv/bin/python"
                                -DKSTAGE_MPI4PY_DIR="$DEPS_DIR/mpi4py") ;;
    # The JAX interop tests (tests/python) run in this leg only: not under sanitizers.
    # The default leg also builds the Python package in its tree (KSTAGE_BUILD_PYTHON) with
    # the emulated device, so that ctest's python_package runs the device tests of
    # tests/python_package, which a pip-installed package (no emulated device) skips.
    default)
      configure_args=(-DKSTAGE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$DEPS_DIR/python-venv/bin/python"
                      -DKSTAGE_REQUIRE_DOCS=ON -DKSTAGE_WITH_ADIOS2=ON)
      if [ "$TEST_JAX" = 1 ]; then
        configure_args+=(-DKSTAGE_JAX_PYTHON="$DEPS_DIR/python-venv/bin/python")
      else
        configure_args+=(-DKSTAGE_JAX_PYTHON=)
      fi ;;
  esac
  if ! cmake --preset "$preset" "${configure_args[@]}"; then
    echo "==== preset '$preset': configure FAILED"
    failed_presets+=("$preset(configure)"); continue
  fi
  if ! cmake --build --preset "$preset" -j "$JOBS"; then
    echo "==== preset '$preset': build FAILED"
    failed_presets+=("$preset(build)"); continue
  fi
  if [ "$preset" = cuda ] || [ "$preset" = hip ]; then
    # Built, not run: its programs need a GPU (CUDA: scripts/gpu-check.sh). What runs here: the
    # installed package, used by a C program (gcc) and a C++ bridge program (nvcc / hipcc), built.
    if ! ctest --preset "$preset" -L package 2>&1 | tee "$LOG_DIR/ctest-$preset.log"; then
      echo "==== preset '$preset': package check FAILED"
      failed_presets+=("$preset(package)")
    else
      echo "==== preset '$preset': built, tests not run (they need a GPU)"
    fi
    # The GPU check script itself, before it meets a GPU: a bundle of this build, and a dry run.
    if [ "$preset" = cuda ]; then
      if bash "$ROOT/scripts/gpu-check.sh" bundle >"$LOG_DIR/gpu-check-bundle.log" 2>&1 &&
         bash "$ROOT/scripts/gpu-check.sh" bare-dry-run >"$LOG_DIR/gpu-check-dry-run.log" 2>&1; then
        echo "==== preset 'cuda': scripts/gpu-check.sh bundle and bare-dry-run OK" \
             "($(tail -n 1 "$LOG_DIR/gpu-check-bundle.log" | cut -c1-100))"
      else
        tail -n 30 "$LOG_DIR/gpu-check-bundle.log" "$LOG_DIR/gpu-check-dry-run.log" 2>/dev/null || true
        echo "==== preset 'cuda': scripts/gpu-check.sh dry run FAILED"
        failed_presets+=("cuda(gpu-check)")
      fi
    fi
    timings+=("$preset $(( $(date +%s) - leg_start ))s")
    continue
  fi
  rc=0
  ctest --preset "$preset" 2>&1 | tee "$LOG_DIR/ctest-$preset.log" || rc=$?
  # "NN% tests passed, F tests failed out of T"
  summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$LOG_DIR/ctest-$preset.log" | tail -n1 || true)
  if [ -n "$summary" ]; then
    f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")
    t=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$summary")
    total_failed=$((total_failed + f))
    total_passed=$((total_passed + t - f))
  fi
  if [ "$rc" -ne 0 ] || [ -z "$summary" ]; then
    echo "==== preset '$preset': tests FAILED"
    failed_presets+=("$preset(test)")
  else
    echo "==== preset '$preset': OK"
  fi
  if [ "$preset" = fuzz ] && [ "$FUZZ_SECONDS" != 0 ]; then
    echo "==== fuzz leg: scripts/fuzz.sh for $FUZZ_SECONDS s"
    if ! KSTAGE_SKIP_SETUP=1 KSTAGE_FUZZ_SECONDS=$FUZZ_SECONDS bash "$ROOT/scripts/fuzz.sh" \
        2>&1 | tee "$LOG_DIR/fuzz.log"; then
      echo "==== fuzz leg: FAILED (log: $LOG_DIR/fuzz.log)"
      failed_presets+=("fuzz(fuzzing)")
    fi
  fi
  timings+=("$preset $(( $(date +%s) - leg_start ))s")
done

echo
echo "time per leg: ${timings[*]}"
if [ "${#failed_presets[@]}" -gt 0 ]; then
  echo "kstage test.sh: FAILED presets: ${failed_presets[*]}"
  echo "tests: $total_passed passed, $total_failed failed"
  exit 1
fi
echo "kstage test.sh: all presets passed ($PRESETS)"
echo "tests: $total_passed passed, $total_failed failed"
