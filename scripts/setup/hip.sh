# shellcheck shell=bash
# scripts/setup/hip.sh -- the HIP build's tools and Kokkos (sourced by scripts/setup.sh, not a
# command).
#
# Only with `--hip` or KSTAGE_SETUP_HIP=1: the HIP build (preset `hip`, compile and link only: no
# AMD GPU is reachable here)
#   - Debian 12's hipcc 5.2.3 and libamdhip64-dev, installed with apt-get when missing;
#   - Kokkos with HIP (gfx908) and Serial, shared, compiled by hipcc (kokkos.sh), in
#     $KSTAGE_DEPS_DIR/kokkos-hip (~30 s on 2 cores).

KOKKOS_HIP_PREFIX=$DEPS_DIR/kokkos-hip
# hipcc compiles everything (Kokkos' HIP backend needs it as the C++ compiler).
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

# Debian 12's HIP compiler and runtime (enough to compile and link; running needs an AMD GPU).
ensure_hip_tools() {
  if ! command -v hipcc >/dev/null 2>&1 || [ ! -e /usr/include/hip/hip_runtime_api.h ]; then
    log "installing the HIP leg's tools: hipcc libamdhip64-dev"
    system_apt_install hipcc libamdhip64-dev
  fi
  command -v hipcc >/dev/null 2>&1 || die "hipcc is still missing"
}

kokkos_hip_dep() {
  local hip_ver key
  hip_ver=$(dpkg-query -W -f='${Version}' hipcc 2>/dev/null || echo unknown)
  key="kokkos-hip src=trilinos=$TRILINOS_SRC_VERSION recipe=$KOKKOS_HIP_RECIPE hipcc=$hip_ver args=${KOKKOS_HIP_CMAKE_ARGS[*]}"
  kokkos_build kokkos-hip "$KOKKOS_HIP_PREFIX" "$key" "HIP gfx908, Serial (hipcc $hip_ver)" "${KOKKOS_HIP_CMAKE_ARGS[@]}"
}
