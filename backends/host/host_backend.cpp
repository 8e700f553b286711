// SPDX-License-Identifier: Apache-2.0
#include "backends/host/host_backend.hpp"

#include "core/buffer_pool.hpp"
#include "core/kernels/masked_gather.hpp"
#include "core/kernels/ragged_copy.hpp"
#include "core/kernels/row_copy.hpp"
#include "core/kernels/strided_copy.hpp"

#include <Kokkos_Core.hpp>

#include <new>
#include <stdexcept>

namespace kstage::backends::host {
namespace {

using Bytes = Kokkos::View<unsigned char*, Kokkos::HostSpace>;
using UnmanagedBytes =
    Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Owns a HostSpace View; the DeviceBuffer base exposes its bytes.
class HostBuffer final : public core::DeviceBuffer {
 public:
  explicit HostBuffer(Bytes view)
      : DeviceBuffer(reinterpret_cast<std::byte*>(view.data()), view.extent(0),
                     DLDevice{kDLCPU, 0}),
        view_(std::move(view)) {}

 private:
  Bytes view_;
};

template <class Exec>
class HostBackend final : public core::Backend {
 public:
  DLDevice device() const override { return DLDevice{kDLCPU, 0}; }

  Result<core::BufferPtr> allocate(size_t bytes) override {
    if (core::BufferPtr reused = pool_->take(bytes)) return reused;
    try {
      Bytes view(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kstage::column"), bytes);
      return pool_->wrap(std::make_unique<HostBuffer>(std::move(view)));
    } catch (const std::bad_alloc&) {
    } catch (const std::runtime_error&) {  // Kokkos reports allocation failure this way too
    }
    return error(KSTAGE_OUT_OF_MEMORY, "host allocation of %zu bytes failed", bytes);
  }

  bool can_access(DLDevice d) const override { return is_host_memory(d.device_type); }

  void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    UnmanagedBytes d(reinterpret_cast<unsigned char*>(dst), bytes);
    UnmanagedBytes s(reinterpret_cast<unsigned char*>(const_cast<std::byte*>(src)), bytes);
    Kokkos::deep_copy(exec_, d, s);
    exec_.fence();
  }
  void row_copy(const core::kernels::RowCopy& c) override {
    core::kernels::row_copy(exec_, c);
    exec_.fence();
  }
  size_t checked_gather(const core::kernels::RowCopy& c, uint64_t src_rows) override {
    const size_t first_bad = core::kernels::checked_gather(exec_, c, src_rows);
    exec_.fence();
    return first_bad;
  }
  void masked_gather(const core::kernels::MaskedGather& c) override {
    core::kernels::masked_gather(exec_, c);
    exec_.fence();
  }
  void ragged_copy(const core::kernels::RaggedCopy& c, size_t word) override {
    core::kernels::ragged_copy(exec_, c, word);
    exec_.fence();
  }
  void strided_copy(const core::kernels::StridedCopy& c) override {
    core::kernels::strided_copy(exec_, c);
    exec_.fence();
  }
  void fence() override { exec_.fence(); }

 private:
  Exec exec_;
  std::shared_ptr<core::BufferPool> pool_ = std::make_shared<core::BufferPool>();
};

}  // namespace

bool is_host_memory(int32_t t) { return t == kDLCPU || t == kDLCUDAHost || t == kDLROCMHost; }

std::unique_ptr<core::Backend> make_host_backend(bool parallel) {
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

}  // namespace kstage::backends::host
