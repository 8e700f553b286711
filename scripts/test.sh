#!/usr/bin/env bash
# The kstage test command (what CI runs): get the dependencies, then for each preset
# configure, build and run the whole ctest suite.
#
#   scripts/test.sh                 presets "default", the Python package leg "python", "asan",
#                                   "tsan", the fuzz leg, "adios2-mpi", then "cuda" and "hip"
#                                   (built, not run)
#   KSTAGE_TEST_PRESETS=python scripts/test.sh               only the Python package leg
#   KSTAGE_TEST_PRESETS="default asan" scripts/test.sh        only these presets (no tsan/fuzz)
#   KSTAGE_TEST_PRESETS=adios2-mpi scripts/test.sh            only the ADIOS2 bridge on MPI ranks
#   KSTAGE_TEST_PRESETS="serial debug" scripts/test.sh
#   KSTAGE_TEST_PRESETS="default asan tsan" scripts/test.sh   everything but the fuzz leg
#   KSTAGE_FUZZ_SECONDS=0 scripts/test.sh                     fuzz leg: seed corpus replay only
#   KSTAGE_JOBS=4 scripts/test.sh   build parallelism (default 2)
#   KSTAGE_TEST_JAX=0 scripts/test.sh   no JAX interop tests of the C API in the default preset
#   KSTAGE_TEST_ADIOS2_CUDA=1 scripts/test.sh   the cuda leg against the CUDA ADIOS2 (built once);
#                                   0: against the wheel's even where the cache has the CUDA one
#   KSTAGE_TEST_LINT=0 scripts/test.sh  no format and lint check (scripts/lint.sh)
#
# Lint (scripts/lint.sh; `setup.sh --lint` installs Debian's clang-format-14 and clang-tidy-14):
#   format    right after the setup, before any leg: `lint.sh format-check` (~10 s); a file
#             clang-format would change fails the run at once, listing the files
#             (`scripts/lint.sh format` fixes them).
#   tidy      in the default leg, after its build: `lint.sh tidy build/default`, clang-tidy over
#             the library's sources with the build's compile_commands.json (~100 to 170 s on 2
#             cores); a finding fails the leg ("default(lint)") and the legs go on.
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
#   cuda      the CUDA build (`scripts/setup.sh --cuda` builds its Kokkos with the machine's nvcc):
#             configure and build only: the library, the bridges, the Fortran module, the
#             examples, the perf suite and the CUDA test programs (kstage_test_*_cuda,
#             kstage_test_cuda_*, kstage_test_kernels); not the host test programs, which
#             in this build are the default leg's compiled again and run nowhere. The CUDA
#             programs need a GPU and run with scripts/gpu-check.sh; no GPU is needed here: the
#             leg packs the GPU bundle and checks the script with `gpu-check.sh bare-dry-run`.
#             The ADIOS2 bridge: against the CUDA ADIOS2 (`setup.sh --adios2-cuda`) with
#             KSTAGE_TEST_ADIOS2_CUDA=1 (built if missing) or, unset, where the cache has it;
#             else against the wheel's serial ADIOS2, with the bridge's GPU path compiled
#             against the wheel's headers (syntax only; docs/building.md, "The CUDA ADIOS2").
#             In the default list only when nvcc is found (KSTAGE_NVCC, PATH or
#             /usr/local/cuda/bin); named explicitly it is required.
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
#             ADIOS2 from PyPI's source distribution with Open MPI, ~5 min of 2 cores once, in
#             the background while the first legs run): the bridge and
#             its MPI form, tests/adios2 (its serial tests against this ADIOS2, and the mpirun
#             tests: 3 writing ranks read back by 1 to 4; the Fortran module's `comm` forms on 1
#             and 2 ranks), the examples, the package test and the Python package with its MPI
#             test (mpi4py from `setup.sh --adios2-mpi --python`); no other test program (the
#             default leg runs them).
#   python    the self-contained wheel of the Python package (docs/python.md, "A wheel that
#             installs anywhere"): scripts/build-wheel.sh (`pip wheel .` with pip's build
#             isolation -- the source build users run -- then auditwheel repair: libkstage, Kokkos
#             and the OpenMP runtime inside, the manylinux tag this machine honestly has), then
#             scripts/test-wheel.sh: a fresh venv, `pip install "<wheel>[test]"`, and
#             tests/python_package, examples/python/particles.py and perf/python_bench.py --quick
#             from a copy outside the source tree, as user `nobody`, to whom the dependency cache
#             and the build tree are not readable (logs: build/test-logs/python-*.log).
# The default (KSTAGE_TEST_PRESETS unset) is "default python asan tsan fuzz adios2-mpi cuda hip".
# Setup: what the first legs need (scripts/setup.sh with their options) first; what the later
# legs (tsan, fuzz, adios2-mpi, cuda, hip) need in the background at the lowest CPU priority,
# one leg's setup after another, while the first legs run (build/test-logs/setup-background.log);
# a later leg starts when its part is done, or sets up itself where that failed.
# Timings, printed at the end: the setup, each leg (a later leg's wait for its setup in
# brackets), the background setup and the total. On 2 cores about 20 minutes with the
# dependencies cached (measured 2026-12-04 before the cuts below, every program rebuilt: default
# 193 s, python 72, asan 313, adios2-mpi 72, tsan 150, fuzz 82, cuda 236, hip 63). A fresh machine
# took 66.5 minutes (2026-12-04: setup ~13, the cuda leg 27). Measured since, in CPU seconds on a
# shared 2-core machine (docs/building.md, "CI time"): the CUDA ADIOS2, 555, is opt-in; the
# cuda leg's host test programs, 176, are not built (the leg: 265 s, 461 of CPU); the MPI
# ADIOS2 (626), the Kokkos variants (tsan 40, fuzz 32, cuda 141) and hipcc are set up in the
# background; the venvs (mostly downloads) are made while Kokkos compiles. Measured with a
# fresh cache on that machine (load 3-4 from other builds), "default python asan adios2-mpi":
# setup 54 s, default 250, python 101, asan 411, adios2-mpi 271 (146 of them waiting for the
# background's MPI ADIOS2), 18.1 minutes in all. Expected on a fresh machine: 37 to 40 minutes
# (up to ~8 more if the first legs left the background no idle CPU at all). The whole run
# (2026-12-04, every leg, the first legs' dependencies cached, the later legs' set up in the
# background from scratch, clang-tidy included): 29.2 minutes, 2,844 tests; with the scene (#46),
# every dependency cached, the build trees from scratch: 28.5 minutes, 3,044 tests.
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
  PRESETS="default python asan tsan fuzz adios2-mpi cuda hip"
