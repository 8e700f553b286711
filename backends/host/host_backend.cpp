// SPDX-License-Identifier: Apache-2.0
#include "backends/host/host_backend.hpp"

#include "backends/host/fresh_pages.hpp"

#include "core/buffer_pool.hpp"
#include "core/device_sync.hpp"
#include "core/kernels/masked_gather.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"
#include "core/kernels/world_transform.hpp"

#include <kstage/memory_space.hpp>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>

namespace kstage::backends::host {
namespace {

using Space = Kokkos::HostSpace;
using UnmanagedBytes =
    Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Host memory the backend allocates itself, through the replaceable nothrow operator new (an
// application's -- or a test's -- replacement sees it), and frees in its destructor. Not a
// managed Kokkos::View: under a persistent out-of-memory, Kokkos 4.x's cleanup of a failed View
// allocation allocates again from a destructor (SharedAllocationRecord -> HostSpace::deallocate)
// and terminates the process, and kstage never aborts on out-of-memory. Kernels see the
// memory through unmanaged Views, as every other buffer.
class HostBuffer final : public core::DeviceBuffer {
 public:
  HostBuffer(void* block, std::byte* data, size_t size)
      : DeviceBuffer(data, size, DLPackSpace<Space>::device(data)), block_(block) {}
  ~HostBuffer() override { ::operator delete(block_); }

  // populate_fresh_pages() of the first `bytes`, once per byte of the buffer's life (pages made
  // so stay made while it is pooled).
  void populate(size_t bytes) noexcept {
    bytes = std::min(bytes, size());
    if (bytes <= populated_) return;
    populate_fresh_pages(data() + populated_, data() + bytes);
    populated_ = bytes;
  }

 private:
  void* block_;
  size_t populated_ = 0;  // the first bytes populate() made resident
};

// `bytes` of uninitialised host memory at a kBufferAlignment boundary, or null.
std::unique_ptr<HostBuffer> allocate_aligned(size_t bytes) {
  constexpr size_t align = core::kBufferAlignment;
  if (bytes > SIZE_MAX - align) return nullptr;
  void* block = ::operator new(bytes + align - 1, std::nothrow);
  if (block == nullptr) return nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(block);
  auto* data = reinterpret_cast<std::byte*>((p + align - 1) & ~uintptr_t(align - 1));
  try {
    return std::make_unique<HostBuffer>(block, data, bytes);
  } catch (const std::bad_alloc&) {
    ::operator delete(block);
    return nullptr;
  }
}

// Kokkos 3.x reductions and scans are not safe to launch from several
// threads at once: Kokkos::Serial keeps their scratch in one process-wide
// buffer, and Kokkos::OpenMP refuses them on a thread that is not its master
// (any thread but the one that initialised Kokkos). Writes stage outside the
// stage's lock, so on 3.x these launches take a process-wide lock, and run on
// Serial where OpenMP cannot run them. Kokkos 4 serialises launches on an
// execution space instance itself.
#if KOKKOS_VERSION < 40000
std::mutex& legacy_reduction_mutex() {
  static std::mutex m;
  return m;
}
#endif

template <class Exec, class F>
auto run_reduction(const Exec& exec, F&& launch) {
#if KOKKOS_VERSION < 40000
  std::lock_guard lock(legacy_reduction_mutex());
#if defined(KOKKOS_ENABLE_OPENMP) && defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<Exec, Kokkos::OpenMP>) {
    if (Kokkos::OpenMP::in_parallel()) return launch(Kokkos::Serial());  // not an OpenMP master
  }
#endif
#endif
  return launch(exec);
}

// Every call completes its work before returning (fencing once per call,
// never per element): host columns have nothing to wait for, so ops on
// them are complete when submitted and host reads carry no event.
template <class Exec>
class HostBackend final : public core::Backend {
 public:
  DLDevice device() const override { return DLPackSpace<Space>::device(nullptr); }
  bool can_access(DLDevice d) const override { return DLPackSpace<Space>::accepts(d.device_type); }
  bool synchronous() const override { return true; }

