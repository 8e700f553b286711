// SPDX-License-Identifier: Apache-2.0
// Host backend: columns in Kokkos::HostSpace, kernels on one host execution
// space (Serial or OpenMP), chosen per stage.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::host {

// `parallel` selects the build's parallel host space (OpenMP/Threads) when
// enabled, else Serial.
std::unique_ptr<core::Backend> make_host_backend(bool parallel);

}  // namespace kstage::backends::host
