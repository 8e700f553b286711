#!/usr/bin/env bash
# kstage dependency setup.
#
# Gets every build dependency of kstage into a cache folder and reuses it on later runs:
#   - Kokkos 3.4.01 (OpenMP + Serial, shared), built from the Kokkos copy inside Debian 12's
#     Trilinos 13.2 source package -- skipped when Kokkos_ROOT is set in the environment;
#   - DLPack >= 1.0 headers + CMake config, from Debian's libdlpack-dev (trixie);
#   - Catch2 3 (static libs + CMake config), from Debian's libcatch2-dev (bookworm-backports).
# The build tools it needs are installed with apt-get when missing: g++, gfortran (the Fortran
# module, fortran/, on where a Fortran compiler is found), pkg-config (the Makefile consumer of
# tests/package), cmake, make and the tools the cache is made with.
# And, by default, into the system (small: ~55 MB installed, ~10 s):
#   - Open MPI from Debian's libopenmpi-dev and openmpi-bin (mpicc, mpirun), installed with
#     apt-get when missing, for the MPI example and its tests (examples/mpi, CMake option
#     KSTAGE_WITH_MPI, on in the `default` preset). The library itself never links MPI.
#     `--no-mpi` or KSTAGE_SETUP_MPI=0 skips it (configure with -DKSTAGE_WITH_MPI=OFF then).
#
# The packages are fetched with a PRIVATE apt configuration (its own sources list, lists and
# cache under the cache folder); the system's apt sources are never modified. The archive URI
# is taken at run time from this machine's own apt configuration. Packages are unpacked with
# dpkg-deb -x into the cache, never installed into the system.
#
# Optional (only with `--perf` or KSTAGE_SETUP_PERF=1; the default setup never does it):
#   - a Python virtual environment for the perf suite (docs/performance.md) in $KSTAGE_DEPS_DIR/venv,
#     made with `python3 -m venv`, with numpy and matplotlib from the machine's configured pip
#     index (Debian's python3-venv is installed with apt-get when the venv module is missing).
# Optional (only with `--jax` or KSTAGE_SETUP_JAX=1; scripts/test.sh passes it for the
# `default` preset): the JAX interop tests (tests/python)
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/jax-venv, made the same way, with
#     jax[cpu], numpy and pytest from the machine's configured pip index (~20 s, ~640 MB);
#     scripts/test.sh configures the `default` preset with KSTAGE_JAX_PYTHON set to its python.
# Optional (only with `--python` or KSTAGE_SETUP_PYTHON=1; scripts/test.sh passes it for the
# `python` leg): what building the Python package kstage (pyproject.toml, python/) needs
#   - python3's C headers (Python.h): Debian's python3-dev, installed with apt-get when missing
#     (a python3 that is not Debian's, e.g. pyenv's, must bring its own);
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/python-venv, made the same way, with
#     numpy, pytest, nanobind, scikit-build-core, matplotlib, jax[cpu] (the pinned jax), pyarrow,
#     nanoarrow, polars, duckdb (the Arrow tests) and warp-lang (the Warp tests) from
#     the machine's configured pip index: for a developer build of the extension
#     (cmake -DKSTAGE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$KSTAGE_DEPS_DIR/python-venv/bin/python)
#     and for `pip install --no-build-isolation` (docs/python.md).
#
# Optional (only with `--fuzz` or KSTAGE_SETUP_FUZZ=1): the fuzz leg (tests/fuzz, preset `fuzz`)
#   - clang-14 and libclang-rt-14-dev (libFuzzer, sanitizer runtimes), installed with apt-get
#     when missing;
#   - a Serial-only Kokkos (same source, g++, shared, C++17) in $KSTAGE_DEPS_DIR/kokkos-serial,
#     so that clang never meets the g++ OpenMP runtime of the default Kokkos.
# Optional (only with `--docs` or KSTAGE_SETUP_DOCS=1; scripts/test.sh passes it for the
# `default` preset): Debian's doxygen, installed with apt-get when missing, for the API
# reference (the docs target, cmake/kstageDocs.cmake; ctest docs_reference).
# Optional (only with `--adios2` or KSTAGE_SETUP_ADIOS2=1; scripts/test.sh passes it for the
# `default` preset): ADIOS2 for the bridge kstage::adios2 (adios2/, KSTAGE_WITH_ADIOS2)
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/adios2-venv, made as the others, with
#     PyPI's `adios2` wheel (serial ADIOS2 2.12: its C++ library, headers and CMake config sit in
#     site-packages/adios2, the libraries they need in site-packages/adios2.libs), numpy and
#     matplotlib: the CMake package (ADIOS2_DIR=<site-packages>/adios2/cmake/adios2, which the
#     top-level CMakeLists.txt finds by itself) and the Python reader of the tests.
# Optional (only with `--adios2-mpi` or KSTAGE_SETUP_ADIOS2_MPI=1; scripts/test.sh passes it for
# the `adios2-mpi` preset): an MPI build of ADIOS2 for the bridge's MPI form
# (kstage/kstage_adios2_mpi.h), in $KSTAGE_DEPS_DIR/adios2-mpi (~4 min on 2 cores)
#   - ADIOS2's source distribution from PyPI (the `adios2` sdist, the same version as the
#     wheel), built with CMake against the Open MPI above: shared, Release, the C and C++
#     bindings and the BP engines (SST, Python, Fortran, HDF5 and the compressors off);
#     ADIOS2_DIR=$KSTAGE_DEPS_DIR/adios2-mpi/lib/cmake/adios2 (the adios2-mpi preset's).
#     Needs Open MPI (not with --no-mpi); implies --adios2 (its venv's pip downloads the source).
#   - with --python too: mpi4py (its wheel, which loads the machine's MPI at run time) for the
#     python-venv's Python in $KSTAGE_DEPS_DIR/mpi4py, for the Python package's MPI test.
# Optional (only with `--adios2-cuda` or KSTAGE_SETUP_ADIOS2_CUDA=1; scripts/test.sh passes it for
# the `cuda` preset): a CUDA build of ADIOS2 (GPU-aware: puts and gets of device memory) for the
# bridge's device path, in $KSTAGE_DEPS_DIR/adios2-cuda (~5 min on 2 cores)
#   - the same source distribution and options as the MPI one, serial, with CUDA (the machine's
#     nvcc, as for --cuda; sm_90; the shared CUDA runtime); implies --adios2.
# Optional (only with `--tsan` or KSTAGE_SETUP_TSAN=1): the ThreadSanitizer leg (preset `tsan`)
#   - a Serial-only Kokkos built with g++ -fsanitize=thread in $KSTAGE_DEPS_DIR/kokkos-tsan, so
#     that the reference counts of Kokkos Views are instrumented too.
# Optional (only with `--cuda` or KSTAGE_SETUP_CUDA=1): the CUDA build (preset `cuda`)
#   - Kokkos with CUDA (Hopper sm_90 machine code, Ampere sm_80), OpenMP and Serial, shared (one
#     Kokkos per process, as with the default build), in $KSTAGE_DEPS_DIR/kokkos-cuda (~2 min on
#     2 cores), compiled by its
#     nvcc_wrapper with the machine's nvcc. CUDA 13 needs backends/cuda/cuda13_compat.h, which
#     the installed KokkosCore_config.h includes (Kokkos 3.4 predates CUDA 13); sm_90 is added through NVCC_APPEND_FLAGS because
#     nvcc_wrapper takes one -arch only, and Kokkos 3.4 aborts on a GPU whose major
#     architecture differs from the code's.
# Optional (only with `--hip` or KSTAGE_SETUP_HIP=1): the HIP build (preset `hip`, compile and
# link only: no AMD GPU is reachable here)
#   - Debian 12's hipcc 5.2.3 and libamdhip64-dev, installed with apt-get when missing;
#   - Kokkos with HIP (gfx908) and Serial, shared, compiled by hipcc, in
#     $KSTAGE_DEPS_DIR/kokkos-hip (~30 s on 2 cores).
# These Kokkos variants are built from Trilinos' Kokkos even when Kokkos_ROOT is set.
#
# Environment:
#   KSTAGE_DEPS_DIR   cache folder (default: $HOME/.cache/kstage-deps)
#   KSTAGE_SETUP_MPI  0 = do not install Open MPI (same as --no-mpi; default 1)
#   KSTAGE_SETUP_PERF 1 = also make the perf venv (same as --perf)
#   KSTAGE_SETUP_JAX  1 = also make the JAX test venv (same as --jax)
#   KSTAGE_SETUP_PYTHON 1 = also get what the Python package's build needs (same as --python)
#   KSTAGE_SETUP_FUZZ 1 = also get the fuzz leg's tools and Kokkos (same as --fuzz)
#   KSTAGE_SETUP_DOCS 1 = also install doxygen for the docs target (same as --docs)
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

