# shellcheck shell=bash
# scripts/setup/tsan.sh -- the ThreadSanitizer leg's Kokkos (sourced by scripts/setup.sh, not a
# command).
#
# Only with `--tsan` or KSTAGE_SETUP_TSAN=1: the ThreadSanitizer leg (preset `tsan`)
#   - a Serial-only Kokkos built with g++ -fsanitize=thread (kokkos.sh; GNU atomics, as fuzz.sh's
#     variant says why) in $KSTAGE_DEPS_DIR/kokkos-tsan, so that the reference counts of Kokkos
#     Views are instrumented too.

KOKKOS_TSAN_PREFIX=$DEPS_DIR/kokkos-tsan
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

kokkos_tsan_dep() {
  local cxx_id
  cxx_id=$(g++ --version 2>/dev/null | head -n1 || echo unknown)
  local key="kokkos-tsan src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_TSAN_RECIPE cxx=$cxx_id args=${KOKKOS_TSAN_CMAKE_ARGS[*]}"
  kokkos_build kokkos-tsan "$KOKKOS_TSAN_PREFIX" "$key" "Serial only, GNU atomics, ThreadSanitizer" "${KOKKOS_TSAN_CMAKE_ARGS[@]}"
}
