// SPDX-License-Identifier: Apache-2.0
// Where a pointer's memory is, as a GPU runtime tells (the runtime tables'
// pointer_kind, backends/gpu/gpu_backend.hpp's check_memory).
#pragma once

namespace kstage::backends::gpu {

enum class MemoryKind {
  Device,      // device or managed memory of one ordinal
  PinnedHost,  // page-locked host memory the device reads over the bus
  Pageable,    // host memory the runtime does not know
};

}  // namespace kstage::backends::gpu