else
  PRESETS="default python asan tsan fuzz adios2-mpi hip"
  echo "kstage test.sh: no nvcc on this machine: the cuda leg (build only) is skipped"
fi
JOBS=${KSTAGE_JOBS:-2}
FUZZ_SECONDS=${KSTAGE_FUZZ_SECONDS:-30}
TEST_JAX=${KSTAGE_TEST_JAX:-1}
LINT=${KSTAGE_TEST_LINT:-1}

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
# What failed, repeated at the very end: CI keeps only the output's last lines, and a failing
# test's own output is far above them. Per failed test leg, ctest's list of failed tests and the
# first assertion lines of each (Catch2's "FAILED:" blocks), or pytest's short summary.
failure_digest() {
  local entry preset log
  for entry in "${failed_presets[@]}"; do
    preset=${entry%%(*}
    case $entry in
      python\(test\))
        log=$LOG_DIR/python-test.log
        [ -f "$log" ] || continue
        echo "==== digest: python"
        sed -n '/short test summary info/,$p' "$log" | head -n 30 ;;
      *\(test\))
        log=$LOG_DIR/ctest-$preset.log
        [ -f "$log" ] || continue
        echo "==== digest: preset '$preset'"
        sed -n '/The following tests FAILED:/,$p' "$log" | head -n 20
        grep -E -A 10 '(: FAILED:$|^Failed to|[*]{3} (Timeout|Exception|Failed))' "$log" | head -n 60 ;;
    esac
  done
}
# The cuda leg's ADIOS2 (docs/building.md, "The CUDA ADIOS2"): the CUDA ADIOS2 of
# `setup.sh --adios2-cuda` with KSTAGE_TEST_ADIOS2_CUDA=1 (built once if missing) or, unset, where
# the cache already has it; else (KSTAGE_TEST_ADIOS2_CUDA=0, or a fresh machine) the wheel's.
cuda_adios2_wanted() {
  case ${KSTAGE_TEST_ADIOS2_CUDA:-auto} in
    1) return 0 ;;
    0) return 1 ;;
    *) [ -f "$DEPS_DIR/stamps/adios2-cuda.stamp" ] \
         && [ -f "$DEPS_DIR/adios2-cuda/lib/cmake/adios2/adios2-config.cmake" ] ;;
  esac
}

