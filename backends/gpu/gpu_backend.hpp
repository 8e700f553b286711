// SPDX-License-Identifier: Apache-2.0
// One backend for the GPU runtimes, written once against a small runtime
// table (backends/cuda/cuda_runtime.hpp, backends/hip/hip_runtime.hpp, and
// the emulated device's backends/emulated/emulated_runtime.hpp, which is how
// CI runs this code), as nanoarrow's device layer keeps one table of
// allocate / copy / event per device. Each stage gets, per device:
//  - a lane: one stream (non-blocking) and the Kokkos execution-space
//    instance on it, taken from a per-device cache and given back when the
//    stage lets go (making a Kokkos 3.4 instance synchronises the device,
//    runs a probe kernel and allocates; destroying one synchronises it);
//    every kernel and copy is enqueued there, in call order;
//  - memory from the runtime's stream-ordered allocator on that stream, from
//    a pool of kstage's per device that keeps freed blocks cached: a block is
//    freed (cudaFreeAsync) after the work enqueued before its last holder let
//    go, and may be reused by later work on the same stream at once. Where
//    pools are unsupported, plain allocations, freed after an event;
//  - adopted DLPack buffers (and plain allocations) released after an event
//    recorded at release time has completed (their deleter must not run
//    while a kernel still reads).
// Kernels are launched in one place, RT::launch, which checks the launch.
// Index, mask and offset arrays come from the engine in host memory and are
// uploaded once per call (core/backend.hpp), through pinned staging blocks
// recycled after their copies' events (staging.hpp), so that an indexed write
// never waits for the stage's queue; a column's cached row map is uploaded
// once and stays on the device (indices_resident).
//
// Errors: a runtime call that fails takes the runtime's error at once (it
// must not be left for the next launch check). Device faults -- a kernel's
// illegal address, a failed launch, a faulty context -- are
// KSTAGE_DEVICE_ERROR naming the runtime's error: on the op whose work
// failed (kstage_wait, kstage_op_error), and on every later call that needs
// the device. Calls whose status is cast to (void) -- releases, device
// guards, fences on failure paths -- have no caller to report to.
//
// Kokkos before 5 runs one GPU per process: a stage may use the device
// Kokkos was initialised on (kstage initialises it on the ordinal of
// kstage_config_t.residency when it does so itself). Another ordinal is
// NOT_SUPPORTED, naming both. (The emulated runtime's kernels run on
// Kokkos::Serial: both its ordinals work.)
//
// The parts, one header each: lanes.hpp (the device guard, lanes and their cache), shared.hpp
// (what outlives the backend, its buffers and releases), completion.hpp (ops' completions and
// the results the host reads back); this file is the backend itself, over them.
#pragma once

#include "backends/device_backend.hpp"
#include "backends/gpu/completion.hpp"
#include "backends/gpu/lanes.hpp"
#include "backends/gpu/launch.hpp"
#include "backends/gpu/memory_kind.hpp"
#include "backends/gpu/shared.hpp"
#include "backends/gpu/staging.hpp"
#include "core/backend.hpp"
#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/kernels/masked_gather.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"
#include "core/kernels/world_transform.hpp"
#include "core/log.hpp"
#include "core/transfer_counts.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace kstage::backends::gpu {

template <class RT>
class GpuBackend final : public DeviceBackend {
  using Exec = typename RT::Exec;
  using Stream = typename RT::Stream;
  using Event = typename RT::Event;
  using Error = typename RT::Error;

 public:
  static Result<std::unique_ptr<core::Backend>> make(int32_t device_id, const kstage_config_t&) {
    const int kokkos_device = RT::kokkos_device();
    if (kokkos_device >= 0 && device_id != kokkos_device)
      return error(KSTAGE_NOT_SUPPORTED,
                   "%s device %d: Kokkos runs on %s device %d in this process, and a Kokkos "
                   "execution space cannot use another (choose the device with "
                   "kstage_config_t.residency before the first stage, or Kokkos' device id)",
                   RT::kName, int(device_id), RT::kName, kokkos_device);
    // The stream and the Kokkos instance's scratch belong to the current device.
    const DeviceGuard<RT> on_device(device_id);
    std::unique_ptr<Lane<RT>> lane;
    KSTAGE_ASSIGN_OR_RETURN(lane, Lanes<RT>::take(device_id));
    auto shared = std::make_shared<GpuShared<RT>>(device_id, std::move(lane));
    shared->pool = device_pool(device_id);
    return std::unique_ptr<core::Backend>(new GpuBackend(std::move(shared)));
  }

