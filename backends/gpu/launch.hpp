// SPDX-License-Identifier: Apache-2.0
// What a kernel launch tells the runtime table (RT::launch) besides the
// kernel: its name for messages, and the pointers it dereferences. CUDA and
// HIP ignore the pointers; the emulated runtime checks each against the
// device's arena and unpoisons its block while the kernel runs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace kstage::backends::gpu {

struct LaunchArgs {
  const char* what;
  std::array<const void*, 8> ptrs{};  // data, index and offset arrays (null: unused)
  // A device array of `n_rows` row pointers and their byte counts (a ragged copy's sources).
  const std::byte* const* rows = nullptr;
  const uint64_t* row_bytes = nullptr;
  size_t n_rows = 0;
};

// Which host <-> device copies a backend enqueued (RT::count: the emulated
// runtime's per-ordinal counts, kstage_emulated.h).
enum class Transfer { HostToDevice, DeviceToHost, IndexUpload };

}  // namespace kstage::backends::gpu