# The CMake package of the wheel's ADIOS2 (setup.sh --adios2).
wheel_adios2_dir() {
  local d
  for d in "$DEPS_DIR"/adios2-venv/lib/python3*/site-packages/adios2/cmake/adios2; do
    [ -f "$d/adios2-config.cmake" ] && { echo "$d"; return 0; }
  done
  echo "$DEPS_DIR/adios2-venv/lib/python3/site-packages/adios2/cmake/adios2"  # configure says what is missing
}

# The cuda leg's targets: everything but the host test programs (kstage_test_* that are neither
# a CUDA program, kstage_test_*_cuda and kstage_test_cuda_*, nor kstage_test_kernels). In a
# CUDA build those are the default leg's programs compiled again by the same g++ with the same
# flags (only the C API, no Kokkos: the CUDA programs are the same sources, built here), and no
# one runs them: not this leg, not scripts/gpu-check.sh. kstage_test_kernels compiles the
# kernels through nvcc. The library, the bridges, the Fortran module, kstage-info, the examples,
# the perf suite and the GPU bundle's programs are all built.
cuda_build_targets() {
  local names
  names=$(cmake --build --preset cuda --target help |
          sed -n -e 's/^\.\.\. \([A-Za-z0-9_.+-]*\).*/\1/p' -e 's/^\([A-Za-z0-9_.+-]*\): .*/\1/p' |
          grep -E '^kstage[A-Za-z0-9_-]*$' || true)
  grep -vE '^kstage_test_' <<<"$names" || true
  grep -E '^kstage_test_([a-z0-9_]+_cuda|cuda_[a-z0-9_]+|kernels)$' <<<"$names" || true
}

# The environment a preset's build gets (its configure and build presets', with what they
# inherit), as NAME=VALUE lines.
preset_build_environment() {
  python3 - "$ROOT/CMakePresets.json" "$1" <<'PY'
import json, os, re, sys
presets, name = json.load(open(sys.argv[1])), sys.argv[2]
def env_of(kind, preset_name):
    p = next(p for p in presets.get(kind, []) if p["name"] == preset_name)
    env = {}
    inherits = p.get("inherits", [])
    for parent in [inherits] if isinstance(inherits, str) else inherits:
        env.update(env_of(kind, parent))
    env.update(p.get("environment", {}))
    return env
build = next(p for p in presets["buildPresets"] if p["name"] == name)
env = env_of("configurePresets", build.get("configurePreset", name))
env.update(env_of("buildPresets", name))
for k, v in env.items():
    v = re.sub(r"\$penv\{(\w+)\}", lambda m: os.environ.get(m.group(1), ""), v)
    print(f"{k}={v}")
PY
}

