// SPDX-License-Identifier: Apache-2.0
// The GPU backend on the CUDA runtime (compiled by nvcc: it instantiates the
// core/kernels functors on Kokkos::Cuda).
#include "backends/cuda/cuda_backend.hpp"

#include "backends/cuda/cuda_runtime.hpp"
#include "backends/gpu/gpu_backend.hpp"

namespace kstage::backends::cuda {

const core::BackendFactory& factory() {
  static const core::BackendFactory f = {"cuda", kDLCUDA, gpu::device_count<CudaRuntime>,
                                         gpu::GpuBackend<CudaRuntime>::make, kDLCUDAManaged};
  return f;
}

}  // namespace kstage::backends::cuda
