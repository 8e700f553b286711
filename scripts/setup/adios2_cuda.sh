# shellcheck shell=bash
# scripts/setup/adios2_cuda.sh -- the CUDA ADIOS2 (sourced by scripts/setup.sh, not a command).
#
# Only with `--adios2-cuda` or KSTAGE_SETUP_ADIOS2_CUDA=1 (opt-in: scripts/test.sh's `cuda` leg
# passes it with KSTAGE_TEST_ADIOS2_CUDA=1 or where the cache has it; scripts/gpu-check.sh's
# bundle needs it; docs/building.md, "The CUDA ADIOS2"): a CUDA build of ADIOS2 (GPU-aware: puts
# and gets of device memory) for the bridge's device path, in $KSTAGE_DEPS_DIR/adios2-cuda
# (555 s of CPU: ~5 min on 2 idle cores)
#   - the same source distribution and options as the MPI one (adios2.sh's adios2_source_dep),
#     serial, with CUDA (the machine's nvcc, as for --cuda; sm_90; the shared CUDA runtime);
#     implies --adios2.

ADIOS2_CUDA_RECIPE=1
ADIOS2_CUDA_PREFIX=$DEPS_DIR/adios2-cuda

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
