# shellcheck shell=bash
# scripts/setup/fuzz.sh -- the fuzz leg's tools and Kokkos (sourced by scripts/setup.sh, not a
# command).
#
# Only with `--fuzz` or KSTAGE_SETUP_FUZZ=1: the fuzz leg (tests/fuzz, preset `fuzz`)
#   - clang-14 and libclang-rt-14-dev (libFuzzer, sanitizer runtimes), installed with apt-get
#     when missing;
#   - a Serial-only Kokkos (same source, g++, shared, C++17; kokkos.sh) in
#     $KSTAGE_DEPS_DIR/kokkos-serial, so that clang never meets the g++ OpenMP runtime of the
#     default Kokkos.

KOKKOS_SERIAL_PREFIX=$DEPS_DIR/kokkos-serial
# The sanitizer legs' variants (this one and tsan.sh's): Serial only (no OpenMP runtime to mix or
# to leave uninstrumented). A Kokkos 3.x without a parallel backend compiles its atomics as plain
# loads and stores (KOKKOS_ENABLE_SERIAL_ATOMICS), so View reference counts would race when
# kstage is called from several threads; these variants use the compiler's atomics
# (KOKKOS_ENABLE_GNU_ATOMICS), in the library and -- through KokkosCore_config.h, see
# kokkos.sh's kokkos_force_gnu_atomics -- in everything built against it.
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
    system_apt_install "${missing[@]}"
  fi
  clang_rt_fuzzer_present || die "clang-14's libFuzzer runtime (libclang-rt-14-dev) is still missing"
  log "fuzz tools: $(clang++-14 --version | head -n1)"
}

kokkos_serial_dep() {
  local cxx_id
  cxx_id=$(g++ --version 2>/dev/null | head -n1 || echo unknown)
  local key="kokkos-serial src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_SERIAL_RECIPE cxx=$cxx_id args=${KOKKOS_SERIAL_CMAKE_ARGS[*]}"
  kokkos_build kokkos-serial "$KOKKOS_SERIAL_PREFIX" "$key" "Serial only, GNU atomics" "${KOKKOS_SERIAL_CMAKE_ARGS[@]}"
}