# Builds the cuda leg's targets side by side. With the Makefile generator, the top-level
# Makefile builds the targets named on its command line one after another (.NOTPARALLEL), and
# each such target's rule runs a make of its own, which would build shared dependencies (the
# library) twice at once if run side by side; so the targets' nodes in CMakeFiles/Makefile2
# (<dir>/CMakeFiles/<target>.dir/all, what `make all` builds) are built, in one make, with the
# environment the build preset gives. Ninja builds named targets side by side anyway. Where a
# target's node is not found, everything is built.
cuda_build() {
  local targets=() nodes=() environment=() t node makefile2=$ROOT/build/cuda/CMakeFiles/Makefile2
  mapfile -t targets < <(cuda_build_targets)
  [ "${#targets[@]}" -gt 10 ] || { echo "cuda leg: no targets found in the cuda build"; return 1; }
  if [ ! -f "$makefile2" ]; then
    echo "==== preset 'cuda': building ${#targets[@]} targets (not the host test programs)"
    cmake --build --preset cuda -j "$JOBS" --target "${targets[@]}"
    return
  fi
  for t in "${targets[@]}"; do
    node=$(grep -m1 -oE "^([A-Za-z0-9_./+-]*/)?CMakeFiles/$t\.dir/all:" "$makefile2" || true)
    if [ -z "$node" ]; then
      echo "==== preset 'cuda': no node of $t in CMakeFiles/Makefile2: building everything"
      cmake --build --preset cuda -j "$JOBS"
      return
    fi
    nodes+=("${node%:}")
  done
  echo "==== preset 'cuda': building ${#targets[@]} targets (not the host test programs)"
  mapfile -t environment < <(preset_build_environment cuda)
  env "${environment[@]}" make -C "$ROOT/build/cuda" -f CMakeFiles/Makefile2 -j "$JOBS" "${nodes[@]}"
}

