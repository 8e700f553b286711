// SPDX-License-Identifier: Apache-2.0
// The GPU backend's shared state and its buffers (backends/gpu/gpu_backend.hpp): GpuShared,
// which outlives the backend while buffers, groups or ops still refer to it, and releases
// what must wait for the device (retire, release_after); the allocator's buffers and plain
// ones; an export's release after its consumer's stream, or after the whole device where the
// consumer named no stream.
#pragma once

#include "backends/gpu/lanes.hpp"
#include "backends/gpu/staging.hpp"
#include "core/backend.hpp"
#include "core/buffer.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace kstage::backends::gpu {

// What outlives the backend while buffers, groups or ops still refer to it:
// the lane (the allocator frees on its stream) and what waits for an event
// before it is released.
template <class RT>
struct GpuShared {
  using Stream = typename RT::Stream;
  using Event = typename RT::Event;

  GpuShared(int32_t ordinal, std::unique_ptr<Lane<RT>> l)
      : device(ordinal), lane(std::move(l)), stream(lane->stream) {}
  ~GpuShared() {
    const DeviceGuard<RT> on_device(device);
    (void)RT::stream_synchronize(stream);
    // Nothing is left here but what raced with ~GpuBackend or could not be handed to the
    // orphans (an orphan is kept alive until its queue is empty): the last chance to wait.
    reap_queue(Reap::Everything);
    // Hand back what this stage can have cached -- at most what it allocated -- and never
    // what other stages use (a short-lived stage does not empty a long-lived one's cache).
    size_t reserved = 0, used = 0;
    if (pool && RT::pool_usage(pool, &reserved, &used) == RT::success) {
      const size_t cached = reserved > used ? reserved - used : 0;
      (void)RT::pool_trim(pool, reserved - std::min(cached, allocated_bytes.load()));
    }
    (void)RT::take_error();
    Lanes<RT>::give(device, std::move(lane));
  }

