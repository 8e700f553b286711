// SPDX-License-Identifier: Apache-2.0
// The emulated device's error state, as a CUDA runtime keeps it: the calling thread's last
// error and current device, and each ordinal's context (its sticky fault and the faults a test
// injected). The rest of the driver (emulated_device.hpp) lives in emulated_arena.cpp,
// emulated_stream.cpp, emulated_pool.cpp and emulated_launch.cpp; the test API
// (kstage_emulated.h) in emulated_test_api.cpp.
#include "backends/emulated/emulated_device.hpp"

#include <atomic>
#include <cstdint>

namespace kstage::backends::emulated {
namespace {

thread_local Error t_last_error = Error::success;
thread_local int32_t t_device = 0;

}  // namespace

// ---------------------------------------------------------------------------
// Errors, the current device, contexts

const char* error_string(Error e) {
  switch (e) {
    case Error::success: return "no error";
    case Error::not_ready: return "device not ready";
    case Error::invalid_value: return "invalid argument";
    case Error::invalid_device: return "invalid device ordinal";
    case Error::invalid_handle: return "invalid resource handle";
    case Error::memory_allocation: return "out of memory";
    case Error::invalid_memcpy_direction: return "invalid copy direction for memcpy";
    case Error::not_supported: return "operation not supported";
    case Error::launch_out_of_resources: return "too many resources requested for launch";
    case Error::illegal_address: return "an illegal memory access was encountered";
    case Error::capture_implicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case Error::capture_unsupported: return "operation not permitted when stream is capturing";
  }
  return "unknown error";
}

Error set_last_error(Error e) {
  if (e != Error::success && e != Error::not_ready) t_last_error = e;
  return e;
}
Error take_last_error() {
  const Error e = t_last_error;
  t_last_error = Error::success;
  // As cudaGetLastError: a sticky fault is reported again and again.
  const Error sticky = context(t_device).status();
  return sticky != Error::success ? sticky : e;
}

int32_t current_device() { return t_device; }
Error set_current_device(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return set_last_error(Error::invalid_device);
  t_device = ordinal;
  return Error::success;
}

Context& context(int32_t ordinal) {
  static Context* contexts = new Context[kDeviceCount];  // never destroyed
  return contexts[ordinal >= 0 && ordinal < kDeviceCount ? ordinal : 0];
}

namespace {
std::atomic<int> g_captures{0};          // global-mode captures open
std::atomic<bool> g_invalidated{false};  // one of them saw an unsafe call
Error refuse_in_capture(Error e) {
  g_invalidated.store(true);
  return e;
}
}  // namespace

Error capture_allows(uintptr_t stream) {
  if (stream != 1 || g_captures.load() == 0) return Error::success;
  return refuse_in_capture(Error::capture_implicit);
}
Error capture_allows_device_wait() {
  if (g_captures.load() == 0) return Error::success;
  return refuse_in_capture(Error::capture_unsupported);
}
void capture_begin() {
  if (g_captures.fetch_add(1) == 0) g_invalidated.store(false);
}
bool capture_end() {
  const bool valid = !g_invalidated.load();
  g_captures.fetch_sub(1);
  return valid;
}

bool fires(std::atomic<uint32_t>& counter) {
  uint32_t n = counter.load();
  while (n != 0 && !counter.compare_exchange_weak(n, n - 1)) {
  }
  return n == 1;
}

}  // namespace kstage::backends::emulated