log() { printf '[kstage-setup] %s\n' "$*" >&2; }
die() { printf '[kstage-setup] ERROR: %s\n' "$*" >&2; exit 1; }

if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  export HOME
fi

DEPS_DIR=${KSTAGE_DEPS_DIR:-$HOME/.cache/kstage-deps}
case $DEPS_DIR in /*) ;; *) DEPS_DIR=$PWD/$DEPS_DIR ;; esac
APT_DIR=$DEPS_DIR/apt
DL_DIR=$DEPS_DIR/downloads
USR_PREFIX=$DEPS_DIR/usr-prefix
KOKKOS_PREFIX=$DEPS_DIR/kokkos
KOKKOS_SERIAL_PREFIX=$DEPS_DIR/kokkos-serial
KOKKOS_TSAN_PREFIX=$DEPS_DIR/kokkos-tsan
KOKKOS_CUDA_PREFIX=$DEPS_DIR/kokkos-cuda
KOKKOS_HIP_PREFIX=$DEPS_DIR/kokkos-hip
STAMP_DIR=$DEPS_DIR/stamps
WORK_DIR=$DEPS_DIR/work
LOG_DIR=$DEPS_DIR/logs

# Pinned inputs. Bumping the recipe number forces a rebuild/re-extract of that dependency.
DEBIAN_SUITE=bookworm
TRILINOS_SRC_VERSION=13.2.0-4
TRILINOS_TOPDIR=Trilinos-trilinos-release-13-2-0
KOKKOS_EXPECTED_VERSION=3.4.01
KOKKOS_RECIPE=1
CATCH2_PKG=libcatch2-dev/bookworm-backports
CATCH2_RECIPE=1
DLPACK_PKG=libdlpack-dev/trixie
DLPACK_RECIPE=1
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The jax the DLPack interop was checked against (JAX speaks legacy DLPack only); pyproject.toml's
# `test` extra pins the same.
JAX_PIN="jax[cpu]==0.10.2"

JOBS=${KSTAGE_JOBS:-$(nproc 2>/dev/null || echo 2)}
# What every Kokkos variant shares (last in each list: the stamp keys stay as they were).
KOKKOS_COMMON_ARGS=(
  -DCMAKE_CXX_STANDARD=17
  -DKokkos_CXX_STANDARD=17
  -DBUILD_SHARED_LIBS=ON
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON
  -DKokkos_ENABLE_TESTS=OFF
  -DKokkos_ENABLE_EXAMPLES=OFF
)
KOKKOS_CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_PREFIX="$KOKKOS_PREFIX"
  -DCMAKE_INSTALL_LIBDIR=lib
  -DKokkos_ENABLE_OPENMP=ON
  -DKokkos_ENABLE_SERIAL=ON
  "${KOKKOS_COMMON_ARGS[@]}"
)
# The sanitizer legs' variants: Serial only (no OpenMP runtime to mix or to leave uninstrumented).
# A Kokkos 3.x without a parallel backend compiles its atomics as plain loads and stores
# (KOKKOS_ENABLE_SERIAL_ATOMICS), so View reference counts would race when kstage is called
# from several threads; these variants use the compiler's atomics (KOKKOS_ENABLE_GNU_ATOMICS),
# in the library and -- through KokkosCore_config.h, see kokkos_force_gnu_atomics -- in
# everything built against it.
KOKKOS_SERIAL_RECIPE=2
KOKKOS_SERIAL_CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_PREFIX="$KOKKOS_SERIAL_PREFIX"
  -DCMAKE_INSTALL_LIBDIR=lib
  -DCMAKE_CXX_COMPILER=g++
  -DCMAKE_CXX_FLAGS=-DKOKKOS_ENABLE_GNU_ATOMICS
  -DKokkos_ENABLE_OPENMP=OFF
  -DKokkos_ENABLE_SERIAL=ON
  "${KOKKOS_COMMON_ARGS[@]}"
)
KOKKOS_TSAN_RECIPE=2
KOKKOS_TSAN_CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DCMAKE_INSTALL_PREFIX="$KOKKOS_TSAN_PREFIX"
  -DCMAKE_INSTALL_LIBDIR=lib
  -DCMAKE_CXX_COMPILER=g++
  "-DCMAKE_CXX_FLAGS=-fsanitize=thread -fno-omit-frame-pointer -DKOKKOS_ENABLE_GNU_ATOMICS"
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
  -DKokkos_ENABLE_OPENMP=OFF
  -DKokkos_ENABLE_SERIAL=ON
  "${KOKKOS_COMMON_ARGS[@]}"
)

# The CUDA variant. Its compiler (nvcc_wrapper, from the extracted source) and the compat
# header's path are filled in by kokkos_cuda_dep.
KOKKOS_CUDA_RECIPE=3
KOKKOS_CUDA_ARCH_FLAGS="-gencode=arch=compute_90,code=sm_90"
CUDA_COMPAT_HEADER=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/backends/cuda/cuda13_compat.h

# The HIP variant: hipcc compiles everything (Kokkos' HIP backend needs it as the C++ compiler).
KOKKOS_HIP_RECIPE=1
KOKKOS_HIP_CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_PREFIX="$KOKKOS_HIP_PREFIX"
  -DCMAKE_INSTALL_LIBDIR=lib
  -DCMAKE_CXX_COMPILER=hipcc
  -DKokkos_ENABLE_HIP=ON
  -DKokkos_ARCH_VEGA908=ON
  -DKokkos_ENABLE_OPENMP=OFF
  -DKokkos_ENABLE_SERIAL=ON
  "${KOKKOS_COMMON_ARGS[@]}"
)

SECONDS=0

# --------------------------------------------------------------------------------------------
# 0. Build tools (installed with the system's apt only when missing)
# --------------------------------------------------------------------------------------------
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root (or sudo) to run: $*"
  fi
}

ensure_tools() {
  local missing=() pair cmd pkg
  for pair in g++:g++ gfortran:gfortran pkg-config:pkg-config cmake:cmake make:make \
              dpkg-source:dpkg-dev xz:xz-utils python3:python3 tar:tar gzip:gzip flock:util-linux; do
    cmd=${pair%%:*}; pkg=${pair#*:}
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  [ -e "$KEYRING" ] || missing+=(debian-archive-keyring)
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian 12"
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing missing build tools: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${missing[@]}"
  fi
  local v
  v=$(cmake --version | awk 'NR==1{print $3}')
  if ! printf '3.25\n%s\n' "$v" | sort -V -C; then
    die "CMake >= 3.25 is required (found $v)"
  fi
}

# Open MPI for examples/mpi (KSTAGE_WITH_MPI): Debian's packages, installed when missing.
mpi_present() {
  command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 \
    && dpkg -s libopenmpi-dev >/dev/null 2>&1
}

ensure_mpi() {
  if ! mpi_present; then
    log "installing Open MPI for the MPI example: libopenmpi-dev openmpi-bin"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
      libopenmpi-dev openmpi-bin
  fi
  mpi_present || die "Open MPI (mpicc, mpirun, libopenmpi-dev) is still missing"
  log "MPI: $(mpirun --version 2>/dev/null | head -n1)"
}

# The API reference's generator (the docs target, cmake/kstageDocs.cmake): Debian's doxygen.
ensure_docs_tools() {
  if ! command -v doxygen >/dev/null 2>&1; then
    log "installing doxygen for the API reference (the docs target)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends doxygen
  fi
  command -v doxygen >/dev/null 2>&1 || die "doxygen is still missing"
  log "docs: doxygen $(doxygen --version)"
}

# The fuzz leg's compiler: Debian's clang 14 with libFuzzer and the sanitizer runtimes.
clang_rt_fuzzer_present() {
  command -v clang-14 >/dev/null 2>&1 || return 1
  local lib
  lib=$(clang-14 -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
  [ -n "$lib" ] && [ -f "$lib" ] && return 0
  compgen -G '/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer*.a' >/dev/null
}

ensure_fuzz_tools() {
  local missing=()
  command -v clang-14 >/dev/null 2>&1 || missing+=(clang-14)
  command -v clang++-14 >/dev/null 2>&1 || missing+=(clang-14)
  clang_rt_fuzzer_present || missing+=(libclang-rt-14-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    # shellcheck disable=SC2207
    missing=($(printf '%s\n' "${missing[@]}" | sort -u))
    log "installing the fuzz leg's tools: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends "${missing[@]}"
  fi
  clang_rt_fuzzer_present || die "clang-14's libFuzzer runtime (libclang-rt-14-dev) is still missing"
  log "fuzz tools: $(clang++-14 --version | head -n1)"
}

# --------------------------------------------------------------------------------------------
# 1. Archive URI from the machine's own apt configuration
# --------------------------------------------------------------------------------------------
# Prints the first URI whose suite list contains exactly "$DEBIAN_SUITE" (so -updates,
# -security, -backports entries are skipped). Handles deb822 *.sources and one-line *.list.
find_archive_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$DEBIAN_SUITE" '
      function flush() {
        if (enabled && is_deb && uri != "" && has_suite) { print uri; found = 1; exit }
        uri = ""; has_suite = 0; is_deb = 0; enabled = 1
      }
      BEGIN { enabled = 1 }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key)
        if (key == "types")   { for (i = 2; i <= NF; i++) if ($i == "deb" || $i == "deb-src") is_deb = 1 }
        if (key == "uris")    { uri = $2 }
        if (key == "suites")  { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
        if (key == "enabled") { if (tolower($2) == "no") enabled = 0 }
      }
      END { if (!found) flush() }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    sed -e 's/\[[^]]*\]//' "$f" | awk -v suite="$DEBIAN_SUITE" '
      $1 == "deb" || $1 == "deb-src" { if ($3 == suite) { print $2; exit } }'
  done
}

# --------------------------------------------------------------------------------------------
# 2. Private apt
# --------------------------------------------------------------------------------------------
APT_OPTS=()
APT_READY=0
apt_private_init() {
  [ "$APT_READY" -eq 1 ] && return 0
  local uri=${KSTAGE_APT_URI:-}
  if [ -z "$uri" ]; then
    uri=$(find_archive_uri | grep -v '^cdrom:' | head -n1 || true)
  fi
  [ -n "$uri" ] || die "no '$DEBIAN_SUITE' entry found in /etc/apt/sources.list or /etc/apt/sources.list.d/ (set KSTAGE_APT_URI to a Debian archive URI)"
  uri=${uri%/}
  log "Debian archive (from this machine's apt configuration): $uri"
  mkdir -p "$APT_DIR"/state/lists/partial "$APT_DIR"/cache/archives/partial "$APT_DIR"/etc
  cat > "$APT_DIR/etc/sources.list" <<EOF
# Generated by kstage scripts/setup.sh -- private to the kstage dependency cache.
deb-src [signed-by=$KEYRING] $uri $DEBIAN_SUITE main
deb [signed-by=$KEYRING] $uri $DEBIAN_SUITE-backports main
deb [signed-by=$KEYRING] $uri trixie main
EOF
  APT_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/etc/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State=$APT_DIR/state"
    -o "Dir::Cache=$APT_DIR/cache"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "APT::Sandbox::User=root"
    -o "Acquire::Languages=none"
  )
  log "apt-get update (private lists under $APT_DIR)"
  apt-get -q "${APT_OPTS[@]}" update >"$LOG_DIR/apt-update.log" 2>&1 \
    || { tail -n 30 "$LOG_DIR/apt-update.log" >&2; die "private apt-get update failed"; }
  APT_READY=1
}

apt_private_cleanup() {
  # The lists are only needed while downloading; drop them to keep the cache small.
  [ "$APT_READY" -eq 1 ] || return 0
  rm -rf "$APT_DIR/state/lists" "$APT_DIR/cache"
}

# --------------------------------------------------------------------------------------------
# 3. Stamps
# --------------------------------------------------------------------------------------------
# A stamp's first line is the "key" (recipe + inputs); later lines are informational.
stamp_ok() { # name key [file-that-must-exist...]
  local name=$1 key=$2 f; shift 2
  [ -f "$STAMP_DIR/$name.stamp" ] || return 1
  [ "$(head -n1 "$STAMP_DIR/$name.stamp")" = "$key" ] || return 1
  for f in "$@"; do [ -e "$f" ] || return 1; done
  return 0
}

# --------------------------------------------------------------------------------------------
# 4. .deb packages unpacked into $USR_PREFIX
# --------------------------------------------------------------------------------------------
deb_dep() { # name apt-spec recipe check-file
  local name=$1 spec=$2 recipe=$3 check=$4
  local key="$name spec=$spec recipe=$recipe"
  if stamp_ok "$name" "$key" "$check"; then
    log "$name: cached ($(sed -n 2p "$STAMP_DIR/$name.stamp"))"
    return 0
  fi
  apt_private_init
  local pkg=${spec%%/*} dir="$DL_DIR/$name"
  rm -rf "$dir"; mkdir -p "$dir"
  log "$name: downloading $spec"
  (cd "$dir" && apt-get -q "${APT_OPTS[@]}" download "$spec") >"$LOG_DIR/$name-download.log" 2>&1 \
    || { tail -n 30 "$LOG_DIR/$name-download.log" >&2; die "$name: apt-get download $spec failed"; }
  local debs deb
  debs=("$dir"/"${pkg}"_*.deb)
  deb=${debs[0]}
  [ -f "$deb" ] || die "$name: no .deb downloaded for $spec"
  # Remove the files of a previously unpacked version of this package.
  if [ -f "$STAMP_DIR/$name.files" ]; then
    (cd "$USR_PREFIX" && while IFS= read -r p; do
       [ -f "$p" ] || [ -L "$p" ] && rm -f -- "$p"
     done < "$STAMP_DIR/$name.files") || true
  fi
  mkdir -p "$USR_PREFIX"
  dpkg-deb -x "$deb" "$USR_PREFIX"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./||' -e '/\/$/d' > "$STAMP_DIR/$name.files"
  [ -e "$check" ] || die "$name: $check missing after unpacking $(basename "$deb")"
  printf '%s\n%s %s\n' "$key" "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    > "$STAMP_DIR/$name.stamp"
  log "$name: unpacked $(basename "$deb")"
  rm -rf "$dir"
}

# --------------------------------------------------------------------------------------------
# 5. Kokkos from the Trilinos 13.2 source package
# --------------------------------------------------------------------------------------------
# The Kokkos source is extracted once per setup run and shared by every variant built in it.
KOKKOS_SRC_READY=0
kokkos_source() {
  [ "$KOKKOS_SRC_READY" -eq 1 ] && return 0
  apt_private_init
  local dir="$DL_DIR/trilinos" tarball
  tarball="$dir/trilinos_${TRILINOS_SRC_VERSION%-*}.orig.tar.gz"
  mkdir -p "$dir"
  if [ ! -s "$tarball" ]; then
    log "kokkos: downloading source package trilinos=$TRILINOS_SRC_VERSION (~166 MB)"
    (cd "$dir" && apt-get -q "${APT_OPTS[@]}" source --download-only "trilinos=$TRILINOS_SRC_VERSION") \
      >"$LOG_DIR/kokkos-download.log" 2>&1 \
      || { tail -n 30 "$LOG_DIR/kokkos-download.log" >&2; die "kokkos: apt-get source trilinos=$TRILINOS_SRC_VERSION failed"; }
  fi
  [ -s "$tarball" ] || die "kokkos: $tarball missing after download"
  local src="$WORK_DIR/kokkos-src"
  rm -rf "$src"
  mkdir -p "$src"
  log "kokkos: extracting packages/kokkos"
  tar -xzf "$tarball" -C "$src" --strip-components=3 "$TRILINOS_TOPDIR/packages/kokkos"
  [ -f "$src/CMakeLists.txt" ] || die "kokkos: no CMakeLists.txt in the extracted Kokkos source"
  KOKKOS_SRC_READY=1
}

kokkos_source_cleanup() {
  # Save disk: the source tarball and the extracted tree are not needed any more.
  [ "$KOKKOS_SRC_READY" -eq 1 ] || return 0
  rm -rf "$WORK_DIR/kokkos-src" "$DL_DIR/trilinos"
  KOKKOS_SRC_READY=0
}

# Makes every consumer of the Kokkos in $1 use the same (GNU) atomics as the library itself.
kokkos_force_gnu_atomics() {
  local config=$1/include/KokkosCore_config.h
  [ -f "$config" ] || die "kokkos: $config missing"
  cat >> "$config" <<'EOF'

/* Added by kstage scripts/setup.sh: real atomics without a parallel backend, so that View
 * reference counts stay correct when kstage is called from several threads. */
