// SPDX-License-Identifier: Apache-2.0
// Host backend: columns in Kokkos::HostSpace, kernels on one host execution
// space (Serial or OpenMP, config.host_execution), chosen per stage.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::host {

// Device type kDLCPU, one device. Also the backend of pinned host memory
// (kDLCUDAHost, kDLROCMHost) sources: memory_space.hpp says which types.
// A function, not a constant: HIP's clang would make a constant-initialised
// global an implicit device variable, pointing at host functions.
const core::BackendFactory& factory();

}  // namespace kstage::backends::host
