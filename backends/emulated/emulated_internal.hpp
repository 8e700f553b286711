// SPDX-License-Identifier: Apache-2.0
// What the emulated device's driver files (emulated_*.cpp) share and nothing else sees: the
// arena's block alignment, the list of every pool (kstage_emulated_live_bytes does not count
// what pools cache), and the kernel delay and violation handler the test API sets.
#pragma once

#include "backends/emulated/emulated_device.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kstage::backends::emulated {

// Blocks are handed out in multiples of kAlign bytes, aligned to it (arenas and pools).
constexpr size_t kAlign = 64;
inline size_t align_up(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

// Every pool made (never destroyed), guarded by g_pools_mutex: emulated_pool.cpp.
extern std::mutex g_pools_mutex;
std::vector<Pool*>& pools();

// kstage_emulated_set_kernel_delay_us and kstage_emulated_set_violation_handler:
// emulated_launch.cpp.
extern std::atomic<uint32_t> g_delay_us;
extern std::atomic<kstage_emulated_violation_fn> g_violation;

}  // namespace kstage::backends::emulated