#ifndef KOKKOS_ENABLE_GNU_ATOMICS
#define KOKKOS_ENABLE_GNU_ATOMICS
#endif
EOF
}

# Kokkos 3.4 (and 4.x before 4.7) against CUDA >= 13: backends/cuda/cuda13_compat.h goes into the
# installed include folder and the generated KokkosCore_config.h includes it, so that Kokkos' own
# sources and every translation unit that includes Kokkos see it first (it does nothing for
# CUDA < 13 or a host compiler). Called between configure and build, with the build folder.
kokkos_cuda13_compat() {
  local bld=$1 prefix=$2 config=$1/KokkosCore_config.h
  [ -f "$config" ] || die "kokkos-cuda: $config missing after configure"
  mkdir -p "$prefix/include"
  # By name, from the folder the config header sits in (the build folder, then the installed
  # include folder), so that a copy of the install (scripts/gpu-check.sh's bundle) works too.
  cp "$CUDA_COMPAT_HEADER" "$bld/kstage_cuda13_compat.h"
  cp "$CUDA_COMPAT_HEADER" "$prefix/include/kstage_cuda13_compat.h"
  cat >> "$config" <<EOF

/* Added by kstage scripts/setup.sh --cuda: the CUDA 13 runtime signatures Kokkos < 4.7 calls. */
#include "kstage_cuda13_compat.h"
EOF
}

