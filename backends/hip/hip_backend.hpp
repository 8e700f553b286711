// SPDX-License-Identifier: Apache-2.0
// The HIP backend: columns in ROCm device memory (kDLROCM), kernels on
// Kokkos' HIP execution space. See backends/gpu/gpu_backend.hpp.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::hip {

// Device type kDLROCM.
// A function, not a constant: HIP's clang would make a constant-initialised
// global an implicit device variable, pointing at host functions.
const core::BackendFactory& factory();

}  // namespace kstage::backends::hip
