// SPDX-License-Identifier: Apache-2.0
// The emulated device as a kstage backend: one stream per stage (its
// "execution-space instance"), memory in the ordinal's arena, the
// core/kernels functors run on Kokkos::Serial by the stream's worker, and
// host index arrays uploaded once per call. Buffers are released in stream
// order: a block returns to the arena only after the work enqueued before
// its last holder let go has run.
#include "backends/emulated/emulated_backend.hpp"

#include "backends/device_backend.hpp"
#include "backends/emulated/emulated_device.hpp"
#include "core/transfer_counts.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>
#include <vector>

namespace kstage::backends::emulated {
namespace {

using Exec = Kokkos::Serial;

class EmulatedBuffer final : public core::DeviceBuffer {
 public:
  EmulatedBuffer(Arena& arena, std::byte* data, size_t size)
      : DeviceBuffer(data, size, DLDevice{DLDeviceType(kDeviceType), arena.ordinal()}),
        arena_(arena) {}
  ~EmulatedBuffer() override { arena_.free(data()); }

 private:
  Arena& arena_;
};

// What outlives the backend while buffers, groups or ops still refer to it:
// the stream, and buffers waiting for the work before their release.
struct Shared {
  explicit Shared(int32_t ordinal)
      : arena(emulated::arena(ordinal)), stream(std::make_shared<Stream>(ordinal)) {
    stream_handle = register_stream(stream);
  }
  ~Shared() {
    stream->synchronize();
    retired.clear();
    unregister_stream(stream_handle);
  }

  // Runs in a buffer's deleter: never throws. With no memory to track it, it waits for the
  // work in flight instead.
  void retire(std::unique_ptr<core::DeviceBuffer> b) noexcept {
    // Its last holder let go, so no new work can use it: with nothing in
    // flight, nothing uses it now either.
    if (!stream->idle()) {
      try {
        auto e = std::make_shared<Event>();
        e->record(*stream);
        std::lock_guard lock(mutex);
        retired.emplace_back(std::move(e), std::move(b));  // (on failure b still holds it)
      } catch (...) {
        stream->synchronize();
      }
    }
    b.reset();
    reap();
  }
  void reap() noexcept {
    std::vector<std::unique_ptr<core::DeviceBuffer>> done;  // freed outside the lock
    try {
      std::lock_guard lock(mutex);
      while (!retired.empty() && retired.front().first->query()) {
        done.push_back(std::move(retired.front().second));  // (on failure: left for later)
        retired.pop_front();
      }
    } catch (...) {
    }
  }

  Arena& arena;
  std::shared_ptr<Stream> stream;
  uintptr_t stream_handle = 0;
  std::mutex mutex;
  std::deque<std::pair<std::shared_ptr<Event>, std::unique_ptr<core::DeviceBuffer>>> retired;
};

class EmulatedCompletion final : public core::Completion {
 public:
  EmulatedCompletion(std::shared_ptr<Shared> shared, std::shared_ptr<Event> event)
      : shared_(std::move(shared)), event_(std::move(event)), handle_(register_event(event_)) {}
  ~EmulatedCompletion() override { unregister_event(handle_); }
  bool done() const override { return event_->query(); }
  bool wait(uint64_t timeout_ns) const override {
    return event_->wait(timeout_ns == KSTAGE_TIMEOUT_INFINITE ? UINT64_MAX : timeout_ns);
  }
  kstage_device_sync_t sync() const override { return {shared_->stream_handle, handle_}; }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Event> event_;
  uintptr_t handle_;
};

class EmulatedBackend final : public DeviceBackend {
 public:
  explicit EmulatedBackend(int32_t ordinal) : shared_(std::make_shared<Shared>(ordinal)) {}
  ~EmulatedBackend() override {
    fence();
    shared_->reap();
  }

  DLDevice device() const override {
    return DLDevice{DLDeviceType(kDeviceType), shared_->arena.ordinal()};
  }
  bool can_access(DLDevice d) const override {
    return d.device_type == kDeviceType && d.device_id == shared_->arena.ordinal();
  }
  bool synchronous() const override { return false; }

