// SPDX-License-Identifier: Apache-2.0
// The emulated device's test API (kstage_emulated.h): C entry points over the driver
// (emulated_device.hpp), for tests to allocate device memory, drive streams and events, and
// inject faults.
#include "backends/emulated/emulated_device.hpp"
#include "backends/emulated/emulated_internal.hpp"

#include <cstdint>
#include <memory>
#include <mutex>

// ---------------------------------------------------------------------------
// The test API (kstage_emulated.h)

using namespace kstage::backends::emulated;

extern "C" {

void* kstage_emulated_malloc(int32_t ordinal, size_t bytes) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return nullptr;
  return arena(ordinal).allocate(bytes);
}

void kstage_emulated_free(void* ptr) {
  if (Arena* a = arena_holding(ptr)) a->free(ptr);
}

void* kstage_emulated_host_malloc(size_t bytes) { return pinned_arena().allocate(bytes); }

void kstage_emulated_host_free(void* ptr) {
  if (pinned_arena().holds(ptr)) pinned_arena().free(ptr);
}

int32_t kstage_emulated_ordinal_of(const void* ptr) {
  Arena* a = arena_holding(ptr);
  return a ? a->ordinal() : -1;
}

size_t kstage_emulated_live_bytes(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  // Blocks a pool caches are free memory to its users: not counted.
  size_t cached = 0;
  {
    std::lock_guard lock(g_pools_mutex);
    for (Pool* pool : pools()) {
      if (pool->ordinal() != ordinal) continue;
      size_t reserved = 0, used = 0;
      pool->usage(&reserved, &used);
      cached += reserved - used;
    }
  }
  const size_t live = arena(ordinal).live_bytes();  // (a trim in between: never below 0)
  return live > cached ? live - cached : 0;
}

void kstage_emulated_copy_counts(int32_t ordinal, uint64_t* h2d, uint64_t* d2h) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
  Arena& a = arena(ordinal);
  std::lock_guard lock(a.counts_mutex);
  if (h2d) *h2d = a.host_to_device;
  if (d2h) *d2h = a.device_to_host;
}

uint64_t kstage_emulated_upload_count(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  Arena& a = arena(ordinal);
  std::lock_guard lock(a.counts_mutex);
  return a.uploads;
}

uint64_t kstage_emulated_pageable_waits(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  Arena& a = arena(ordinal);
  std::lock_guard lock(a.counts_mutex);
  return a.pageable_waits;
}

uint64_t kstage_emulated_pinned_allocations(void) {
  Arena& a = pinned_arena();
  std::lock_guard lock(a.counts_mutex);
  return a.host_allocations;
}

size_t kstage_emulated_pinned_live_bytes(void) { return pinned_arena().live_bytes(); }

void kstage_emulated_capture_begin(void) { capture_begin(); }
int kstage_emulated_capture_end(void) { return capture_end() ? 0 : 1; }

uintptr_t kstage_emulated_stream_create(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  return register_stream(std::make_shared<Stream>(ordinal));
}

void kstage_emulated_stream_destroy(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->synchronize();  // a pool may keep the object a while
  unregister_stream(stream);
}

void kstage_emulated_stream_hold(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->hold();
}
void kstage_emulated_stream_release(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->release();
}
// The test API follows a capture's rule as the runtime table does (kstage_emulated_capture_begin):
// a refused call on the legacy stream does nothing (and invalidates the capture).
void kstage_emulated_device_synchronize(int32_t ordinal) {
  if (ordinal >= 0 && ordinal < kDeviceCount) synchronize_device(ordinal);
}

void kstage_emulated_stream_synchronize(uintptr_t stream) {
  if (capture_allows(stream) != Error::success) return;
  if (auto s = find_stream(stream)) s->synchronize();
}
void kstage_emulated_stream_wait_event(uintptr_t stream, uintptr_t event) {
  if (capture_allows(stream) != Error::success) return;
  auto s = find_stream(stream);
  auto e = find_event(event);
  if (s && e) e->wait_on(*s);
}

