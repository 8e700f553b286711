// SPDX-License-Identifier: Apache-2.0
// The CUDA backend: columns in CUDA device memory (kDLCUDA), kernels on
// Kokkos::Cuda. See backends/gpu/gpu_backend.hpp.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::cuda {

// Device type kDLCUDA (kDLCUDAManaged sources make columns on the same ordinal).
extern const core::BackendFactory factory;

}  // namespace kstage::backends::cuda