# The ADIOS2 bridge's GPU path (adios2/bridge.hpp under ADIOS2_HAVE_GPU_SUPPORT and
# ADIOS2_HAVE_CUDA) and kstage_test_adios2_cuda's source (tests/adios2/test_adios2.cpp with
# KSTAGE_TEST_ON_CUDA_DEVICE) compile only against an ADIOS2 with GPU support. Without the CUDA
# ADIOS2 the cuda leg compiles them against the wheel's headers with those two macros set (the
# wheel's headers declare MemorySpace::GPU under the same macro), syntax only, with the
# bridge's warnings; the MPI form (against the MPI ADIOS2: the adios2-mpi leg) is left out.
adios2_gpu_path_check() {
  local adios2_include cuda_include nvcc f n=0
  adios2_include=$(cd "$(wheel_adios2_dir)/../../include" && pwd) || return 1
  nvcc=${KSTAGE_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  cuda_include=$(cd "$(dirname "$nvcc")/../include" && pwd) || return 1
  local flags=(-std=c++17 -fsyntax-only -Wall -Wextra -Wshadow -Werror
               -DADIOS2_HAVE_GPU_SUPPORT -DADIOS2_HAVE_CUDA -I"$ROOT" -I"$ROOT/include"
               -isystem "$DEPS_DIR/usr-prefix/usr/include" -isystem "$adios2_include")
  for f in "$ROOT"/adios2/*.cpp; do
    grep -q 'kstage_adios2_mpi\.h' "$f" && continue
    echo "+ g++ ${flags[*]} $f"
    g++ "${flags[@]}" "$f" || return 1
    n=$((n + 1))
  done
  f=$ROOT/tests/adios2/test_adios2.cpp
  echo "+ g++ ${flags[*]} -DKSTAGE_TEST_ON_CUDA_DEVICE=1 -I$ROOT/tests -isystem $cuda_include $f"
  g++ "${flags[@]}" -DKSTAGE_TEST_ON_CUDA_DEVICE=1 -I"$ROOT/tests" -isystem "$cuda_include" "$f" || return 1
  echo "$((n + 1)) files with ADIOS2_HAVE_GPU_SUPPORT and ADIOS2_HAVE_CUDA, syntax only"
}

# The setup.sh options a leg needs.
leg_setup_args() {
  case $1 in
    default) echo --python --docs --adios2 --lammps ;;
    python) echo --python ;;
    adios2-mpi) echo --adios2-mpi --python ;;
    tsan) echo --tsan ;;
    fuzz) echo --fuzz ;;
    cuda) if cuda_adios2_wanted; then echo --cuda --adios2-cuda; else echo --cuda --adios2; fi ;;
    hip) echo --hip ;;
  esac
}
# The legs whose dependencies are set up in the background (below).
later_leg() { case $1 in adios2-mpi|tsan|fuzz|cuda|hip) return 0 ;; *) return 1 ;; esac; }

kill_tree() { # pid: it and every process under it, by id
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# The setup. What the first legs need (default, python, asan and other presets: Kokkos, DLPack,
# Catch2, Open MPI, the venvs, doxygen) first. What the later legs need -- their Kokkos variants,
# clang-14, the MPI ADIOS2, hipcc -- in the background at the lowest CPU priority (nice 19), one
# leg's `setup.sh` after another in the legs' order, while the first legs run: its compiles take
# the CPU those legs leave idle (configure steps, downloads, links, single-threaded tests, the
# tails of ctest runs) and yield it to them otherwise. A later leg starts when its own setup is
# done there; where that failed, it runs its setup itself once the background is over (the cache
# is locked while a setup runs), so that a failure fails that leg only.
first_args=()
if [ "$LINT" = 1 ]; then first_args+=(--lint); fi
later_presets=()
for preset in $PRESETS; do
  if later_leg "$preset"; then
    later_presets+=("$preset")
  else
    # shellcheck disable=SC2207  # options are single words
    first_args+=($(leg_setup_args "$preset"))
  fi
done
setup_start=$(date +%s)
bash "$ROOT/scripts/setup.sh" "${first_args[@]}"
timings+=("setup $(( $(date +%s) - setup_start ))s")
# The format check (see "Lint" above): cheap, so first, and a failure stops the run here.
if [ "$LINT" = 1 ]; then
  echo "==== lint: scripts/lint.sh format-check"
  lint_start=$(date +%s)
  if ! bash "$ROOT/scripts/lint.sh" format-check; then
    echo "kstage test.sh: FAILED: the format check (run scripts/lint.sh format, then commit)"
    exit 1
  fi
  timings+=("format $(( $(date +%s) - lint_start ))s")
fi
background_pid=""
if [ "${#later_presets[@]}" -gt 0 ]; then
  background_start=$(date +%s)
  rm -f "$LOG_DIR"/setup-background.*.rc "$LOG_DIR/setup-background.end"
  echo "==== kstage: the setup of the legs ${later_presets[*]} in the background (log: $LOG_DIR/setup-background.log)"
  (
    for preset in "${later_presets[@]}"; do
      read -ra args <<<"$(leg_setup_args "$preset")"
      echo "==== $(date +%T) setup.sh ${args[*]} for the $preset leg"
      rc=0
      nice -n 19 bash "$ROOT/scripts/setup.sh" "${args[@]}" || rc=$?
      echo "$rc" >"$LOG_DIR/setup-background.$preset.rc"
    done
    date +%s >"$LOG_DIR/setup-background.end"
  ) >"$LOG_DIR/setup-background.log" 2>&1 &
  background_pid=$!
  trap 'if [ -n "$background_pid" ]; then kill_tree "$background_pid"; fi' EXIT
fi
# Waits until the background setup has done a leg's part; true if that succeeded.
background_setup_of() {
  local rc_file=$LOG_DIR/setup-background.$1.rc
  while [ ! -f "$rc_file" ] && [ -n "$background_pid" ] && kill -0 "$background_pid" 2>/dev/null; do
    sleep 2
  done
  [ -f "$rc_file" ] && [ "$(cat "$rc_file")" = 0 ]
}
finish_background_setup() {
  [ -n "$background_pid" ] || return 0
  wait "$background_pid" || true
  background_pid=""
  local end
  end=$(cat "$LOG_DIR/setup-background.end" 2>/dev/null || date +%s)
  timings+=("background-setup $(( end - background_start ))s")
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
  # The later legs: their setup from the background or, where that failed, here (see above).
  leg_setup=""
  if later_leg "$preset"; then
    if ! background_setup_of "$preset"; then
      finish_background_setup
      echo "==== preset '$preset': its setup in the background failed or did not run: here"
      read -ra leg_args <<<"$(leg_setup_args "$preset")"
      if ! bash "$ROOT/scripts/setup.sh" "${leg_args[@]}"; then
        echo "==== preset '$preset': setup FAILED"
        failed_presets+=("$preset(setup)"); continue
      fi
    fi
    leg_setup=" (setup $(( $(date +%s) - leg_start ))s)"
  fi
  # The sanitizer presets use their own Kokkos variants (in a relocated cache too).
  configure_args=()
  case $preset in
    # The ADIOS2 bridge is tested in the default and asan legs (the wheel's ADIOS2 is neither
    # ThreadSanitizer-instrumented nor built for these compilers).
    tsan) configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-tsan" -DKSTAGE_WITH_ADIOS2=OFF) ;;
    # The CUDA build's bridge: against the CUDA ADIOS2 (setup.sh --adios2-cuda), for its device
    # path, where it is wanted. Else none: against the wheel's ADIOS2 the bridge's host code is
    # the default leg's compile again (its GPU path is syntax-checked below), and the GPU bundle
    # would carry the wheel's libraries for nothing (over scripts/gpu-check.sh's 60 MiB).
    cuda)
      configure_args=(-DKokkos_ROOT="$DEPS_DIR/kokkos-cuda")
      if cuda_adios2_wanted; then
        configure_args+=(-DKSTAGE_WITH_ADIOS2=ON -DADIOS2_DIR="$DEPS_DIR/adios2-cuda/lib/cmake/adios2")
      else
        configure_args+=(-DKSTAGE_WITH_ADIOS2=OFF)
        # No program of an earlier configuration with the bridge for the GPU bundle to take.
        rm -rf "$ROOT/build/cuda/tests/adios2"
      fi ;;
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
                      -DKSTAGE_REQUIRE_DOCS=ON -DKSTAGE_WITH_ADIOS2=ON
                      -DKSTAGE_USD_ASSETS="$DEPS_DIR/usd-assets"
                      -DKSTAGE_LAMMPS_PYTHON="$DEPS_DIR/lammps-venv/bin/python")
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
  if [ "$preset" = cuda ]; then
    build=(cuda_build)
  else
    build=(cmake --build --preset "$preset" -j "$JOBS")
  fi
  if ! "${build[@]}"; then
    echo "==== preset '$preset': build FAILED"
    failed_presets+=("$preset(build)"); continue
  fi
  # clang-tidy over the library's sources, with this build's compile_commands.json (the presets
  # export it); its time is printed apart from the leg's.
  if [ "$preset" = default ] && [ "$LINT" = 1 ]; then
    echo "==== lint: scripts/lint.sh tidy build/default (log: $LOG_DIR/lint-tidy.log)"
    tidy_start=$(date +%s)
    if KSTAGE_JOBS=$JOBS bash "$ROOT/scripts/lint.sh" tidy "$ROOT/build/default" \
        >"$LOG_DIR/lint-tidy.log" 2>&1; then
      tail -n 1 "$LOG_DIR/lint-tidy.log"
    else
      grep -A 1000 '^lint.sh: clang-tidy findings' "$LOG_DIR/lint-tidy.log" ||
        tail -n 40 "$LOG_DIR/lint-tidy.log"
      echo "==== preset 'default': clang-tidy FAILED (log: $LOG_DIR/lint-tidy.log)"
      failed_presets+=("default(lint)")
    fi
    tidy_seconds=$(( $(date +%s) - tidy_start ))
    timings+=("tidy ${tidy_seconds}s")
    leg_start=$(( leg_start + tidy_seconds ))  # the default leg's time without it
  fi
  if [ "$preset" = cuda ] && ! cuda_adios2_wanted; then
    if adios2_gpu_path_check >"$LOG_DIR/adios2-gpu-path.log" 2>&1; then
      echo "==== preset 'cuda': the ADIOS2 bridge's GPU path compiles ($(tail -n 1 "$LOG_DIR/adios2-gpu-path.log"))"
    else
      tail -n 40 "$LOG_DIR/adios2-gpu-path.log"
      echo "==== preset 'cuda': the ADIOS2 bridge's GPU path does not compile"
      failed_presets+=("cuda(adios2-gpu-path)")
    fi
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
    timings+=("$preset $(( $(date +%s) - leg_start ))s$leg_setup")
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
  timings+=("$preset $(( $(date +%s) - leg_start ))s$leg_setup")
done
finish_background_setup

echo
echo "time per leg: ${timings[*]}; total $(( $(date +%s) - setup_start ))s"
if [ "${#failed_presets[@]}" -gt 0 ]; then
  failure_digest
  echo "kstage test.sh: FAILED presets: ${failed_presets[*]}"
  echo "tests: $total_passed passed, $total_failed failed"
  exit 1
fi
echo "kstage test.sh: all presets passed ($PRESETS)"
echo "tests: $total_passed passed, $total_failed failed"
