// SPDX-License-Identifier: Apache-2.0
// The CUDA backend: columns in CUDA device memory (kDLCUDA), kernels on
// Kokkos::Cuda. See backends/gpu/gpu_backend.hpp.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::cuda {

// Device type kDLCUDA (kDLCUDAManaged sources make columns on the same ordinal).
// A function, not a constant: HIP's clang would make a constant-initialised
// global an implicit device variable, pointing at host functions.
const core::BackendFactory& factory();

}  // namespace kstage::backends::cuda