# kokkos_build <stamp-name> <prefix> <recipe-key> <description> <cmake args...>
kokkos_build() {
  local name=$1 prefix=$2 key=$3 what=$4; shift 4
  if stamp_ok "$name" "$key" "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake"; then
    log "$name: cached ($(sed -n 2p "$STAMP_DIR/$name.stamp"))"
    return 0
  fi
  kokkos_source
  local src="$WORK_DIR/kokkos-src" bld="$WORK_DIR/$name-build"
  rm -rf "$bld" "$prefix"
  mkdir -p "$bld"
  log "$name: configuring ($what)"
  cmake -S "$src" -B "$bld" "$@" >"$LOG_DIR/$name-configure.log" 2>&1 \
    || { tail -n 40 "$LOG_DIR/$name-configure.log" >&2; die "$name: configure failed (log: $LOG_DIR/$name-configure.log)"; }
  if [ -n "${KOKKOS_POST_CONFIGURE:-}" ]; then "$KOKKOS_POST_CONFIGURE" "$bld" "$prefix"; fi
  log "$name: building with $JOBS jobs"
  cmake --build "$bld" -j "$JOBS" >"$LOG_DIR/$name-build.log" 2>&1 \
    || { tail -n 40 "$LOG_DIR/$name-build.log" >&2; die "$name: build failed (log: $LOG_DIR/$name-build.log)"; }
  cmake --install "$bld" >"$LOG_DIR/$name-install.log" 2>&1 \
    || { tail -n 40 "$LOG_DIR/$name-install.log" >&2; die "$name: install failed"; }
  case $name in kokkos-serial|kokkos-tsan) kokkos_force_gnu_atomics "$prefix" ;; esac

  local ver
  ver=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$prefix/lib/cmake/Kokkos/KokkosConfigVersion.cmake" | head -n1)
  [ "$ver" = "$KOKKOS_EXPECTED_VERSION" ] || log "WARNING: built Kokkos reports version '$ver' (expected $KOKKOS_EXPECTED_VERSION)"
  printf '%s\nKokkos %s (%s) from trilinos %s\n' "$key" "$ver" "$what" "$TRILINOS_SRC_VERSION" \
    > "$STAMP_DIR/$name.stamp"
  rm -rf "$bld"
  log "$name: installed Kokkos $ver into $prefix"
}

