// SPDX-License-Identifier: Apache-2.0
// One backend for the GPU runtimes (CUDA and HIP), written once against a
// small runtime table (backends/cuda/cuda_runtime.hpp, backends/hip/hip_runtime.hpp),
// as nanoarrow's device layer keeps one table of allocate / copy / event per
// device. Each stage gets, per device:
//  - one stream of its own (non-blocking) and the Kokkos execution-space
//    instance on it; every kernel and copy is enqueued there, in call order;
//  - memory from the runtime's stream-ordered allocator on that stream, from
//    a pool of kstage's per device that keeps freed blocks cached: a block is
//    freed (cudaFreeAsync) after the work enqueued before its last holder let
//    go, and may be reused by later work on the same stream at once;
//  - adopted DLPack buffers released after an event recorded at release time
//    has completed (their deleter must not run while a kernel still reads).
// Index, mask and offset arrays come from the engine in host memory and are
// uploaded once per call (core/backend.hpp); a column's cached row map is
// uploaded once and stays on the device (indices_resident). Calls whose status
// is cast to (void) -- releases, device guards, fences -- have no caller to
// report to; a sticky runtime error surfaces at the next checked call.
//
// Kokkos before 5 runs one GPU per process: a stage may use the device
// Kokkos was initialised on (kstage initialises it on the ordinal of
// kstage_config_t.residency when it does so itself). Another ordinal is
// NOT_SUPPORTED, naming both.
#pragma once

#include "backends/device_backend.hpp"
#include "backends/gpu/memory_kind.hpp"
#include "core/backend.hpp"
#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"
#include "core/transfer_counts.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kstage::backends::gpu {

template <class RT>
class GpuBackend;