  Result<core::BufferPtr> allocate(size_t bytes) override {
    if (core::BufferPtr reused = pool_->take(bytes)) return reused;
    std::unique_ptr<HostBuffer> buffer = allocate_aligned(bytes);
    if (buffer == nullptr) return out_of_memory("host allocation of %zu bytes failed", bytes);
    try {
      return pool_->wrap(std::move(buffer));
    } catch (const std::bad_alloc&) {
    }
    return out_of_memory("host allocation of %zu bytes failed", bytes);
  }
  // Where this backend's kernel would write the buffer from the calling thread (runs_serially:
  // a serial stage, as parallel ones run work of this size in parallel): a parallel kernel's
  // first touch places each page on the NUMA node of the thread that writes it, which a populate
  // on one thread would not. Measured on the 2-vCPU VM (fresh_pages.hpp): a clone's first seal
  // of 3.7 and 15 MB took 22% and 27% less time populated, and one of 0.17 MB (a clone to 64
  // targets) 43 instead of 54-60 us where its pages were fresh, 2-4 us more where they were not
  // (the two system calls); not under 128 KiB, where the calls cost what they save, nor over
  // 16 MiB (one of 260 MB took 3-9% longer: every page zeroed, then written, in two passes over
  // memory, where a fault zeroes the page it is about to write).
  void populate(core::DeviceBuffer& buffer, size_t bytes) noexcept override {
    constexpr size_t kPopulateBytes = size_t(128) << 10, kPopulateMaxBytes = size_t(16) << 20;
    if (bytes < kPopulateBytes || bytes > kPopulateMaxBytes || !runs_serially(bytes)) return;
    if (auto* own = dynamic_cast<HostBuffer*>(&buffer)) own->populate(bytes);
  }
  core::BufferPtr adopt(std::unique_ptr<core::DeviceBuffer> foreign) override {
    return core::BufferPtr(std::move(foreign));  // nothing of ours is in flight
  }
  Result<core::BufferPtr> upload(const void*, size_t) override {
    return error(KSTAGE_INTERNAL, "the host backend reads host arrays where they are");
  }

  void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    // Kokkos 3.x's HostSpace-to-HostSpace deep_copy ignores the instance it is given and runs
    // on the default host execution space: a serial stage's copies became OpenMP parallel
    // regions (waiting a scheduler tick for a busy core: 4-12 ms for a 12 MB write, not 0.7).
    if (runs_serially(bytes)) {
      std::memcpy(dst, src, bytes);
      return;
    }
    UnmanagedBytes d(reinterpret_cast<unsigned char*>(dst), bytes);
    UnmanagedBytes s(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(src)), bytes);
    Kokkos::deep_copy(exec_, d, s);
    exec_.fence();
  }
  void copy_from_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    copy_bytes(dst, src, bytes);
  }
  void copy_to_host(std::byte* dst, const std::byte* src, size_t bytes) override {
    copy_bytes(dst, src, bytes);
  }
  void row_copy(const core::kernels::RowCopy& c) override {
    run(c.n * c.row_bytes, [&](const auto& exec) {
      core::kernels::row_copy(exec, c);
      exec.fence();
    });
  }
  size_t checked_gather(const core::kernels::RowCopy& c, uint64_t src_rows) override {
    return run(c.n * c.row_bytes, [&](const auto& space) {
      return run_reduction(space, [&](const auto& exec) {
        const size_t first_bad = core::kernels::checked_gather(exec, c, src_rows);
        exec.fence();
        return first_bad;
      });
    });
  }
  void masked_gather(const core::kernels::MaskedGather& c) override {
    // (Bytes at most: the selected rows are not counted yet.)
    run(c.n * c.row_bytes, [&](const auto& space) {
      run_reduction(space, [&](const auto& exec) {
        core::kernels::masked_gather(exec, c);
        exec.fence();
      });
    });
  }
  void ragged_copy(const core::kernels::RaggedCopy& c, size_t word) override {
    // The bytes of a few rows (more are not small work, whatever their sizes).
    size_t bytes = c.n < kSmallBytes / 64 ? 0 : kSmallBytes;
    for (size_t i = 0; i < c.n && bytes < kSmallBytes; ++i) bytes += c.bytes[i];
    run(bytes, [&](const auto& exec) {
      core::kernels::ragged_copy(exec, c, word);
      exec.fence();
    });
  }
  void strided_copy(const core::kernels::StridedCopy& c) override {
    size_t bytes = c.ndim > 0 ? c.elem_bytes : 0;
    for (int d = 0; d < c.ndim; ++d) bytes *= size_t(c.shape[d]);
    run(bytes, [&](const auto& exec) {
      core::kernels::strided_copy(exec, c);
      exec.fence();
    });
  }
  void world_transform(const core::kernels::WorldTransform& k) override {
    core::kernels::world_transform(exec_, k, runs_in_order);
    exec_.fence();
  }

  Status order_after(const kstage_device_sync_t& producer, const char* field) override {
    return core::check_host_sync(producer, field, "the data is host memory");
  }
  Status record_into(const kstage_device_sync_t& consumer, const char* field) override {
    return core::check_host_sync(consumer, field, "the data is host memory");
  }
  core::CompletionPtr record() override { return nullptr; }
  void fence() override { exec_.fence(); }

  void host_for(size_t n, HostChunk body, const void* context) override {
    constexpr size_t kChunk = size_t(1) << 16;  // a parallel region only where it pays
    if (n <= kChunk || exec_.concurrency() == 1) {
      if (n > 0) body(context, 0, n);
      return;
    }
    Kokkos::parallel_for(
        "kstage::host_for",
        Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec_, 0, (n + kChunk - 1) / kChunk),
        [=](const size_t k) { body(context, k * kChunk, std::min(n, (k + 1) * kChunk)); });
    exec_.fence();
  }

 private:
  // Work this small runs on the calling thread even for a parallel stage: a parallel region
  // costs more than it saves there, and on cores that are busy (another process, a second
  // OpenMP runtime spinning) it waits a scheduler time slice to start -- a masked write of a
  // few rows took ~10 ms so, 50 us serially.
  static constexpr size_t kSmallBytes = size_t(256) << 10;
  // Whether work moving `bytes` runs on the calling thread.
  static bool runs_serially(size_t bytes) {
#ifdef KOKKOS_ENABLE_SERIAL
    return std::is_same_v<Exec, Kokkos::Serial> || bytes < kSmallBytes;
#else
    (void)bytes;
    return false;  // (no serial space to run it on)
#endif
  }
  // f(space) on the stage's execution space, or on Kokkos::Serial for small work.
  template <class F>
  decltype(auto) run(size_t bytes, F&& f) const {
#ifdef KOKKOS_ENABLE_SERIAL
    if constexpr (!std::is_same_v<Exec, Kokkos::Serial>) {
      if (runs_serially(bytes)) return f(Kokkos::Serial());
    }
#endif
    return f(exec_);
  }
  // Kokkos::Serial runs a range's indices in order: one pass computes every level.