kokkos_dep() {
  if [ -n "${Kokkos_ROOT:-}" ]; then
    if find "$Kokkos_ROOT" -maxdepth 5 -name KokkosConfig.cmake 2>/dev/null | grep -q .; then
      log "kokkos: using Kokkos_ROOT=$Kokkos_ROOT (no Kokkos is built)"
    else
      log "WARNING: Kokkos_ROOT=$Kokkos_ROOT has no KokkosConfig.cmake; CMake may not find Kokkos"
    fi
    return 0
  fi
  local cxx_id
  cxx_id=$(c++ --version 2>/dev/null | head -n1 || echo unknown)
  local key="kokkos src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_RECIPE cxx=$cxx_id args=${KOKKOS_CMAKE_ARGS[*]}"
  kokkos_build kokkos "$KOKKOS_PREFIX" "$key" "OpenMP+Serial" "${KOKKOS_CMAKE_ARGS[@]}"
}

kokkos_serial_dep() {
  local cxx_id
  cxx_id=$(g++ --version 2>/dev/null | head -n1 || echo unknown)
  local key="kokkos-serial src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_SERIAL_RECIPE cxx=$cxx_id args=${KOKKOS_SERIAL_CMAKE_ARGS[*]}"
  kokkos_build kokkos-serial "$KOKKOS_SERIAL_PREFIX" "$key" "Serial only, GNU atomics" "${KOKKOS_SERIAL_CMAKE_ARGS[@]}"
}

kokkos_tsan_dep() {
  local cxx_id
  cxx_id=$(g++ --version 2>/dev/null | head -n1 || echo unknown)
  local key="kokkos-tsan src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_TSAN_RECIPE cxx=$cxx_id args=${KOKKOS_TSAN_CMAKE_ARGS[*]}"
  kokkos_build kokkos-tsan "$KOKKOS_TSAN_PREFIX" "$key" "Serial only, GNU atomics, ThreadSanitizer" "${KOKKOS_TSAN_CMAKE_ARGS[@]}"
}

# nvcc: KSTAGE_NVCC, else PATH, else the toolkit's default location.
find_nvcc() {
  local n=${KSTAGE_NVCC:-}
  if [ -z "$n" ]; then n=$(command -v nvcc 2>/dev/null || true); fi
  if [ -z "$n" ] && [ -x /usr/local/cuda/bin/nvcc ]; then n=/usr/local/cuda/bin/nvcc; fi
  [ -n "$n" ] && [ -x "$n" ] || die "cuda: no nvcc found (set KSTAGE_NVCC or put the CUDA toolkit's bin/ on PATH)"
  printf '%s\n' "$n"
}