// Makes `device` the calling thread's current device for a scope and puts
// the caller's back after: runtime calls act on the current device, kstage
// may be called from any thread, and the application's choice is its own.
template <class RT>
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (RT::get_device(&previous_) != RT::success) previous_ = -1;
    if (previous_ != device) (void)RT::set_device(device);
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && RT::get_device(&now) == RT::success && now != previous_)
      (void)RT::set_device(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// What outlives the backend while buffers, groups or ops still refer to it:
// the stream (the allocator frees on it) and adopted buffers awaiting release.
template <class RT>
struct GpuShared {
  using Stream = typename RT::Stream;
  using Event = typename RT::Event;

  explicit GpuShared(int32_t ordinal) : device(ordinal) {}
  ~GpuShared() {
    if (!stream) return;
    const DeviceGuard<RT> on_device(device);
    (void)RT::stream_synchronize(stream);
    reap(/*all=*/true);
    (void)RT::stream_destroy(stream);
    if (pool) (void)RT::pool_trim(pool);  // hand unused cached memory back
  }

  // An adopted buffer whose last holder let go: released once the work
  // enqueued so far has run.
  // Runs in a buffer's deleter: never throws. What it cannot track (no event, no memory for
  // the list) it waits for instead.
  void retire(std::unique_ptr<core::DeviceBuffer> b) noexcept {
    const DeviceGuard<RT> on_device(device);
    Event e{};
    if (RT::event_create(&e) == RT::success && RT::event_record(e, stream) == RT::success) {
      try {
        std::lock_guard lock(mutex);
        retired.emplace_back(e, std::move(b));  // (on failure b still holds it)
        e = Event{};
      } catch (...) {
      }
    }
    if (b) {  // cannot track it: wait instead
      (void)RT::stream_synchronize(stream);
      b.reset();
      if (e) (void)RT::event_destroy(e);
      return;
    }
    reap(false);
  }
  void reap(bool all) noexcept {
    std::vector<std::unique_ptr<core::DeviceBuffer>> done;  // released outside the lock
    try {
      std::lock_guard lock(mutex);
      while (!retired.empty()) {
        Event e = retired.front().first;
        if (all) (void)RT::event_synchronize(e);
        else if (RT::event_query(e) == RT::not_ready) break;
        done.push_back(std::move(retired.front().second));  // (on failure: left for later)
        (void)RT::event_destroy(e);
        retired.pop_front();
      }
    } catch (...) {
    }
  }

  int32_t device;
  Stream stream{};
  typename RT::Pool pool{};  // null: the device's default pool
  std::mutex mutex;
  std::deque<std::pair<Event, std::unique_ptr<core::DeviceBuffer>>> retired;
};

// Memory from the stream-ordered allocator, freed on the stage's stream.
template <class RT>
class GpuBuffer final : public core::DeviceBuffer {
 public:
  GpuBuffer(std::shared_ptr<GpuShared<RT>> shared, std::byte* data, size_t size)
      : DeviceBuffer(data, size, DLDevice{DLDeviceType(RT::kDeviceType), shared->device}),
        shared_(std::move(shared)) {}
  ~GpuBuffer() override {
    const DeviceGuard<RT> on_device(shared_->device);
    (void)RT::free_async(data(), shared_->stream);
  }

 private:
  std::shared_ptr<GpuShared<RT>> shared_;
};

template <class RT>
class GpuCompletion final : public core::Completion {
 public:
  GpuCompletion(std::shared_ptr<GpuShared<RT>> shared, typename RT::Event event)
      : shared_(std::move(shared)), event_(event) {}
  ~GpuCompletion() override { (void)RT::event_destroy(event_); }
  // Anything but "not ready" is done: after a device fault the event never
  // succeeds, and the next enqueue reports the fault (KSTAGE_DEVICE_ERROR).
  bool done() const override { return RT::event_query(event_) != RT::not_ready; }
  bool wait(uint64_t timeout_ns) const override {
    if (timeout_ns == KSTAGE_TIMEOUT_INFINITE) {
      if (RT::event_synchronize(event_) != RT::success) RT::clear_error();
      return true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout_ns);
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }
  kstage_device_sync_t sync() const override {
    return {reinterpret_cast<uintptr_t>(shared_->stream), reinterpret_cast<uintptr_t>(event_)};
  }

 private:
  std::shared_ptr<GpuShared<RT>> shared_;
  typename RT::Event event_;
};

template <class RT>
class GpuBackend final : public DeviceBackend {
  using Exec = typename RT::Exec;
  using Stream = typename RT::Stream;
  using Event = typename RT::Event;

 public:
  static Result<std::unique_ptr<core::Backend>> make(int32_t device_id, const kstage_config_t&) {
    const int kokkos_device = RT::kokkos_device();
    if (device_id != kokkos_device)
      return error(KSTAGE_NOT_SUPPORTED,
                   "%s device %d: Kokkos runs on %s device %d in this process, and a Kokkos "
                   "execution space cannot use another (choose the device with "
                   "kstage_config_t.residency before the first stage, or Kokkos' device id)",
                   RT::kName, int(device_id), RT::kName, kokkos_device);
    // The stream and the Kokkos instance's scratch belong to the current device.
    const DeviceGuard<RT> on_device(device_id);
    auto shared = std::make_shared<GpuShared<RT>>(device_id);
    shared->pool = device_pool(device_id);
    if (typename RT::Error e = RT::stream_create(&shared->stream); e != RT::success) {
      RT::clear_error();
      return error(KSTAGE_DEVICE_ERROR, "%s device %d: stream creation failed: %s", RT::kName,
                   int(device_id), RT::error_string(e));
    }
    return std::unique_ptr<core::Backend>(new GpuBackend(std::move(shared)));
  }

  ~GpuBackend() override {
    const DeviceGuard<RT> on_device(shared_->device);
    fence();
    shared_->reap(true);
  }

  DLDevice device() const override {
    return DLDevice{DLDeviceType(RT::kDeviceType), shared_->device};
  }
  // Device memory of this ordinal, managed memory, and pinned host memory
  // (kernels read it over the bus).
  bool can_access(DLDevice d) const override {
    if (d.device_type == RT::kDeviceType || d.device_type == RT::kManagedType)
      return d.device_id == shared_->device;
    return d.device_type == RT::kHostPinnedType;
  }
  bool synchronous() const override { return false; }

  // The runtime knows where each pointer is: device memory must be of the
  // claimed ordinal, and pinned memory really pinned (a kernel here reads it
  // in place; pageable memory would fault the device).
  Status check_memory(const void* data, DLDevice claimed, const std::string& what) const override {
    const bool device = claimed.device_type == RT::kDeviceType || claimed.device_type == RT::kManagedType;
    if (!device && claimed.device_type != RT::kHostPinnedType) return Status::OK();
    int ordinal = -1;
    MemoryKind kind = MemoryKind::Pageable;
    if (typename RT::Error e = RT::pointer_kind(data, &ordinal, &kind); e != RT::success)
      return error(KSTAGE_INVALID_ARGUMENT, "%s: %s cannot tell where the data pointer is (%s)",
                   what.c_str(), RT::kName, RT::error_string(e));
    const char* type = core::device_type_name(claimed.device_type);
    if (!device) {
      if (kind == MemoryKind::PinnedHost) return Status::OK();
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says %s but the data pointer is %s", what.c_str(), type,
                   kind == MemoryKind::Device ? "device memory" : "not pinned host memory");
    }
    if (kind != MemoryKind::Device)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says %s:%d but the data pointer is host memory", what.c_str(), type,
                   int(claimed.device_id));
    if (ordinal != claimed.device_id)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says device_id %d but the data pointer is memory of %s "
                   "device %d",
                   what.c_str(), int(claimed.device_id), RT::kName, ordinal);
    return Status::OK();
  }

  Result<core::BufferPtr> allocate(size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    shared_->reap(false);
    void* p = nullptr;
    if (typename RT::Error e =
            RT::malloc_async(&p, std::max<size_t>(bytes, 1), shared_->pool, shared_->stream);
        e != RT::success)
      return out_of_memory("%s device %d: allocation of %zu bytes failed: %s",
                   RT::kName, int(shared_->device), bytes, RT::error_string(e));
    // The allocator aligns to at least 256 bytes (kBufferAlignment holds).
    return core::BufferPtr(new GpuBuffer<RT>(shared_, static_cast<std::byte*>(p), bytes));
  }

  core::BufferPtr adopt(std::unique_ptr<core::DeviceBuffer> foreign) override {
    std::shared_ptr<GpuShared<RT>> shared = shared_;
    return core::BufferPtr(foreign.release(), [shared](core::DeviceBuffer* b) {
      shared->retire(std::unique_ptr<core::DeviceBuffer>(b));
    });
  }

  Result<core::BufferPtr> upload(const void* host, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    core::BufferPtr b;
    KSTAGE_ASSIGN_OR_RETURN(b, allocate(bytes));
    // From a pageable copy of our own: the runtime stages pageable memory
    // before the call returns, so the caller may free `host` at once -- even
    // pinned memory, which a direct asynchronous copy would read later.
    const std::vector<std::byte> snapshot(static_cast<const std::byte*>(host),
                                          static_cast<const std::byte*>(host) + bytes);
    KSTAGE_RETURN_NOT_OK(check(RT::memcpy_async(b->data(), snapshot.data(), bytes,
                                                RT::kHostToDevice, shared_->stream),
                               "index upload"));
    ++core::transfer_counts().index_uploads;
    return b;
  }

  void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (bytes) must(RT::memcpy_async(dst, src, bytes, RT::kDeviceToDevice, shared_->stream), "copy");
  }
  void copy_from_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (!bytes) return;
    ++core::transfer_counts().host_to_device;
    must(RT::memcpy_async(dst, src, bytes, RT::kHostToDevice, shared_->stream), "copy to device");
  }
  void copy_to_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (!bytes) return;
    ++core::transfer_counts().device_to_host;
    must(RT::memcpy_async(dst, src, bytes, RT::kDeviceToHost, shared_->stream), "copy to host");
  }

  void row_copy(const core::kernels::RowCopy& c) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (c.n == 0 || c.row_bytes == 0) return;
    core::kernels::RowCopy k = c;
    core::BufferPtr dst_index, src_index;  // freed in stream order after the kernel
    if (!c.indices_resident) {
      if (c.dst_index) k.dst_index = upload_indices(c.dst_index, c.n, dst_index);
      if (c.src_index) k.src_index = upload_indices(c.src_index, c.n, src_index);
    }
    core::kernels::row_copy(exec_, k);
  }

  void ragged_copy(const core::kernels::RaggedCopy& c, size_t word) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (c.n == 0) return;
    // One upload for the three per-row arrays.
    const std::vector<uint64_t> host = pack_ragged(c);
    core::BufferPtr arrays = upload_or_throw(host.data(), host.size() * sizeof(uint64_t));
    core::kernels::ragged_copy(
        exec_, with_packed(c, reinterpret_cast<const uint64_t*>(arrays->data())), word);
  }

  void strided_copy(const core::kernels::StridedCopy& c) override {
    const DeviceGuard<RT> on_device(shared_->device);
    core::kernels::strided_copy(exec_, c);
  }

  Status order_after(const kstage_device_sync_t& producer, const char* field) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (producer.event != 0) {
      return check(RT::stream_wait_event(shared_->stream, reinterpret_cast<Event>(producer.event)),
                   field, ".event");
    }
    if (producer.stream != 0) {
      // Everything enqueued on that stream so far: an event recorded there now.
      Stream s = stream_value(producer.stream);
      Event e{};
      KSTAGE_RETURN_NOT_OK(check(RT::event_create(&e), field, ".stream"));
      const Status st = [&]() -> Status {
        KSTAGE_RETURN_NOT_OK(check(RT::event_record(e, s), field, ".stream"));
        return check(RT::stream_wait_event(shared_->stream, e), field, ".stream");
      }();
      (void)RT::event_destroy(e);  // released once the wait is resolved
      return st;
    }
    return Status::OK();
  }

  Status record_into(const kstage_device_sync_t& consumer, const char* field) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (consumer.event != 0)
      KSTAGE_RETURN_NOT_OK(check(
          RT::event_record(reinterpret_cast<Event>(consumer.event), shared_->stream), field,
          ".event"));
    if (consumer.stream != 0) {
      Event e{};
      KSTAGE_RETURN_NOT_OK(check(RT::event_create(&e), field, ".stream"));
      const Status st = [&]() -> Status {
        KSTAGE_RETURN_NOT_OK(check(RT::event_record(e, shared_->stream), field, ".stream"));
        return check(RT::stream_wait_event(stream_value(consumer.stream), e), field, ".stream");
      }();
      (void)RT::event_destroy(e);
      return st;
    }
    return Status::OK();
  }

  core::CompletionPtr record() override {
    const DeviceGuard<RT> on_device(shared_->device);
    shared_->reap(false);
    Event e{};
    if (RT::event_create(&e) != RT::success) {
      fence();  // no event to hand out: complete the work instead
      return nullptr;
    }
    if (RT::event_record(e, shared_->stream) != RT::success) {
      (void)RT::event_destroy(e);
      fence();
      return nullptr;
    }
    return std::make_shared<GpuCompletion<RT>>(shared_, e);
  }

  void fence() override {
    const DeviceGuard<RT> on_device(shared_->device);
    (void)RT::stream_synchronize(shared_->stream);
    shared_->reap(false);
  }

 private:
  explicit GpuBackend(std::shared_ptr<GpuShared<RT>> shared)
      : shared_(std::move(shared)), exec_(RT::make_exec(shared_->stream)) {}

  // kstage's pool on `device`, made once per process and kept (null when the
  // runtime cannot make one: the default pool then).
  static typename RT::Pool device_pool(int device) {
    static std::mutex mutex;
    static std::map<int, typename RT::Pool> pools;
    std::lock_guard lock(mutex);
    auto it = pools.find(device);
    if (it != pools.end()) return it->second;
    typename RT::Pool pool{};
    if (RT::pool_create(&pool, device) != RT::success) {
      RT::clear_error();
      pool = {};
    }
    return pools.emplace(device, pool).first->second;
  }

  // The stream values of kstage_device_sync_t (kstage.h): 1 the legacy
  // default stream, 2 the per-thread default stream, else a handle.
  static Stream stream_value(uintptr_t v) {
    if (v == 1) return RT::legacy_stream();
    if (v == 2) return RT::per_thread_stream();
    return reinterpret_cast<Stream>(v);
  }

  static Status check(typename RT::Error e, const char* field, const char* member = "") {
    if (e == RT::success) return Status::OK();
    RT::clear_error();  // the caller's next runtime check must not see ours
    return error(KSTAGE_INVALID_ARGUMENT, "%s%s: %s refused it: %s", field, member, RT::kName,
                 RT::error_string(e));
  }
  // Enqueueing failed with a valid stream and valid pointers: a device fault
  // (the engine's API guard turns the exception into KSTAGE_DEVICE_ERROR).
  static void must(typename RT::Error e, const char* what) {
    if (e != RT::success) {
      RT::clear_error();
      throw DeviceFault(std::string(RT::kName) + " " + what + " failed: " + RT::error_string(e));
    }
  }
  core::BufferPtr upload_or_throw(const void* host, size_t bytes) {
    Result<core::BufferPtr> b = upload(host, bytes);
    if (!b.ok()) throw std::bad_alloc();
    return b.value();
  }
  const uint32_t* upload_indices(const uint32_t* host, size_t n, core::BufferPtr& keep) {
    keep = upload_or_throw(host, n * sizeof(uint32_t));
    return reinterpret_cast<const uint32_t*>(keep->data());
  }

  std::shared_ptr<GpuShared<RT>> shared_;
  Exec exec_;
};

// The factory of a runtime's backend (backends/<name>/<name>_backend.cpp).
template <class RT>
int32_t device_count() {
  int n = 0;
  return RT::device_count(&n) == RT::success ? int32_t(n) : 0;
}

}  // namespace kstage::backends::gpu
