# shellcheck shell=bash
# scripts/setup/kokkos.sh -- Kokkos (sourced by scripts/setup.sh, not a command).
#
# Kokkos 3.4.01 (OpenMP + Serial, shared, C++17) in $KSTAGE_DEPS_DIR/kokkos, built from the
# Kokkos copy inside Debian 12's Trilinos 13.2 source package (fetched with the private apt of
# common.sh) -- skipped when Kokkos_ROOT is set in the environment (no Kokkos is built then).
# The source is extracted once per setup run and shared by every variant built in it: the
# sanitizer legs' (fuzz.sh, tsan.sh) and the GPU builds' (cuda.sh, hip.sh), which are built from
# Trilinos' Kokkos even when Kokkos_ROOT is set. KSTAGE_JOBS: parallel build jobs (default nproc).

KOKKOS_PREFIX=$DEPS_DIR/kokkos
TRILINOS_SRC_VERSION=13.2.0-4
TRILINOS_TOPDIR=Trilinos-trilinos-release-13-2-0
KOKKOS_EXPECTED_VERSION=3.4.01
KOKKOS_RECIPE=1

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

# Makes every consumer of the Kokkos in $1 use the same (GNU) atomics as the library itself
# (the Serial-only variants of fuzz.sh and tsan.sh).
kokkos_force_gnu_atomics() {
  local config=$1/include/KokkosCore_config.h
  [ -f "$config" ] || die "kokkos: $config missing"
  cat >> "$config" <<'CONFIG'

/* Added by kstage scripts/setup.sh: real atomics without a parallel backend, so that View
 * reference counts stay correct when kstage is called from several threads. */
#ifndef KOKKOS_ENABLE_GNU_ATOMICS
#define KOKKOS_ENABLE_GNU_ATOMICS
#endif
CONFIG
}

# kokkos_build <stamp-name> <prefix> <recipe-key> <description> <cmake args...>
# KOKKOS_POST_CONFIGURE, when set, is called between configure and build with the build folder
# and the prefix (cuda.sh's kokkos_cuda13_compat).
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