kokkos_cuda_dep() {
  local nvcc cuda_bin cuda_ver compat_sum key
  nvcc=$(find_nvcc)
  cuda_bin=$(dirname "$nvcc")
  cuda_ver=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  [ -f "$CUDA_COMPAT_HEADER" ] || die "cuda: $CUDA_COMPAT_HEADER missing"
  compat_sum=$(sha256sum "$CUDA_COMPAT_HEADER" | cut -c1-16)
  local args=(
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_INSTALL_PREFIX="$KOKKOS_CUDA_PREFIX"
    -DCMAKE_INSTALL_LIBDIR=lib
    -DCMAKE_CXX_COMPILER="$WORK_DIR/kokkos-src/bin/nvcc_wrapper"
    -DCMAKE_CXX_FLAGS=-arch=sm_80
    -DKokkos_ENABLE_CUDA=ON
    -DKokkos_ENABLE_CUDA_LAMBDA=ON
    -DKokkos_ARCH_AMPERE80=ON
    -DKokkos_ENABLE_OPENMP=ON
    -DKokkos_ENABLE_SERIAL=ON
    "${KOKKOS_COMMON_ARGS[@]}"
  )
  key="kokkos-cuda src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_CUDA_RECIPE cuda=$cuda_ver compat=$compat_sum gencode=$KOKKOS_CUDA_ARCH_FLAGS args=${args[*]}"
  PATH="$cuda_bin:$PATH" NVCC_APPEND_FLAGS="$KOKKOS_CUDA_ARCH_FLAGS" \
    KOKKOS_POST_CONFIGURE=kokkos_cuda13_compat kokkos_build kokkos-cuda "$KOKKOS_CUDA_PREFIX" "$key" "CUDA $cuda_ver sm_80+sm_90, OpenMP, Serial" "${args[@]}"
}

# Debian 12's HIP compiler and runtime (enough to compile and link; running needs an AMD GPU).
ensure_hip_tools() {
  if ! command -v hipcc >/dev/null 2>&1 || [ ! -e /usr/include/hip/hip_runtime_api.h ]; then
    log "installing the HIP leg's tools: hipcc libamdhip64-dev"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends \
      hipcc libamdhip64-dev
  fi
  command -v hipcc >/dev/null 2>&1 || die "hipcc is still missing"
}

kokkos_hip_dep() {
  local hip_ver key
  hip_ver=$(dpkg-query -W -f='${Version}' hipcc 2>/dev/null || echo unknown)
  key="kokkos-hip src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_HIP_RECIPE hipcc=$hip_ver args=${KOKKOS_HIP_CMAKE_ARGS[*]}"
  kokkos_build kokkos-hip "$KOKKOS_HIP_PREFIX" "$key" "HIP gfx908, Serial (hipcc $hip_ver)" "${KOKKOS_HIP_CMAKE_ARGS[@]}"
}

# --------------------------------------------------------------------------------------------
# 6. Optional Python venvs: the perf suite's (numpy, matplotlib) and the JAX interop tests'
# --------------------------------------------------------------------------------------------
# python_venv NAME DIR RECIPE CHECK PACKAGE...: a venv in DIR with PACKAGEs from the machine's
# own pip configuration (no index is named here); CHECK is Python that imports them and prints
# their versions. Cached by a stamp named NAME.
python_venv() {
  local name=$1 venv=$2 recipe=$3 check=$4
  shift 4
  local py=python3 pyver key have start=$SECONDS
  pyver=$("$py" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') \
    || die "$name: python3 does not run"
  key="$name python=$pyver recipe=$recipe packages=$*"
  if stamp_ok "$name" "$key" "$venv/bin/python"; then
    log "$name: cached ($(sed -n 2p "$STAMP_DIR/$name.stamp"))"
    return 0
  fi
  if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || die "$name: python3's venv module is missing; install python3-venv (as root: apt-get install python3-venv)"
    log "$name: installing python3-venv (Debian)"
    env DEBIAN_FRONTEND=noninteractive apt-get -q update >"$LOG_DIR/$name-apt.log" 2>&1 || true
    env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends python3-venv \
      >>"$LOG_DIR/$name-apt.log" 2>&1 \
      || { tail -n 20 "$LOG_DIR/$name-apt.log" >&2; die "$name: apt-get install python3-venv failed"; }
  fi
  log "$name: creating $venv (python $pyver) and installing $*"
  rm -rf "$venv"
  "$py" -m venv "$venv" >"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name.log" >&2; die "$name: python3 -m venv failed"; }
  "$venv/bin/python" -m pip install -q "$@" >>"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name.log" >&2; die "$name: pip install $* failed (log: $LOG_DIR/$name.log)"; }
  have=$("$venv/bin/python" -c "$check") || die "$name: $* do not import"
  printf '%s\n%s\n' "$key" "$have" > "$STAMP_DIR/$name.stamp"
  log "$name: ready in $((SECONDS - start))s ($have)"
}

perf_venv() {
  python_venv venv "$DEPS_DIR/venv" 1 \
    'import numpy, matplotlib; print("numpy", numpy.__version__, "matplotlib", matplotlib.__version__)' \
    numpy matplotlib
}

# jax is pinned to the release the interop was checked against (JAX speaks legacy DLPack only).
jax_venv() {
  python_venv jax-venv "$DEPS_DIR/jax-venv" 1 \
    'import jax, jaxlib, numpy, pytest; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "numpy", numpy.__version__, "pytest", pytest.__version__)' \
    "$JAX_PIN" numpy pytest
}

