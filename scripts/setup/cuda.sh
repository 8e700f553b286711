# shellcheck shell=bash
# scripts/setup/cuda.sh -- the CUDA build's Kokkos (sourced by scripts/setup.sh, not a command).
#
# Only with `--cuda` or KSTAGE_SETUP_CUDA=1: the CUDA build (preset `cuda`)
#   - Kokkos with CUDA (Hopper sm_90 machine code, Ampere sm_80), OpenMP and Serial, shared (one
#     Kokkos per process, as with the default build), in $KSTAGE_DEPS_DIR/kokkos-cuda (~2 min on
#     2 cores), compiled by its nvcc_wrapper with the machine's nvcc (KSTAGE_NVCC, else nvcc on
#     PATH, else /usr/local/cuda/bin/nvcc; common.sh's find_nvcc). CUDA 13 needs
#     backends/cuda/cuda13_compat.h, which the installed KokkosCore_config.h includes by name
#     (Kokkos 3.4 predates CUDA 13); sm_90 is added through NVCC_APPEND_FLAGS because
#     nvcc_wrapper takes one -arch only, and Kokkos 3.4 aborts on a GPU whose major
#     architecture differs from the code's.

KOKKOS_CUDA_PREFIX=$DEPS_DIR/kokkos-cuda
# Its compiler (nvcc_wrapper, from the extracted source) and the compat header's path are filled
# in by kokkos_cuda_dep.
KOKKOS_CUDA_RECIPE=3
KOKKOS_CUDA_ARCH_FLAGS="-gencode=arch=compute_90,code=sm_90"
CUDA_COMPAT_HEADER=$KSTAGE_ROOT/backends/cuda/cuda13_compat.h

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
  cat >> "$config" <<CONFIG

/* Added by kstage scripts/setup.sh --cuda: the CUDA 13 runtime signatures Kokkos < 4.7 calls. */
#include "kstage_cuda13_compat.h"
CONFIG
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
