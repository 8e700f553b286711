// SPDX-License-Identifier: Apache-2.0
// The emulated device's driver (emulated_device.hpp) in the terms of the
// GPU backend (backends/gpu/): the table CudaRuntime and HipRuntime fill
// with their runtimes' calls. Streams and events are the driver's integer
// handles (as kstage_device_sync_t carries them); kernels run on
// Kokkos::Serial, later, on the stream's worker.
#pragma once

#include "backends/emulated/emulated_device.hpp"
#include "backends/gpu/launch.hpp"
#include "backends/gpu/memory_kind.hpp"

#include <Kokkos_Core.hpp>
#include <dlpack/dlpack.h>

#include <utility>

namespace kstage::backends::emulated {

struct EmulatedRuntime {
  static constexpr const char* kName = "emulated";
  static constexpr int32_t kDeviceType = KSTAGE_EMULATED_DEVICE_TYPE;
  static constexpr int32_t kManagedType = -1;  // no managed memory
  // Its pinned host memory (kstage_emulated_host_malloc) is labelled as CUDA's: DLPack has no
  // pinned type for an extension device.
  static constexpr int32_t kHostPinnedType = kDLCUDAHost;

  using Exec = Kokkos::Serial;
  using Stream = uintptr_t;
  using Event = uintptr_t;
  using Error = emulated::Error;
  using CopyKind = emulated::CopyKind;
  using Pool = emulated::Pool*;
  static constexpr Error success = Error::success;
  static constexpr Error not_ready = Error::not_ready;
  static constexpr CopyKind kHostToDevice = CopyKind::HostToDevice;
  static constexpr CopyKind kDeviceToHost = CopyKind::DeviceToHost;
  static constexpr CopyKind kDefault = CopyKind::Default;

  static const char* error_string(Error e) { return emulated::error_string(e); }
  static Error take_error() { return take_last_error(); }
  static bool is_out_of_memory(Error e) { return e == Error::memory_allocation; }
  static bool is_not_supported(Error e) { return e == Error::not_supported; }
  // Errors that say the device (not the arguments) failed.
  static bool is_device_fault(Error e) {
    return is_sticky(e) || e == Error::launch_out_of_resources;
  }
  static Error device_count(int* n) {
    *n = kDeviceCount;
    return success;
  }
  static Error get_device(int* d) {
    *d = current_device();
    return success;
  }
  static Error set_device(int d) { return set_current_device(d); }
  // Kernels run on Kokkos::Serial: every ordinal can be used in one process.
  static int kokkos_device() { return -1; }
  static Exec make_exec(Stream) { return Exec(); }

  static Error stream_create(Stream* s) {
    try {
      *s = register_stream(std::make_shared<emulated::Stream>(current_device()));
    } catch (...) {
      return set_last_error(Error::memory_allocation);
    }
    return success;
  }
  static Error stream_destroy(Stream s) {
    unregister_stream(s);
    return success;
  }
  static Error stream_synchronize(Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    if (!st) return set_last_error(Error::invalid_handle);
    st->synchronize();
    return set_last_error(context(st->ordinal()).status());
  }
  static Error stream_query(Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    if (!st) return set_last_error(Error::invalid_handle);
    const bool idle = st->idle();  // first: a fault of the work that made it idle is seen
    if (Error f = context(st->ordinal()).status(); f != success) return set_last_error(f);
    return idle ? success : not_ready;
  }
  static Error stream_wait_event(Stream s, Event e) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    auto ev = find_event(e);
    if (!st || !ev) return set_last_error(Error::invalid_handle);
    try {
      ev->wait_on(*st);
    } catch (...) {
      return set_last_error(Error::memory_allocation);
    }
    return success;
  }
  static Stream legacy_stream() { return 1; }
  static Stream per_thread_stream() { return 2; }

  static Error event_create(Event* e) {
    try {
      *e = register_event(std::make_shared<emulated::Event>());
    } catch (...) {
      return set_last_error(Error::memory_allocation);
    }
    return success;
  }
  static Error event_destroy(Event e) {
    unregister_event(e);
    return success;
  }
  static Error event_record(Event e, Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto ev = find_event(e);
    auto st = find_stream(s);
    if (!ev || !st) return set_last_error(Error::invalid_handle);
    if (Error f = context(st->ordinal()).status(); f != success) return set_last_error(f);
    try {
      ev->record(*st);
    } catch (...) {
      return set_last_error(Error::memory_allocation);
    }
    return success;
  }
  static Error event_query(Event e) {
    auto ev = find_event(e);
    if (!ev) return set_last_error(Error::invalid_handle);
    const bool done = ev->query();
    if (ev->ordinal() >= 0)
      if (Error f = context(ev->ordinal()).status(); f != success) return set_last_error(f);
    return done ? success : not_ready;
  }
  static Error event_synchronize(Event e) {
    auto ev = find_event(e);
    if (!ev) return set_last_error(Error::invalid_handle);
    ev->wait(UINT64_MAX);
    return ev->ordinal() >= 0 ? set_last_error(context(ev->ordinal()).status()) : success;
  }

