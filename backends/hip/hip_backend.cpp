// SPDX-License-Identifier: Apache-2.0
// The GPU backend on the HIP runtime (compiled by hipcc: it instantiates the
// core/kernels functors on Kokkos' HIP execution space).
#include "backends/hip/hip_backend.hpp"

#include "backends/gpu/gpu_backend.hpp"
#include "backends/hip/hip_runtime.hpp"

namespace kstage::backends::hip {

const core::BackendFactory& factory() {
  static const core::BackendFactory f = {"rocm", kDLROCM, gpu::device_count<HipRuntime>,
                                         gpu::GpuBackend<HipRuntime>::make, 0};
  return f;
}

}  // namespace kstage::backends::hip
