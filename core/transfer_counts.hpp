// SPDX-License-Identifier: Apache-2.0
// Process-wide counts of host <-> device copies (kstage_transfer_counts):
// every device backend adds what it enqueues, so a test can show that a data
// path takes no detour through the host.
#pragma once

#include <atomic>
#include <cstdint>

namespace kstage::core {

struct TransferCounts {
  std::atomic<uint64_t> host_to_device{0};
  std::atomic<uint64_t> device_to_host{0};
  std::atomic<uint64_t> index_uploads{0};
};

inline TransferCounts& transfer_counts() {
  static TransferCounts counts;
  return counts;
}

}  // namespace kstage::core