#ifdef KOKKOS_ENABLE_SERIAL
  static constexpr bool runs_in_order = std::is_same_v<Exec, Kokkos::Serial>;
#else
  static constexpr bool runs_in_order = false;
#endif
  Exec exec_;
  std::shared_ptr<core::BufferPool> pool_ = std::make_shared<core::BufferPool>();
};

}  // namespace

namespace {
std::unique_ptr<core::Backend> make_host_backend(bool parallel);
}  // namespace

Result<std::unique_ptr<core::Backend>> make(int32_t, const kstage_config_t& config) {
  bool parallel;
  switch (config.host_execution) {
    case KSTAGE_HOST_EXECUTION_DEFAULT:
#if defined(KSTAGE_DEFAULT_HOST_EXECUTION_SERIAL)
      parallel = false;
#else
      parallel = true;
#endif
      break;
    case KSTAGE_HOST_EXECUTION_SERIAL: parallel = false; break;
    case KSTAGE_HOST_EXECUTION_PARALLEL: parallel = true; break;
    default:
      return error(KSTAGE_INVALID_ARGUMENT,
                   "config.host_execution %d is not a kstage_host_execution_t",
                   int(config.host_execution));
  }
  return make_host_backend(parallel);
}

const core::BackendFactory& factory() {
  static const core::BackendFactory f = {"host", kDLCPU, [] { return int32_t(1); }, make};
  return f;
}

namespace {
std::unique_ptr<core::Backend> make_host_backend([[maybe_unused]] bool parallel) {
#if defined(KOKKOS_ENABLE_OPENMP)
  if (parallel) return std::make_unique<HostBackend<Kokkos::OpenMP>>();
#elif defined(KOKKOS_ENABLE_THREADS)
  if (parallel) return std::make_unique<HostBackend<Kokkos::Threads>>();
#endif
#if defined(KOKKOS_ENABLE_SERIAL)
  return std::make_unique<HostBackend<Kokkos::Serial>>();
#else
  (void)parallel;
  return std::make_unique<HostBackend<Kokkos::DefaultHostExecutionSpace>>();
#endif
}
}  // namespace

}  // namespace kstage::backends::host