  ~GpuBackend() override {
    const DeviceGuard<RT> on_device(shared_->device);
    shared_->backend_alive.store(false);
    fence();
    // Waits for the stage's own stream only: releases after a consumer's stream still busy go
    // to the orphans (GpuShared::orphan), freed once their events complete -- a destroy never
    // waits on a consumer's stream, and never frees what a consumer may still read.
    shared_->reap(true);
    GpuShared<RT>::orphan(shared_);
    GpuShared<RT>::reap_orphans();
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
    const bool device =
        claimed.device_type == RT::kDeviceType || claimed.device_type == RT::kManagedType;
    if (!device && claimed.device_type != RT::kHostPinnedType) return Status::OK();
    int ordinal = -1;
    MemoryKind kind = MemoryKind::Pageable;
    if (Error e = RT::pointer_kind(data, &ordinal, &kind); e != RT::success) {
      (void)RT::take_error();
      return error(KSTAGE_INVALID_ARGUMENT, "%s: %s cannot tell where the data pointer is (%s)",
                   what.c_str(), RT::kName, RT::error_string(e));
    }
    const char* type = core::device_type_name(claimed.device_type);
    if (!device) {
      if (kind == MemoryKind::PinnedHost) return Status::OK();
      return error(KSTAGE_INVALID_ARGUMENT, "%s: DLDevice says %s but the data pointer is %s",
                   what.c_str(), type,
                   kind == MemoryKind::Device ? "device memory" : "not pinned host memory");
    }
    if (kind != MemoryKind::Device)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says %s:%d but the data pointer is host memory", what.c_str(),
                   type, int(claimed.device_id));
    if (ordinal != claimed.device_id)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says device_id %d but the data pointer is memory of %s "
                   "device %d",
                   what.c_str(), int(claimed.device_id), RT::kName, ordinal);
    return Status::OK();
  }

  // A pageable source may be staged by the driver when the copy is called,
  // before the stream reaches it (so before any event the stream waits on).
  bool reads_host_at_call(const void* host) const override {
    int ordinal = -1;
    MemoryKind kind = MemoryKind::Pageable;
    if (RT::pointer_kind(host, &ordinal, &kind) != RT::success) {
      (void)RT::take_error();
      return true;
    }
    return kind == MemoryKind::Pageable;
  }

  Result<core::BufferPtr> allocate(size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    shared_->reap(false);
    void* p = nullptr;
    if (!shared_->plain.load()) {
      const Error e =
          RT::malloc_async(&p, std::max<size_t>(bytes, 1), shared_->pool, shared_->stream);
      if (e == RT::success)  // the allocator aligns to at least 256 bytes (kBufferAlignment)
        return core::BufferPtr(new GpuBuffer<RT>(shared_, static_cast<std::byte*>(p), bytes));
      (void)RT::take_error();  // never left for the next launch check
      if (!RT::is_not_supported(e)) return allocation_failed(e, bytes);
      // no stream-ordered pools here: plain allocations
      if (!shared_->plain.exchange(true))
        KSTAGE_LOG_AT(Device, KSTAGE_LOG_WARNING,
                      "%s device %d: the runtime has no stream-ordered memory pools (%s); "
                      "falling back to plain allocations, which synchronise the device",
                      RT::kName, int(shared_->device), RT::error_string(e));
    }
    if (const Error e = RT::malloc(&p, std::max<size_t>(bytes, 1)); e != RT::success) {
      (void)RT::take_error();
      return allocation_failed(e, bytes);
    }
    return adopt(
        std::make_unique<PlainBuffer<RT>>(static_cast<std::byte*>(p), bytes, shared_->device));
  }

  core::BufferPtr adopt(std::unique_ptr<core::DeviceBuffer> foreign) override {
    std::shared_ptr<GpuShared<RT>> shared = shared_;
    return core::BufferPtr(foreign.release(), [shared](core::DeviceBuffer* b) {
      shared->retire(std::unique_ptr<core::DeviceBuffer>(b));
    });
  }

  Result<core::BufferPtr> upload(const void* host, size_t bytes) override {
    return upload_with(bytes, [host, bytes](std::byte* to) { std::memcpy(to, host, bytes); });
  }

  // Within this backend's memory, which includes pinned host and managed memory: the copy
  // kind comes from the pointers (unified addressing).
  void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (bytes) must(RT::memcpy_async(dst, src, bytes, RT::kDefault, shared_->stream), "copy");
  }
  void copy_from_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (!bytes) return;
    must(RT::memcpy_async(dst, src, bytes, RT::kHostToDevice, shared_->stream), "copy to device");
    ++core::transfer_counts().host_to_device;
    RT::count(shared_->device, Transfer::HostToDevice);
  }
  void copy_to_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (!bytes) return;
    must(RT::memcpy_async(dst, src, bytes, RT::kDeviceToHost, shared_->stream), "copy to host");
    ++core::transfer_counts().device_to_host;
    RT::count(shared_->device, Transfer::DeviceToHost);
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
    launch(LaunchArgs{"row_copy", {k.dst, k.src, k.dst_index, k.src_index}},
           [k](const Exec& exec) { core::kernels::row_copy(exec, k); });
  }

  Result<std::shared_ptr<const core::IndexCheck>> checked_gather_resident(
      const core::kernels::RowCopy& c, uint64_t src_rows) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (c.n == 0 || c.row_bytes == 0) return core::IndexCheck::passed();
    const bool wide = c.src_index64 != nullptr;
    core::BufferPtr report;
    KSTAGE_ASSIGN_OR_RETURN(report, allocate((wide ? 2 : 1) * sizeof(uint64_t)));
    auto* word = reinterpret_cast<uint64_t*>(report->data());
    core::kernels::RowCopy k = c;
    k.indices_resident = true;
    const void* index = wide ? static_cast<const void*>(k.src_index64) : k.src_index;
    launch(LaunchArgs{"checked_gather", {k.dst, k.src, index, word}},
           [k, src_rows, word](const Exec& exec) {
             core::kernels::checked_gather_report(exec, k, src_rows, word);
           });
    return std::shared_ptr<const core::IndexCheck>(
        std::make_shared<GpuIndexCheck<RT>>(shared_, std::move(report), record_event(), wide));
  }

  Result<std::shared_ptr<const core::MaskSelection>> masked_gather_resident(
      const core::kernels::MaskedGather& c) override {
    const DeviceGuard<RT> on_device(shared_->device);
    const size_t words = (c.n + 63) / 64;
    core::BufferPtr copy;
    KSTAGE_ASSIGN_OR_RETURN(copy, allocate(std::max<size_t>(words, 1) * sizeof(uint64_t)));
    copy_bytes(copy->data(), reinterpret_cast<const std::byte*>(c.mask), words * sizeof(uint64_t));
    core::kernels::MaskedGather k = c;
    k.mask = reinterpret_cast<const uint64_t*>(copy->data());
    k.selected = nullptr;  // rows only: the host reads the selection from the mask's copy
    if (k.n > 0)
      launch(LaunchArgs{"masked_gather", {k.mask, k.dst, k.src}},
             [k](const Exec& exec) { core::kernels::masked_gather(exec, k); });
    return std::shared_ptr<const core::MaskSelection>(
        std::make_shared<GpuMaskSelection<RT>>(shared_, std::move(copy), words, record_event()));
  }

  void ragged_copy(const core::kernels::RaggedCopy& c, size_t word) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (c.n == 0) return;
    // One upload for the three per-row arrays, packed straight into the staging block.
    core::BufferPtr arrays = or_throw(
        upload_with(3 * c.n * sizeof(uint64_t), [&c](std::byte* to) { pack_ragged(c, to); }));
    const core::kernels::RaggedCopy k =
        with_packed(c, reinterpret_cast<const uint64_t*>(arrays->data()));
    launch(LaunchArgs{"ragged_copy", {k.dst, k.dst_offsets}, k.src_rows, k.bytes, k.n},
           [k, word](const Exec& exec) { core::kernels::ragged_copy(exec, k, word); });
  }

  void strided_copy(const core::kernels::StridedCopy& c) override {
    const DeviceGuard<RT> on_device(shared_->device);
    launch(LaunchArgs{"strided_copy", {c.dst, c.src}},
           [c](const Exec& exec) { core::kernels::strided_copy(exec, c); });
  }

  void world_transform(const core::kernels::WorldTransform& k) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (k.n == 0) return;
    // The levels' bounds are host memory the launch reads when it enqueues its passes: the
    // kernel keeps its own copy (a runtime may run the launch later: the emulated one does).
    std::vector<size_t> levels;
    if (k.levels > 0) levels.assign(k.level_offsets, k.level_offsets + k.levels + 1);
    launch(LaunchArgs{"world_transform",
                      {k.world, k.local, k.reset, k.old_world, k.local_rows, k.reset_rows,
                       k.parents, k.scratch}},
           [k, levels = std::move(levels)](const Exec& exec) {
             core::kernels::WorldTransform with = k;
             with.level_offsets = levels.empty() ? nullptr : levels.data();
             core::kernels::world_transform(exec, with, false);
           });
  }

  Status order_after(const kstage_device_sync_t& producer, const char* field) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (producer.event != 0) {
      return check(RT::stream_wait_event(shared_->stream, from_handle<Event>(producer.event)),
                   field, ".event", producer.event);
    }
    if (producer.stream != 0) {
      // Everything enqueued on that stream so far: an event recorded there now.
      Stream s = stream_value(producer.stream);
      Event e{};
      KSTAGE_RETURN_NOT_OK(check(RT::event_create(&e), field, ".stream", producer.stream));
      Status st = [&]() -> Status {
        KSTAGE_RETURN_NOT_OK(check(RT::event_record(e, s), field, ".stream", producer.stream));
        return check(RT::stream_wait_event(shared_->stream, e), field, ".stream", producer.stream);
      }();
      (void)RT::event_destroy(e);  // released once the wait is resolved
      return st;
    }
    return Status::OK();
  }

  Status record_into(const kstage_device_sync_t& consumer, const char* field) override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (consumer.event != 0)
      KSTAGE_RETURN_NOT_OK(
          check(RT::event_record(from_handle<Event>(consumer.event), shared_->stream), field,
                ".event", consumer.event));
    if (consumer.stream != 0) {
      Event e{};
      KSTAGE_RETURN_NOT_OK(check(RT::event_create(&e), field, ".stream", consumer.stream));
      Status st = [&]() -> Status {
        KSTAGE_RETURN_NOT_OK(
            check(RT::event_record(e, shared_->stream), field, ".stream", consumer.stream));
        return check(RT::stream_wait_event(stream_value(consumer.stream), e), field, ".stream",
                     consumer.stream);
      }();
      (void)RT::event_destroy(e);
      return st;
    }
    return Status::OK();
  }

  // Null when the stream has run everything (the work is complete: {0, 0}).
  core::CompletionPtr record() override {
    const DeviceGuard<RT> on_device(shared_->device);
    shared_->reap(false);
    if (const Error q = RT::stream_query(shared_->stream); q == RT::success) return nullptr;
    else if (q != RT::not_ready) must(q, "stream query");
    return std::make_shared<GpuCompletion<RT>>(shared_, record_event());
  }

  std::shared_ptr<const core::StreamRelease> stream_release() override {
    return std::make_shared<GpuStreamRelease<RT>>(shared_);
  }

  void fence() override {
    const DeviceGuard<RT> on_device(shared_->device);
    // A fault here has no call to fail (a stage's destruction, a release): said on the log
    // alone. A faulty device reports it again at its next checked call.
    if (const Error e = RT::stream_synchronize(shared_->stream); e != RT::success) {
      (void)RT::take_error();
      KSTAGE_LOG_AT(Device, KSTAGE_LOG_ERROR,
                    "%s device %d: a fault in device work, found while waiting for the stage's "
                    "stream to drain (no call reports it): %s",
                    RT::kName, int(shared_->device), RT::error_string(e));
    }
    shared_->reap(false);
  }
  Status finish() override {
    const DeviceGuard<RT> on_device(shared_->device);
    const Error e = RT::stream_synchronize(shared_->stream);
    shared_->reap(false);
    return device_status(e, "stream synchronize");
  }

 private:
  explicit GpuBackend(std::shared_ptr<GpuShared<RT>> shared) : shared_(std::move(shared)) {}

  // The one place kernels are launched: RT::launch enqueues the kernel on the
  // lane's instance and returns the launch's error, which is a device fault.
  template <class Kernel>
  void launch(const LaunchArgs& args, Kernel&& kernel) {
    must(RT::launch(shared_->lane->exec, shared_->stream, args, std::forward<Kernel>(kernel)),
         args.what);
  }

  // An event recorded after all work enqueued so far (a device fault when it cannot be).
  Event record_event() {
    Event e{};
    must(RT::event_create(&e), "event creation");
    if (const Error r = RT::event_record(e, shared_->stream); r != RT::success) {
      (void)RT::event_destroy(e);
      must(r, "event record");
    }
    return e;
  }

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
      (void)RT::take_error();
      pool = {};
    }
    return pools.emplace(device, pool).first->second;
  }

  // The stream values of kstage_device_sync_t (kstage.h): 1 the legacy
  // default stream, 2 the per-thread default stream, else a handle.
  static Stream stream_value(uintptr_t v) {
    if (v == 1) return RT::legacy_stream();
    if (v == 2) return RT::per_thread_stream();
    return from_handle<Stream>(v);
  }

  Status allocation_failed(Error e, size_t bytes) const {
    if (RT::is_out_of_memory(e))
      return out_of_memory("%s device %d: allocation of %zu bytes failed: %s", RT::kName,
                           int(shared_->device), bytes, RT::error_string(e));
    return core::log::reported(
        core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
        error(KSTAGE_DEVICE_ERROR, "%s device %d: allocation of %zu bytes failed: %s", RT::kName,
              int(shared_->device), bytes, RT::error_string(e)));
  }
  // A runtime's answer to a call with the caller's handles: a device fault is
  // DEVICE_ERROR, anything else the caller's value (INVALID_ARGUMENT naming it).
  Status check(Error e, const char* field, const char* member, uintptr_t value) const {
    if (e == RT::success) return Status::OK();
    (void)RT::take_error();  // the caller's next runtime check must not see ours
    if (RT::is_device_fault(e))
      return core::log::reported(
          core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
          error(KSTAGE_DEVICE_ERROR, "%s%s 0x%llx: the %s device %d failed: %s", field, member,
                (unsigned long long)value, RT::kName, int(shared_->device), RT::error_string(e)));
    return error(KSTAGE_INVALID_ARGUMENT, "%s%s 0x%llx: %s refused it: %s", field, member,
                 (unsigned long long)value, RT::kName, RT::error_string(e));
  }
  // A call with kstage's own valid handles and pointers: any failure is the device's.
  Status device_status(Error e, const char* what) const {
    if (e == RT::success) return Status::OK();
    (void)RT::take_error();
    if (RT::is_out_of_memory(e))
      return out_of_memory("%s %s failed: %s", RT::kName, what, RT::error_string(e));
    return core::log::reported(core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
                               error(KSTAGE_DEVICE_ERROR, "%s device %d: %s failed: %s", RT::kName,
                                     int(shared_->device), what, RT::error_string(e)));
  }
  // Enqueueing failed with a valid stream and valid pointers: a device fault
  // (the engine's API guard turns the exception into KSTAGE_DEVICE_ERROR).
  void must(Error e, const char* what) const {
    if (e != RT::success) {
      (void)RT::take_error();
      if (RT::is_out_of_memory(e)) throw std::bad_alloc();
      KSTAGE_LOG_AT(Device, KSTAGE_LOG_ERROR, "%s device %d: %s failed: %s", RT::kName,
                    int(shared_->device), what, RT::error_string(e));
      throw DeviceFault(std::string(RT::kName) + " " + what + " failed: " + RT::error_string(e));
    }
  }
  // Device memory of `bytes` that `fill(host bytes)` writes, copied up on the stage's stream:
  // from a pinned staging block, handed back once the copy is done (retire), else -- no pinned
  // memory to be had -- from a pageable copy of our own, which the runtime may read after the
  // call returns, and whose copy may wait for the stream.
  template <class Fill>
  Result<core::BufferPtr> upload_with(size_t bytes, Fill&& fill) {
    const DeviceGuard<RT> on_device(shared_->device);
    core::BufferPtr b;
    KSTAGE_ASSIGN_OR_RETURN(b, allocate(bytes));  // (reaps: finished blocks come back first)
    typename PinnedStaging<RT>::Block staged = shared_->staging.take(bytes);
    std::vector<std::byte> snapshot;
    if (!staged) snapshot.resize(bytes);
    std::byte* from = staged ? staged.data() : snapshot.data();
    fill(from);
    // A failed call enqueued nothing: the staging block goes back at once.
    KSTAGE_RETURN_NOT_OK(
        device_status(RT::memcpy_async(b->data(), from, bytes, RT::kHostToDevice, shared_->stream),
                      "index upload"));
    shared_->retire(nullptr, std::move(snapshot), std::move(staged));
    ++core::transfer_counts().index_uploads;
    RT::count(shared_->device, Transfer::IndexUpload);
    return b;
  }
  core::BufferPtr upload_or_throw(const void* host, size_t bytes) {
    return or_throw(upload(host, bytes));
  }
  static core::BufferPtr or_throw(Result<core::BufferPtr> b) {
    if (b.ok()) return b.value();
    if (b.status().code() == KSTAGE_OUT_OF_MEMORY) throw std::bad_alloc();
    throw DeviceFault(b.status().message());
  }
  const uint32_t* upload_indices(const uint32_t* host, size_t n, core::BufferPtr& keep) {
    keep = upload_or_throw(host, n * sizeof(uint32_t));
    return reinterpret_cast<const uint32_t*>(keep->data());
  }

  std::shared_ptr<GpuShared<RT>> shared_;
};

// The factory of a runtime's backend (backends/<name>/<name>_backend.cpp).
template <class RT>
int32_t device_count() {
  int n = 0;
  return RT::device_count(&n) == RT::success ? int32_t(n) : 0;
}

}  // namespace kstage::backends::gpu