  // As a GPU runtime knows each pointer's device: the arena that holds it.
  Status check_memory(const void* data, DLDevice claimed, const std::string& what) const override {
    if (claimed.device_type != kDeviceType) return Status::OK();
    for (int32_t o = 0; o < kDeviceCount; ++o) {
      if (!emulated::arena(o).holds(data)) continue;
      if (o == claimed.device_id) return Status::OK();
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s: DLDevice says device_id %d but the data pointer is memory of emulated "
                   "device %d",
                   what.c_str(), int(claimed.device_id), int(o));
    }
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%s: DLDevice says emulated device %d but the data pointer is not device memory",
                 what.c_str(), int(claimed.device_id));
  }

  Result<core::BufferPtr> allocate(size_t bytes) override {
    shared_->reap();
    void* p = shared_->arena.allocate(bytes);
    if (!p)
      return out_of_memory("emulated device %d: allocation of %zu bytes failed",
                   int(shared_->arena.ordinal()), bytes);
    return adopt(std::make_unique<EmulatedBuffer>(shared_->arena, static_cast<std::byte*>(p),
                                                  bytes));
  }

  core::BufferPtr adopt(std::unique_ptr<core::DeviceBuffer> foreign) override {
    std::shared_ptr<Shared> shared = shared_;
    return core::BufferPtr(foreign.release(), [shared](core::DeviceBuffer* b) {
      shared->retire(std::unique_ptr<core::DeviceBuffer>(b));
    });
  }

  Result<core::BufferPtr> upload(const void* host, size_t bytes) override {
    core::BufferPtr b;
    KSTAGE_ASSIGN_OR_RETURN(b, allocate(bytes));
    {
      std::lock_guard lock(shared_->arena.counts_mutex);
      ++shared_->arena.uploads;
    }
    ++core::transfer_counts().index_uploads;
    // Read now (as cudaMemcpyAsync reads pageable memory): the caller may
    // free `host` when this returns.
    auto snapshot = std::make_shared<std::vector<std::byte>>(
        static_cast<const std::byte*>(host), static_cast<const std::byte*>(host) + bytes);
    std::byte* dst = b->data();
    enqueue("upload", {dst}, [dst, snapshot] { std::memcpy(dst, snapshot->data(), snapshot->size()); });
    return b;
  }

