// SPDX-License-Identifier: Apache-2.0
// The emulated device's backend: the one GPU backend (backends/gpu/gpu_backend.hpp) on the
// emulated runtime table, so that CI runs the code CUDA and HIP users run.
#include "backends/emulated/emulated_backend.hpp"

#include "backends/emulated/emulated_runtime.hpp"
#include "backends/gpu/gpu_backend.hpp"

namespace kstage::backends::emulated {

const core::BackendFactory& factory() {
  static const core::BackendFactory f = {"emulated", kDeviceType,
                                         gpu::device_count<EmulatedRuntime>,
                                         gpu::GpuBackend<EmulatedRuntime>::make};
  return f;
}

}  // namespace kstage::backends::emulated