# What building the Python package needs: python3's headers, and a venv with the build backend
# (scikit-build-core, nanobind) and what the package, its tests, examples and benchmark use.
# The lower bounds of scikit-build-core and nanobind are pyproject.toml's build requirements.
python3_headers_present() {
  python3 - <<'PY' >/dev/null 2>&1
import os, sys, sysconfig
sys.exit(0 if os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
PY
}

ensure_python_headers() {
  python3_headers_present && return 0
  local py
  py=$(command -v python3)
  case $(readlink -f "$py") in
    /usr/bin/*) ;;
    *) die "python-venv: $py has no C headers (Python.h) and is not Debian's python3; install its development files" ;;
  esac
  log "installing python3-dev (Python.h for the Python package's extension)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends python3-dev
  python3_headers_present || die "python3-dev is installed but Python.h is still missing"
}

# The Arrow consumers tests/python_package/test_arrow.py checks kstage's export with (the PyCapsule
# interface with device arrays: pyarrow >= 16, nanoarrow >= 0.6), DuckDB (the Python example and
# the tests query kstage columns with it), and NVIDIA Warp (test_warp.py: kernels on its CPU device).
INTEROP_PINS="pyarrow>=16 nanoarrow>=0.6 polars>=1.0 duckdb>=1.1 warp-lang>=1.5"

python_package_venv() {
  python_venv python-venv "$DEPS_DIR/python-venv" 1 \
    'import numpy, pytest, nanobind, scikit_build_core, matplotlib, jax, pyarrow, nanoarrow, polars, duckdb, warp; print("numpy", numpy.__version__, "nanobind", nanobind.__version__, "scikit-build-core", scikit_build_core.__version__, "jax", jax.__version__, "pyarrow", pyarrow.__version__)' \
    "numpy>=2.1" pytest "nanobind>=2.4" "scikit-build-core>=0.10" matplotlib "$JAX_PIN" $INTEROP_PINS
}

# ADIOS2 for the bridge (adios2/): PyPI's serial wheel, which ships the C++ library and its CMake
# config. Pinned to the minor version the bridge was checked against.
ADIOS2_PIN="adios2==2.12.*"
adios2_venv() {
  python_venv adios2-venv "$DEPS_DIR/adios2-venv" 1 \
    'import adios2, numpy, matplotlib, os; d = os.path.dirname(adios2.__file__); assert os.path.isfile(os.path.join(d, "cmake", "adios2", "adios2-config.cmake")), d; print("adios2", adios2.__version__, "numpy", numpy.__version__)' \
    "$ADIOS2_PIN" "numpy>=2.1" matplotlib
}

# ADIOS2 built from PyPI's source distribution of the wheel's version (pip downloads it from the
# machine's configured index): the MPI ADIOS2, built with Open MPI, and the CUDA ADIOS2, built
# with the machine's nvcc. Only what the bridge uses is enabled.
ADIOS2_SOURCE_VERSION=2.12.1.1001
ADIOS2_MPI_RECIPE=1
ADIOS2_MPI_PREFIX=$DEPS_DIR/adios2-mpi
ADIOS2_CUDA_RECIPE=1
ADIOS2_CUDA_PREFIX=$DEPS_DIR/adios2-cuda
ADIOS2_SOURCE_CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_INSTALL_LIBDIR=lib
  -DBUILD_SHARED_LIBS=ON
  -DBUILD_TESTING=OFF
  -DADIOS2_BUILD_EXAMPLES=OFF
)
for _adios2_off in SST Python Fortran HDF5 HDF5_VOL BigWhoop Blosc2 BZip2 Caliper ZFP SZ SZ3 LIBPRESSIO \
                   MGARD PRODM PNG DAOS DataMan DataSpaces MHS ZeroMQ IME SysVShMem UCX Profiling Sodium \
                   Catalyst Campaign OpenSSL XRootD CURL Kokkos; do
  ADIOS2_SOURCE_CMAKE_ARGS+=("-DADIOS2_USE_$_adios2_off=OFF")
done
unset _adios2_off

# adios2_source_dep NAME PREFIX WHAT CHECK CMAKE_ARGS...: ADIOS2's source built with the common
# arguments and CMAKE_ARGS into PREFIX, unless its stamp (the arguments and WHAT) is current;
# CHECK is a line the installed adios2-config-common.cmake must hold.
adios2_source_dep() {
  local name=$1 prefix=$2 what=$3 check=$4 key src
  shift 4
  local args=("${ADIOS2_SOURCE_CMAKE_ARGS[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" "$@")
  key="$name version=$ADIOS2_SOURCE_VERSION $what cxx=$(g++ --version | head -n1) args=${args[*]}"
  if stamp_ok "$name" "$key" "$prefix/lib/cmake/adios2/adios2-config.cmake"; then
    log "$name: cached ($prefix)"
    return 0
  fi
  local start=$SECONDS pip=$DEPS_DIR/adios2-venv/bin/python work=$WORK_DIR/$name
  log "$name: downloading ADIOS2 $ADIOS2_SOURCE_VERSION's source distribution"
  rm -rf "$work" "$prefix"
  mkdir -p "$work"
  "$pip" -m pip download -q --no-binary adios2 --no-deps -d "$work" \
    "adios2==$ADIOS2_SOURCE_VERSION" >"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/$name.log" >&2; die "$name: pip download of the adios2 sdist failed"; }
  tar -xzf "$work/adios2-$ADIOS2_SOURCE_VERSION.tar.gz" -C "$work"
  src=$work/adios2-$ADIOS2_SOURCE_VERSION
  log "$name: building ($what; log: $LOG_DIR/$name.log)"
  { cmake -S "$src" -B "$work/build" "${args[@]}" \
      && cmake --build "$work/build" -j "$JOBS" \
      && cmake --install "$work/build"; } >>"$LOG_DIR/$name.log" 2>&1 \
    || { tail -n 30 "$LOG_DIR/$name.log" >&2; die "$name: the build failed (log: $LOG_DIR/$name.log)"; }
  grep -q "$check" "$prefix/lib/cmake/adios2/adios2-config-common.cmake" \
    || die "$name: the installed ADIOS2 lacks '$check'"
  rm -rf "$work"
  printf '%s\n%s\n' "$key" "ADIOS2 $ADIOS2_SOURCE_VERSION with $what" > "$STAMP_DIR/$name.stamp"
  log "$name: ready in $((SECONDS - start))s"
}

adios2_mpi_dep() {
  local mpi_version
  mpi_version=$(mpirun --version 2>/dev/null | head -n1 || echo none)
  adios2_source_dep adios2-mpi "$ADIOS2_MPI_PREFIX" "recipe=$ADIOS2_MPI_RECIPE MPI: $mpi_version" \
    'set(ADIOS2_HAVE_MPI TRUE)' -DADIOS2_USE_MPI=ON
}

# The CUDA ADIOS2 (GPU-aware puts and gets, ADIOS2's MemorySpace::GPU) for the cuda preset's
# bridge: serial, CUDA's shared runtime (the one kstage's CUDA backend loads), Hopper machine
# code (the GPU machine's H200).
adios2_cuda_dep() {
  local nvcc
  nvcc=$(find_nvcc)
  adios2_source_dep adios2-cuda "$ADIOS2_CUDA_PREFIX" \
    "recipe=$ADIOS2_CUDA_RECIPE CUDA: $("$nvcc" --version | tail -n1)" 'set(ADIOS2_HAVE_CUDA TRUE)' \
    -DADIOS2_USE_MPI=OFF -DADIOS2_USE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared
}

# mpi4py for the Python package's MPI test (tests/python_package/mpi_adios2.py), for the Python of
# the python-venv (--python), in $KSTAGE_DEPS_DIR/mpi4py (a folder for PYTHONPATH): its wheel,
# which loads the machine's MPI library at run time.
MPI4PY_PIN="mpi4py>=4.0"
mpi4py_dep() {
  local py=$DEPS_DIR/python-venv/bin/python pyver key
  if [ ! -x "$py" ]; then
    log "mpi4py: no python-venv (--python): skipped"
    return 0
  fi
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  key="mpi4py pin=$MPI4PY_PIN python=$pyver mpi=$(mpirun --version 2>/dev/null | head -n1)"
  if stamp_ok mpi4py "$key" "$DEPS_DIR/mpi4py/mpi4py/__init__.py"; then
    log "mpi4py: cached ($(sed -n 2p "$STAMP_DIR/mpi4py.stamp"))"
    return 0
  fi
  rm -rf "$DEPS_DIR/mpi4py"
  "$py" -m pip install -q --only-binary mpi4py --target "$DEPS_DIR/mpi4py" "$MPI4PY_PIN" >"$LOG_DIR/mpi4py.log" 2>&1 \
    || { tail -n 20 "$LOG_DIR/mpi4py.log" >&2; die "mpi4py: pip install failed (log: $LOG_DIR/mpi4py.log)"; }
  local have
  have=$(PYTHONPATH=$DEPS_DIR/mpi4py "$py" -c 'import mpi4py; from mpi4py import MPI; print("mpi4py", mpi4py.__version__, "on", MPI.Get_library_version().split(",")[0])') \
    || die "mpi4py: it does not import with this machine's MPI"
  printf '%s\n%s\n' "$key" "$have" > "$STAMP_DIR/mpi4py.stamp"
  log "mpi4py: ready ($have)"
}

adios2_cmake_dir() {
  "$DEPS_DIR/adios2-venv/bin/python" -c 'import adios2, os; print(os.path.join(os.path.dirname(adios2.__file__), "cmake", "adios2"))'
}

# --------------------------------------------------------------------------------------------
main() {
  local mpi=${KSTAGE_SETUP_MPI:-1} perf=${KSTAGE_SETUP_PERF:-0} jax=${KSTAGE_SETUP_JAX:-0} python=${KSTAGE_SETUP_PYTHON:-0} fuzz=${KSTAGE_SETUP_FUZZ:-0} docs=${KSTAGE_SETUP_DOCS:-0} adios2=${KSTAGE_SETUP_ADIOS2:-0} adios2_mpi=${KSTAGE_SETUP_ADIOS2_MPI:-0} adios2_cuda=${KSTAGE_SETUP_ADIOS2_CUDA:-0} tsan=${KSTAGE_SETUP_TSAN:-0} cuda=${KSTAGE_SETUP_CUDA:-0} hip=${KSTAGE_SETUP_HIP:-0} arg
  for arg in "$@"; do
    case $arg in
      --no-mpi) mpi=0 ;;
      --perf) perf=1 ;;
      --jax) jax=1 ;;
      --python) python=1 ;;
      --fuzz) fuzz=1 ;;
      --docs) docs=1 ;;
      --adios2) adios2=1 ;;
      --adios2-mpi) adios2_mpi=1 ;;
      --adios2-cuda) adios2_cuda=1 ;;
      --tsan) tsan=1 ;;
      --cuda) cuda=1 ;;
      --hip) hip=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument '$arg' (known: --no-mpi, --perf, --jax, --python, --fuzz, --docs, --adios2, --adios2-mpi, --adios2-cuda, --tsan, --cuda, --hip)" ;;
    esac
  done
  ensure_tools
  if [ "$adios2_mpi" = 1 ] && [ "$mpi" = 0 ]; then die "--adios2-mpi needs Open MPI (drop --no-mpi)"; fi
  # The ADIOS2 venv's pip downloads the source, and its Python reads the MPI leg's files too.
  if [ "$adios2_mpi" = 1 ] || [ "$adios2_cuda" = 1 ]; then adios2=1; fi
  if [ "$mpi" = 1 ]; then ensure_mpi; fi
  if [ "$fuzz" = 1 ]; then ensure_fuzz_tools; fi
  if [ "$docs" = 1 ]; then ensure_docs_tools; fi
  if [ "$hip" = 1 ]; then ensure_hip_tools; fi
  if [ "$python" = 1 ]; then ensure_python_headers; fi
  mkdir -p "$DEPS_DIR" "$STAMP_DIR" "$DL_DIR" "$LOG_DIR"
  # Serialise concurrent runs (e.g. scripts/run.sh and scripts/test.sh started together).
  exec 9>"$DEPS_DIR/.lock"
  flock 9

  deb_dep dlpack "$DLPACK_PKG" "$DLPACK_RECIPE" \
    "$USR_PREFIX/usr/include/dlpack/dlpack.h"
  deb_dep catch2 "$CATCH2_PKG" "$CATCH2_RECIPE" \
    "$USR_PREFIX/usr/lib/cmake/Catch2/Catch2Config.cmake"
  kokkos_dep
  if [ "$fuzz" = 1 ]; then kokkos_serial_dep; fi
  if [ "$tsan" = 1 ]; then kokkos_tsan_dep; fi
  if [ "$cuda" = 1 ]; then kokkos_cuda_dep; fi
  if [ "$hip" = 1 ]; then kokkos_hip_dep; fi
  kokkos_source_cleanup
  apt_private_cleanup
  if [ "$perf" = 1 ]; then perf_venv; fi
  if [ "$jax" = 1 ]; then jax_venv; fi
  if [ "$python" = 1 ]; then python_package_venv; fi
  if [ "$adios2" = 1 ]; then adios2_venv; fi
  if [ "$adios2_mpi" = 1 ]; then adios2_mpi_dep; mpi4py_dep; fi
  if [ "$adios2_cuda" = 1 ]; then adios2_cuda_dep; fi
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
  if [ "$python" = 1 ]; then
    echo "Python_EXECUTABLE=$DEPS_DIR/python-venv/bin/python"
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