int kstage_emulated_memcpy_async(uintptr_t stream, void* dst, const void* src, size_t bytes) {
  if (const Error c = capture_allows(stream); c != Error::success) return int(c);
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  const Error e = memcpy_async(*s, dst, src, bytes, CopyKind::Default);
  (void)take_last_error();
  return int(e);
}

int kstage_emulated_memcpy_kind_async(uintptr_t stream, void* dst, const void* src, size_t bytes,
                                      kstage_emulated_copy_kind_t kind) {
  if (const Error c = capture_allows(stream); c != Error::success) return int(c);
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  CopyKind k = CopyKind::Default;
  switch (kind) {
    case KSTAGE_EMULATED_HOST_TO_DEVICE: k = CopyKind::HostToDevice; break;
    case KSTAGE_EMULATED_DEVICE_TO_HOST: k = CopyKind::DeviceToHost; break;
    case KSTAGE_EMULATED_DEVICE_TO_DEVICE: k = CopyKind::DeviceToDevice; break;
    case KSTAGE_EMULATED_COPY_DEFAULT: break;
    default: return int(Error::invalid_value);
  }
  const Error e = memcpy_async(*s, dst, src, bytes, k);
  (void)take_last_error();
  return int(e);
}

int kstage_emulated_memcpy(void* dst, const void* src, size_t bytes) {
  Arena* a = arena_holding(dst);
  if (!a) a = arena_holding(src);
  Stream& s = default_stream(a ? a->ordinal() : 0);
  const Error e = memcpy_async(s, dst, src, bytes, CopyKind::Default);
  (void)take_last_error();
  s.synchronize();
  return int(e);
}

int kstage_emulated_launch_host_func(uintptr_t stream, void (*fn)(void*), void* data) {
  if (const Error c = capture_allows(stream); c != Error::success) return int(c);
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  const Error e = launch_host_func(*s, fn, data);
  (void)take_last_error();
  return int(e);
}

uintptr_t kstage_emulated_event_create(void) { return register_event(std::make_shared<Event>()); }
void kstage_emulated_event_destroy(uintptr_t event) { unregister_event(event); }
void kstage_emulated_event_record(uintptr_t event, uintptr_t stream) {
  if (capture_allows(stream) != Error::success) return;
  auto e = find_event(event);
  auto s = find_stream(stream);
  if (e && s) e->record(*s);
}
int kstage_emulated_event_query(uintptr_t event) {
  auto e = find_event(event);
  return e ? int(e->query()) : 1;
}
void kstage_emulated_event_synchronize(uintptr_t event) {
  if (auto e = find_event(event)) e->wait(UINT64_MAX);
}

void kstage_emulated_set_kernel_delay_us(uint32_t us) { g_delay_us.store(us); }

kstage_emulated_violation_fn kstage_emulated_set_violation_handler(kstage_emulated_violation_fn f) {
  return g_violation.exchange(f);
}

int kstage_emulated_inject_fault(int32_t ordinal, kstage_emulated_fault_t fault, uint32_t nth) {
  if (ordinal < 0 || ordinal >= kDeviceCount || nth == 0) return 0;
  Context& c = context(ordinal);
  switch (fault) {
    case KSTAGE_EMULATED_FAULT_KERNEL: c.fault_kernel.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_COPY: c.fault_copy.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_LAUNCH: c.fault_launch.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_ALLOC: c.fault_alloc.store(nth); return 1;
  }
  return 0;
}

int kstage_emulated_device_status(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  return int(context(ordinal).status());
}

void kstage_emulated_device_reset(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
  Context& c = context(ordinal);
  c.sticky.store(0);
  c.fault_kernel.store(0);
  c.fault_copy.store(0);
  c.fault_launch.store(0);
  c.fault_alloc.store(0);
  c.pools_supported.store(true);
}

void kstage_emulated_set_pools_supported(int32_t ordinal, int supported) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
  context(ordinal).pools_supported.store(supported != 0);
}

}  // extern "C"