  // Releases `b` (and `bytes`, and the staging block `staged`) once the work enqueued so far
  // has run. Runs in a buffer's deleter: never throws. What it cannot track (no event, no
  // memory for the list) it waits for instead.
  void retire(std::unique_ptr<core::DeviceBuffer> b, std::vector<std::byte> bytes = {},
              typename PinnedStaging<RT>::Block staged = {}) noexcept {
    const DeviceGuard<RT> on_device(device);
    Retired r{Event{}, std::move(b), std::move(bytes), std::move(staged), nullptr, false};
    bool tracked = false;
    if (RT::event_create(&r.event) == RT::success &&
        RT::event_record(r.event, stream) == RT::success) {
      try {
        std::lock_guard lock(mutex);
        retired.push_back(std::move(r));  // (on failure r still holds everything)
        tracked = true;
      } catch (...) {
      }
    }
    if (!tracked) {  // cannot track it: wait instead
      (void)RT::take_error();
      (void)RT::stream_synchronize(stream);
      // r is whole here: push_back threw, and its strong guarantee leaves the argument as it was.
      // NOLINTNEXTLINE(bugprone-use-after-move)
      if (r.event) (void)RT::event_destroy(r.event);
      (void)RT::take_error();
      return;  // r released here, the work done
    }
    reap(false);
  }
  // Reaps every finished entry, wherever it is in the queue: an entry after a consumer's
  // stream still busy holds back none behind it. all: also waits for what waits on the stage's
  // own stream (never for a consumer's). A reap that is not `all` also reaps the orphans.
  void reap(bool all) noexcept {
    reap_queue(all ? Reap::OwnStream : Reap::Finished);
    if (!all) reap_orphans();
  }
  enum class Reap { Finished, OwnStream, Everything };
  void reap_queue(Reap mode) noexcept {
    std::vector<Retired> done;  // released outside the lock
    try {
      std::lock_guard lock(mutex);
      done.reserve(retired.size());  // (on failure: all left for later)
      size_t kept = 0;               // retired[0, kept): still waiting, in order
      for (size_t i = 0; i < retired.size(); ++i) {
        Retired& r = retired[i];
        const bool wait = mode == Reap::Everything || (mode == Reap::OwnStream && !r.foreign);
        if (wait) (void)RT::event_synchronize(r.event);
        else if (RT::event_query(r.event) == RT::not_ready) {
          if (kept != i) retired[kept] = std::move(r);
          ++kept;
          continue;
        }
        (void)RT::event_destroy(r.event);
        done.push_back(std::move(r));  // reserved: never throws
      }
      retired.erase(retired.begin() + std::ptrdiff_t(kept), retired.end());
    } catch (...) {
    }
    (void)RT::take_error();  // a faulty device reports it at the next checked call
  }
  bool pending() noexcept {
    try {
      std::lock_guard lock(mutex);
      return !retired.empty();
    } catch (...) {
      return true;
    }
  }
  // ~GpuBackend, once the stage's own stream is done: what still waits on a consumer's stream
  // is never waited for there (the consumer may be held for as long as it likes) nor freed
  // early; the queue is handed to the process's orphans, which keep it (and so this object)
  // until every entry's event has completed, reaped by every later reap(false) of any stage of
  // this runtime. Without memory to hand it over, it waits for the consumers instead.
  static void orphan(std::shared_ptr<GpuShared> s) noexcept {
    if (!s->pending()) return;
    Orphans& o = orphans();
    try {
      std::lock_guard lock(o.mutex);
      o.list.push_back(s);
      o.count.store(o.list.size());
      return;
    } catch (...) {
    }
    s->reap_queue(Reap::Everything);
  }
  static void reap_orphans() noexcept {
    Orphans& o = orphans();
    if (o.count.load() == 0) return;
    static thread_local bool reaping = false;  // a release reaped here may retire and reap
    if (reaping) return;
    reaping = true;
    std::vector<std::shared_ptr<GpuShared>> now;  // dropped outside the lock (may destroy)
    try {
      {
        std::lock_guard lock(o.mutex);
        now = o.list;
      }
      for (const auto& s : now) {
        const DeviceGuard<RT> on_device(s->device);
        s->reap_queue(Reap::Finished);
      }
      std::lock_guard lock(o.mutex);
      o.list.erase(
          std::remove_if(o.list.begin(), o.list.end(),
                         [](const std::shared_ptr<GpuShared>& s) { return !s->pending(); }),
          o.list.end());
      o.count.store(o.list.size());
    } catch (...) {
    }
    reaping = false;
  }
  // Drops `held` once the work enqueued on the consumer's stream `s` so far has completed.
  // While the backend lives, an event recorded on `s` is queued for its reaping; once it is
  // gone nothing would reap the queue (and `held` would keep this object), so the consumer's
  // stream is waited for here instead.
  void release_after(core::BufferPtr held, Stream s) noexcept {
    const DeviceGuard<RT> on_device(device);
    Retired r{Event{}, nullptr, {}, {}, std::move(held), s != stream};
    if (backend_alive.load() && RT::event_create(&r.event) == RT::success &&
        RT::event_record(r.event, s) == RT::success) {
      try {
        std::lock_guard lock(mutex);
        retired.push_back(std::move(r));  // (on failure r still holds everything)
        return;
      } catch (...) {
      }
    }
    (void)RT::take_error();  // cannot track it: wait for the consumer instead
    if (r.event) (void)RT::event_destroy(r.event);
    (void)RT::stream_synchronize(s);
    (void)RT::take_error();
  }
  // Drops `held` (null: nothing) once every stream of the device has run the work enqueued on
  // it so far: the release of an export whose consumer named no stream (an Arrow device array's
  // release, a DLPack export for stream -1), which may come right after the consumer enqueued
  // its last read of the memory on any stream. Neither specification gives the producer that
  // stream, nor asks the consumer to synchronise first (the Arrow specification's own example
  // frees with cudaFree, which waits for the device): so the producer waits for the device.
  // Blocks the releasing thread, as cudaFree would; never throws.
  void release_after_device(core::BufferPtr held) noexcept {
    const DeviceGuard<RT> on_device(device);
    if (RT::device_synchronize() != RT::success) (void)RT::take_error();
    held.reset();  // freed on the stage's stream, after everything the device had before
  }
  // The lane's side stream, made the first time it is asked for.
  Result<Stream> side_stream() {
    std::lock_guard lock(mutex);
    if (!lane->side) {
      Stream s{};
      if (const typename RT::Error e = RT::stream_create(&s); e != RT::success) {
        (void)RT::take_error();
        return core::log::reported(
            core::log::Channel::Device, KSTAGE_DEVICE_ERROR,
            error(KSTAGE_DEVICE_ERROR, "%s device %d: stream creation failed: %s", RT::kName,
                  int(device), RT::error_string(e)));
      }
      lane->side = s;
    }
    return lane->side;
  }
  // Counted in the allocator's granularity (256 bytes).
  void allocated(size_t bytes) noexcept { allocated_bytes.fetch_add((bytes + 255) & ~size_t(255)); }

