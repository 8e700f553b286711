// SPDX-License-Identifier: Apache-2.0
// Work on the emulated device's streams: kernel launches, which check every pointer a kernel
// is given against the arenas and open its blocks while it runs; copies with CUDA's rules;
// host functions in stream order (emulated_device.hpp, launch and memcpy_async).
#include "backends/emulated/emulated_device.hpp"
#include "backends/emulated/emulated_internal.hpp"

#include <sanitizer/asan_interface.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KSTAGE_EMULATED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KSTAGE_EMULATED_ASAN 1
#endif
#endif

namespace kstage::backends::emulated {

std::atomic<uint32_t> g_delay_us{0};
std::atomic<kstage_emulated_violation_fn> g_violation{nullptr};

// ---------------------------------------------------------------------------
// Launches and copies

void kernel_delay() {
  if (const uint32_t us = g_delay_us.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void violation(const std::string& message) {
  if (kstage_emulated_violation_fn f = g_violation.load()) {
    f(message.c_str());
    return;
  }
  std::fprintf(stderr, "kstage emulated device: %s\n", message.c_str());
  std::abort();
}

namespace {
// Memory a kernel of `ordinal` may dereference: its own arena, or pinned host memory.
Arena* reachable(int32_t ordinal, const void* p) {
  if (arena(ordinal).holds(p)) return &arena(ordinal);
  if (pinned_arena().holds(p)) return &pinned_arena();
  return nullptr;
}

void refuse(const char* what, const char* which, size_t i, const void* p, int32_t ordinal) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: %s %zu (%p) is not in device %d's arena (host memory handed to a device "
                "kernel)",
                what, which, i, p, int(ordinal));
  violation(buf);
}

// Runs on the worker: the checks, then the kernel with its blocks open.
void run_kernel(int32_t ordinal, const char* what, const LaunchPointers& ptrs,
                const std::function<void()>& kernel) {
  Arena& own = arena(ordinal);
  for (size_t i = 0; i < ptrs.direct.size(); ++i)
    if (ptrs.direct[i] && !reachable(ordinal, ptrs.direct[i]))
      return refuse(what, "pointer", i, ptrs.direct[i], ordinal);
  for (const void* p : ptrs.direct)
    if (p) reachable(ordinal, p)->open(p);
  bool rows_ok = true;
  size_t opened_rows = 0;
  for (; opened_rows < ptrs.n_rows; ++opened_rows) {
    const std::byte* row = ptrs.rows[opened_rows];
    if (ptrs.row_bytes[opened_rows] == 0) continue;
    if (!own.holds(row)) {
      rows_ok = false;
      refuse(what, "source row", opened_rows, row, ordinal);
      break;
    }
    own.open(row);
  }
  if (rows_ok) kernel();
  for (size_t i = 0; i < opened_rows; ++i)
    if (ptrs.row_bytes[i]) own.close(ptrs.rows[i]);
  for (const void* p : ptrs.direct)
    if (p) reachable(ordinal, p)->close(p);
}
}  // namespace

Error launch(Stream& s, const char* what, LaunchPointers ptrs, std::function<void()> kernel) {
  const int32_t ordinal = s.ordinal();
  Context& c = context(ordinal);
  if (c.status() != Error::success) return set_last_error(c.status());
  if (fires(c.fault_launch)) return set_last_error(Error::launch_out_of_resources);
  const bool fault = fires(c.fault_kernel);
  try {
    s.enqueue([ordinal, what, ptrs = std::move(ptrs), kernel = std::move(kernel), fault] {
      kernel_delay();
      Context& ctx = context(ordinal);
      if (ctx.status() != Error::success) return;  // a faulty context runs nothing
      if (fault) return ctx.fault(Error::illegal_address);
      run_kernel(ordinal, what, ptrs, kernel);
    });
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

Error memcpy_async(Stream& s, void* dst, const void* src, size_t bytes, CopyKind kind) {
  const int32_t ordinal = s.ordinal();
  Context& c = context(ordinal);
  if (c.status() != Error::success) return set_last_error(c.status());
  if (bytes == 0) return Error::success;
  const int32_t to = memory_of(dst), from = memory_of(src);
  const bool to_device = to >= 0, from_device = from >= 0;
  bool matches = true;
  switch (kind) {
    case CopyKind::HostToDevice: matches = to_device && !from_device; break;
    case CopyKind::DeviceToHost: matches = from_device && !to_device; break;
    case CopyKind::DeviceToDevice: matches = to_device && from_device; break;
    case CopyKind::Default: break;
  }
  if (!matches) return set_last_error(Error::invalid_memcpy_direction);
  const bool fault = fires(c.fault_copy);
  auto body = [ordinal, fault](void* d, const void* sr, size_t n) {
    kernel_delay();
    Context& ctx = context(ordinal);
    if (ctx.status() != Error::success) return;
    if (fault) return ctx.fault(Error::illegal_address);
    Arena* da = arena_holding(d);
    Arena* sa = arena_holding(sr);
    if (da) da->open(d);
    if (sa) sa->open(sr);
    std::memcpy(d, sr, n);
    if (sa) sa->close(sr);
    if (da) da->close(d);
  };
  try {
    if (from == kPageable) {
      // Staged at the call (the driver may copy pageable memory to its own buffer before
      // returning); the source must still live until the copy completes. Behind unfinished work
      // CUDA may instead make the call wait for the stream: counted, not waited for (a test
      // holding the stream would hang where it should fail).
      if (to_device && !s.idle()) {
        Arena& a = arena(ordinal);
        std::lock_guard lock(a.counts_mutex);
        ++a.pageable_waits;
      }
      auto staged = std::make_shared<std::vector<std::byte>>(
          static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + bytes);
      s.enqueue([body, dst, src, bytes, staged] {
#if defined(KSTAGE_EMULATED_ASAN)
        if (__asan_region_is_poisoned(const_cast<void*>(src), bytes)) {
          char buf[200];
          std::snprintf(buf, sizeof buf,
                        "memcpy_async: the pageable source %p (%zu bytes) was freed before the "
                        "copy completed",
                        src, bytes);
          violation(buf);
        }
#else
        (void)src;
#endif
        body(dst, staged->data(), bytes);
      });
    } else if (to == kPageable) {
      // To pageable memory: done when the call returns (and a fault meanwhile is its error).
      s.wait_for(s.enqueue([body, dst, src, bytes] { body(dst, src, bytes); }));
      return set_last_error(c.status());
    } else {
      s.enqueue([body, dst, src, bytes] { body(dst, src, bytes); });
    }
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

Error launch_host_func(Stream& s, void (*fn)(void*), void* data) {
  if (!fn) return set_last_error(Error::invalid_value);
  try {
    s.enqueue([fn, data] { fn(data); });
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

}  // namespace kstage::backends::emulated