  static Error pool_create(Pool* pool, int device) {
    if (!context(device).pools_supported.load()) return set_last_error(Error::not_supported);
    *pool = make_pool(device);
    return success;
  }
  static Error pool_usage(Pool pool, size_t* reserved, size_t* used) {
    pool->usage(reserved, used);
    return success;
  }
  static Error pool_trim(Pool pool, size_t keep) {
    pool->trim(keep);
    return success;
  }
  static Error malloc_async(void** p, size_t bytes, Pool pool, Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    if (!st) return set_last_error(Error::invalid_handle);
    return (pool ? *pool : default_pool(st->ordinal())).allocate(p, bytes, st);
  }
  static Error free_async(void* p, Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    Pool owner = pool_owning(p);
    if (!st || !owner) return set_last_error(!st ? Error::invalid_handle : Error::invalid_value);
    owner->free(p, st);
    return success;
  }
  // Plain allocations (cudaMalloc / cudaFree): where pools are unsupported.
  static Error malloc(void** p, size_t bytes) {
    Context& c = context(current_device());
    if (c.status() != success) return set_last_error(c.status());
    if (fires(c.fault_alloc)) return set_last_error(Error::memory_allocation);
    *p = arena(current_device()).allocate(bytes);
    return *p ? success : set_last_error(Error::memory_allocation);
  }
  static Error free(void* p) {
    Arena* a = arena_holding(p);
    if (!a) return set_last_error(Error::invalid_value);
    a->free(p);
    return success;
  }
  // Pinned host memory (cudaMallocHost): the pinned arena, read and written in stream order.
  // Counted (kstage_emulated_pinned_allocations): staging is pinned, and recycled.
  static Error host_malloc(void** p, size_t bytes) {
    Arena& a = pinned_arena();
    *p = a.allocate(bytes);
    if (!*p) return set_last_error(Error::memory_allocation);
    std::lock_guard lock(a.counts_mutex);
    ++a.host_allocations;
    return success;
  }
  static Error host_free(void* p) {
    if (!pinned_arena().holds(p)) return set_last_error(Error::invalid_value);
    pinned_arena().free(p);
    return success;
  }
  // Every stream of the current device, then its sticky fault (cudaDeviceSynchronize).
  static Error device_synchronize() {
    if (const Error c = capture_allows_device_wait(); c != success) return set_last_error(c);
    synchronize_device(current_device());
    return set_last_error(context(current_device()).status());
  }
  static Error memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    if (!st) return set_last_error(Error::invalid_handle);
    return emulated::memcpy_async(*st, dst, src, bytes, kind);
  }

  static Error pointer_kind(const void* p, int* ordinal, gpu::MemoryKind* kind) {
    const int32_t where = memory_of(p);
    *ordinal = where >= 0 ? where : -1;
    *kind = where >= 0             ? gpu::MemoryKind::Device
            : where == kPinnedHost ? gpu::MemoryKind::PinnedHost
                                   : gpu::MemoryKind::Pageable;
    return success;
  }

  // The one place kernels are launched: later, on the stream's worker, with
  // the pointers checked and their blocks unpoisoned. Returns what the launch
  // check (cudaGetLastError after a launch) would.
  template <class Kernel>
  static Error launch(const Exec&, Stream s, const gpu::LaunchArgs& args, Kernel&& kernel) {
    if (const Error c = capture_allows(s); c != success) return set_last_error(c);
    auto st = find_stream(s);
    if (!st) return set_last_error(Error::invalid_handle);
    LaunchPointers ptrs;
    try {
      for (const void* p : args.ptrs)
        if (p) ptrs.direct.push_back(p);
      ptrs.rows = args.rows;
      ptrs.row_bytes = args.row_bytes;
      ptrs.n_rows = args.n_rows;
      (void)emulated::launch(*st, args.what, std::move(ptrs),
                             [k = std::forward<Kernel>(kernel)] { k(Exec()); });
    } catch (...) {
      (void)set_last_error(Error::memory_allocation);
    }
    return take_last_error();
  }

  // The driver's per-ordinal counts (kstage_emulated_copy_counts, _upload_count).
  static void count(int device, gpu::Transfer t) {
    Arena& a = arena(device);
    std::lock_guard lock(a.counts_mutex);
    ++(t == gpu::Transfer::HostToDevice   ? a.host_to_device
       : t == gpu::Transfer::DeviceToHost ? a.device_to_host
                                          : a.uploads);
  }
};

}  // namespace kstage::backends::emulated