  struct Retired {
    Event event;
    std::unique_ptr<core::DeviceBuffer> buffer;
    std::vector<std::byte> bytes;              // a pageable copy's source
    typename PinnedStaging<RT>::Block staged;  // a pinned copy's source, back to `staging`
    core::BufferPtr held;                      // an export's memory, after its consumer's stream
    bool foreign;                              // recorded on a consumer's stream, not the stage's
  };
  // Stages gone with entries after a consumer's stream still pending (orphan()). Never
  // destroyed: any thread may reap it until the process ends.
  struct Orphans {
    std::mutex mutex;
    std::vector<std::shared_ptr<GpuShared>> list;
    std::atomic<size_t> count{0};
  };
  static Orphans& orphans() noexcept {
    // Made in static storage and never destroyed (no exit-time destructor that a thread still
    // reaping could race): constructing an Orphans allocates nothing, so this cannot throw.
    alignas(Orphans) static unsigned char storage[sizeof(Orphans)];
    static Orphans* const o = ::new (static_cast<void*>(storage)) Orphans;
    return *o;
  }
  int32_t device;
  std::unique_ptr<Lane<RT>> lane;
  Stream stream;
  typename RT::Pool pool{};                // null: the device's default pool
  std::atomic<bool> plain{false};          // pools unsupported: plain allocations
  std::atomic<size_t> allocated_bytes{0};  // by this stage, ever
  std::atomic<bool> backend_alive{true};   // false once ~GpuBackend began
  // Before `retired`, so destroyed after it: its entries give their staging blocks back here.
  PinnedStaging<RT> staging;
  std::mutex mutex;
  std::deque<Retired> retired;
};

// Memory from the stream-ordered allocator, freed on the stage's stream.
template <class RT>
class GpuBuffer final : public core::DeviceBuffer {
 public:
  GpuBuffer(std::shared_ptr<GpuShared<RT>> shared, std::byte* data, size_t size)
      : DeviceBuffer(data, size, DLDevice{DLDeviceType(RT::kDeviceType), shared->device}),
        shared_(std::move(shared)) {
    shared_->allocated(size);
  }
  ~GpuBuffer() override {
    const DeviceGuard<RT> on_device(shared_->device);
    if (RT::free_async(data(), shared_->stream) != RT::success) (void)RT::take_error();
  }

 private:
  std::shared_ptr<GpuShared<RT>> shared_;
};

// A plain allocation (where pools are unsupported): freed at once by its
// destructor, which runs only after an event (GpuShared::retire).
template <class RT>
class PlainBuffer final : public core::DeviceBuffer {
 public:
  PlainBuffer(std::byte* data, size_t size, int32_t device)
      : DeviceBuffer(data, size, DLDevice{DLDeviceType(RT::kDeviceType), device}) {}
  ~PlainBuffer() override {
    if (RT::free(data()) != RT::success) (void)RT::take_error();
  }
};

// An export's release after its consumer's stream (core::StreamRelease).
template <class RT>
class GpuStreamRelease final : public core::StreamRelease {
 public:
  explicit GpuStreamRelease(std::shared_ptr<GpuShared<RT>> shared) : shared_(std::move(shared)) {}
  // The event goes on the stream the consumer named and no other: 1 the legacy default
  // stream, 2 the per-thread default stream (of the thread that runs the deleter, which DLPack
  // consumers run on the thread that used the tensor), else its handle. Never the legacy stream
  // for a consumer that did not name it: while a CUDA graph is captured in global mode (as
  // torch.cuda.graph does), work on the legacy stream from any thread is refused and
  // invalidates the capture, and a deleter may run then (issue #52, defect 6).
  // KSTAGE_STREAM_UNORDERED: no stream was named, so after the whole device
  // (GpuShared::release_after_device; not inside a capture).
  void release_after(core::BufferPtr held, uintptr_t stream) const noexcept override {
    if (stream == KSTAGE_STREAM_UNORDERED) return shared_->release_after_device(std::move(held));
    typename RT::Stream s = stream == 1   ? RT::legacy_stream()
                            : stream == 2 ? RT::per_thread_stream()
                                          : from_handle<typename RT::Stream>(stream);
    shared_->release_after(std::move(held), s);
  }

 private:
  std::shared_ptr<GpuShared<RT>> shared_;
};

}  // namespace kstage::backends::gpu