  void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    enqueue("copy_bytes", {dst, src}, [=] { std::memcpy(dst, src, bytes); });
  }
  void copy_from_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    count(true);
    enqueue("copy_from_host", {dst}, [=] { std::memcpy(dst, src, bytes); });
  }
  void copy_to_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    count(false);
    enqueue("copy_to_host", {src}, [=] { std::memcpy(dst, src, bytes); });
  }

  void row_copy(const core::kernels::RowCopy& c) override {
    if (c.n == 0 || c.row_bytes == 0) return;
    core::kernels::RowCopy k = c;
    core::BufferPtr dst_index, src_index;  // released (in stream order) when this returns
    if (!c.indices_resident) {
      if (c.dst_index && !(k.dst_index = upload_indices(c.dst_index, c.n, dst_index))) return;
      if (c.src_index && !(k.src_index = upload_indices(c.src_index, c.n, src_index))) return;
    }
    enqueue("row_copy", {k.dst, k.src, k.dst_index, k.src_index},
            [k] { core::kernels::row_copy(Exec(), k); });
  }

  void ragged_copy(const core::kernels::RaggedCopy& c, size_t word) override {
    if (c.n == 0) return;
    // One upload for the three per-row arrays.
    const std::vector<uint64_t> host = pack_ragged(c);
    core::BufferPtr arrays = upload_or_die(host.data(), host.size() * sizeof(uint64_t));
    if (!arrays) return;  // reported to the violation handler
    const core::kernels::RaggedCopy k =
        with_packed(c, reinterpret_cast<const uint64_t*>(arrays->data()));
    Arena* arena = &shared_->arena;
    shared_->stream->enqueue([arena, k, word] {
      launch(*arena, "ragged_copy", {k.dst, k.dst_offsets}, [&] {
        // Every source row must be device memory too.
        for (size_t i = 0; i < k.n; ++i) {
          if (k.bytes[i] == 0) continue;
          if (!arena->holds(k.src_rows[i])) {
            violation("ragged_copy: src_rows[" + std::to_string(i) +
                      "] is not in the device's arena (host memory handed to a device kernel)");
            return;
          }
        }
        for (size_t i = 0; i < k.n; ++i)
          if (k.bytes[i]) arena->open(k.src_rows[i]);
        core::kernels::ragged_copy(Exec(), k, word);
        for (size_t i = 0; i < k.n; ++i)
          if (k.bytes[i]) arena->close(k.src_rows[i]);
      });
    });
  }

  void strided_copy(const core::kernels::StridedCopy& c) override {
    enqueue("strided_copy", {c.dst, c.src}, [c] { core::kernels::strided_copy(Exec(), c); });
  }

  Status order_after(const kstage_device_sync_t& producer, const char* field) override {
    if (producer.event != 0) {
      std::shared_ptr<Event> e = find_event(producer.event);
      if (!e)
        return error(KSTAGE_INVALID_ARGUMENT,
                     "%s.event 0x%llx is not an event of the emulated device", field,
                     (unsigned long long)producer.event);
      e->wait_on(*shared_->stream);
    } else if (producer.stream != 0) {
      std::shared_ptr<Stream> s = find_stream(producer.stream);
      if (!s)
        return error(KSTAGE_INVALID_ARGUMENT,
                     "%s.stream 0x%llx is not a stream of the emulated device", field,
                     (unsigned long long)producer.stream);
      auto e = std::make_shared<Event>();  // everything on that stream so far
      e->record(*s);
      e->wait_on(*shared_->stream);
    }
    return Status::OK();
  }

  Status record_into(const kstage_device_sync_t& consumer, const char* field) override {
    std::shared_ptr<Event> e;
    std::shared_ptr<Stream> s;
    if (consumer.event != 0 && !(e = find_event(consumer.event)))
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s.event 0x%llx is not an event of the emulated device", field,
                   (unsigned long long)consumer.event);
    if (consumer.stream != 0 && !(s = find_stream(consumer.stream)))
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s.stream 0x%llx is not a stream of the emulated device", field,
                   (unsigned long long)consumer.stream);
    if (e) e->record(*shared_->stream);
    if (s) {  // the consumer's stream runs after the producing work
      auto mine = std::make_shared<Event>();
      mine->record(*shared_->stream);
      mine->wait_on(*s);
    }
    return Status::OK();
  }

  core::CompletionPtr record() override {
    shared_->reap();
    if (shared_->stream->idle()) return nullptr;  // everything enqueued has run
    auto e = std::make_shared<Event>();
    e->record(*shared_->stream);
    return std::make_shared<EmulatedCompletion>(shared_, std::move(e));
  }

  void fence() override {
    shared_->stream->synchronize();
    shared_->reap();
  }

 private:
  template <class F>
  void enqueue(const char* what, std::vector<const void*> ptrs, F kernel) {
    Arena* arena = &shared_->arena;
    shared_->stream->enqueue(
        [arena, what, ptrs = std::move(ptrs), kernel] { launch(*arena, what, ptrs, kernel); });
  }

  core::BufferPtr upload_or_die(const void* host, size_t bytes) {
    auto b = upload(host, bytes);
    if (!b.ok()) violation("index upload: " + b.status().message());
    return b.ok() ? b.value() : nullptr;
  }
  const uint32_t* upload_indices(const uint32_t* host, size_t n, core::BufferPtr& keep) {
    keep = upload_or_die(host, n * sizeof(uint32_t));
    return keep ? reinterpret_cast<const uint32_t*>(keep->data()) : nullptr;
  }
  void count(bool to_device) {
    std::lock_guard lock(shared_->arena.counts_mutex);
    ++(to_device ? shared_->arena.host_to_device : shared_->arena.device_to_host);
    ++(to_device ? core::transfer_counts().host_to_device : core::transfer_counts().device_to_host);
  }

  std::shared_ptr<Shared> shared_;
};

Result<std::unique_ptr<core::Backend>> make(int32_t device_id, const kstage_config_t&) {
  return std::unique_ptr<core::Backend>(std::make_unique<EmulatedBackend>(device_id));
}

}  // namespace

const core::BackendFactory& factory() {
  static const core::BackendFactory f = {"emulated", kDeviceType, [] { return kDeviceCount; },
                                         make};
  return f;
}

}  // namespace kstage::backends::emulated
