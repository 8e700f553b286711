# shellcheck shell=bash
# scripts/setup/adios2.sh -- ADIOS2 for the bridge (sourced by scripts/setup.sh, not a command).
#
# Only with `--adios2` or KSTAGE_SETUP_ADIOS2=1 (scripts/test.sh passes it for the `default`
# preset; --adios2-mpi and --adios2-cuda imply it): ADIOS2 for the bridge kstage::adios2
# (adios2/, KSTAGE_WITH_ADIOS2)
#   - a Python virtual environment in $KSTAGE_DEPS_DIR/adios2-venv, made as the others
#     (common.sh), with PyPI's `adios2` wheel (serial ADIOS2 2.12: its C++ library, headers and
#     CMake config sit in site-packages/adios2, the libraries they need in
#     site-packages/adios2.libs), numpy and matplotlib: the CMake package
#     (ADIOS2_DIR=<site-packages>/adios2/cmake/adios2, which the top-level CMakeLists.txt finds
#     by itself) and the Python reader of the tests.
# Also here: adios2_source_dep, ADIOS2 built from PyPI's source distribution of the wheel's
# version (this venv's pip downloads it from the machine's configured index), which the MPI
# ADIOS2 (adios2_mpi.sh) and the CUDA ADIOS2 (adios2_cuda.sh) are. Only what the bridge uses is
# enabled: shared, Release, the C and C++ bindings and the BP engines (SST, Python, Fortran,
# HDF5 and the compressors off).

# Pinned to the minor version the bridge was checked against.
ADIOS2_PIN="adios2==2.12.*"
adios2_venv() {
  python_venv adios2-venv "$DEPS_DIR/adios2-venv" 1 \
    'import adios2, numpy, matplotlib, os; d = os.path.dirname(adios2.__file__); assert os.path.isfile(os.path.join(d, "cmake", "adios2", "adios2-config.cmake")), d; print("adios2", adios2.__version__, "numpy", numpy.__version__)' \
    "$ADIOS2_PIN" "numpy>=2.1" matplotlib
}

adios2_cmake_dir() {
  "$DEPS_DIR/adios2-venv/bin/python" -c 'import adios2, os; print(os.path.join(os.path.dirname(adios2.__file__), "cmake", "adios2"))'
}

# ADIOS2 built from PyPI's source distribution of the wheel's version: the MPI ADIOS2, built
# with Open MPI, and the CUDA ADIOS2, built with the machine's nvcc.
ADIOS2_SOURCE_VERSION=2.12.1.1001
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
