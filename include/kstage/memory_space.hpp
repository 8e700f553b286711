// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/memory_space.hpp
 * \brief Kokkos memory spaces in DLPack's terms: the DLPack device of each
 * space's memory, and which DLPack device types its kernels can read.
 *
 * This is the one table that kstage's backends (their device() and
 * can_access()) and the DLPack bridge (include/kstage/dlpack.hpp) share.
 * Each space is described under the KOKKOS_ENABLE_* macro that enables it;
 * a space with no entry cannot be described to DLPack (using it is a compile
 * error, not a wrong device type).
 */
#ifndef KSTAGE_MEMORY_SPACE_HPP_
#define KSTAGE_MEMORY_SPACE_HPP_

#include <dlpack/dlpack.h>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace kstage {

/// Whether memory of DLPack device type `t` is host memory that any CPU code
/// may read: plain CPU memory and the pinned host allocations of CUDA and ROCm.
constexpr bool is_host_memory(int32_t t) noexcept {
  return t == kDLCPU || t == kDLCUDAHost || t == kDLROCMHost;
}

/// The DLPack view of a Kokkos memory space (undefined: a space this build
/// cannot describe). Members:
///  - `device(ptr)`: the DLDevice of memory at `ptr` in this space (a GPU
///    space asks the runtime for the pointer's ordinal);
///  - `accepts(t)`: whether memory of device type `t` can be viewed as this space's;
///  - `order_consumer(sync)`: make a consumer's {stream, event} (kstage.h's
///    values) follow the work pending on the space's default execution
///    instance -- a stream wait for GPU spaces, a fence for the host; returns
///    nullptr, or the runtime's message when it refused a handle;
///  - `name`: for messages.
template <class MemorySpace>
struct DLPackSpace;

/// Host memory. (Serial, OpenMP and Threads all execute in it.)
template <>
struct DLPackSpace<Kokkos::HostSpace> {
  static DLDevice device(const void*) noexcept { return DLDevice{kDLCPU, 0}; }
  static constexpr bool accepts(int32_t t) noexcept { return is_host_memory(t); }
  static const char* order_consumer(const kstage_device_sync_t& sync) {
    if (sync.stream != 0 || sync.event != 0) Kokkos::DefaultHostExecutionSpace().fence();
    return nullptr;
  }
  static constexpr const char* name = "Kokkos::HostSpace (kDLCPU, kDLCUDAHost, kDLROCMHost)";
};

#if defined(KOKKOS_ENABLE_CUDA)
namespace cuda_impl {
/// The ordinal of CUDA memory at `p`; Kokkos' device when the runtime does
/// not know the pointer (an empty View's null data).
inline int ordinal(const void* p) noexcept {
  cudaPointerAttributes a{};
  if (p && cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type != cudaMemoryTypeUnregistered)
    return a.device;
  cudaGetLastError();
  return Kokkos::Cuda().cuda_device();
}
/// kstage.h's stream values: 1 the legacy default stream, 2 the per-thread one.
inline cudaStream_t stream(uintptr_t v) noexcept {
  return v == 1   ? cudaStreamLegacy
         : v == 2 ? cudaStreamPerThread
                  : reinterpret_cast<cudaStream_t>(v);
}
/// nullptr when done; else the runtime's message (the device is put back).
inline const char* order_consumer(const kstage_device_sync_t& sync) {
  if (sync.stream == 0 && sync.event == 0) return nullptr;
  const Kokkos::Cuda exec;
  int previous = -1;
  (void)cudaGetDevice(&previous);
  if (previous != exec.cuda_device()) (void)cudaSetDevice(exec.cuda_device());
  cudaError_t e = cudaSuccess;
  if (sync.event != 0)
    e = cudaEventRecord(reinterpret_cast<cudaEvent_t>(sync.event), exec.cuda_stream());
  if (e == cudaSuccess && sync.stream != 0) {
    cudaEvent_t done;
    e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      e = cudaEventRecord(done, exec.cuda_stream());
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream(sync.stream), done, 0);
      (void)cudaEventDestroy(done);
    }
  }
  if (previous >= 0 && previous != exec.cuda_device()) (void)cudaSetDevice(previous);
  if (e == cudaSuccess) return nullptr;
  (void)cudaGetLastError();
  return cudaGetErrorString(e);
}
}  // namespace cuda_impl

/// CUDA device memory (kDLCUDA). Managed memory can be viewed here too.
template <>
struct DLPackSpace<Kokkos::CudaSpace> {
  static DLDevice device(const void* p) noexcept {
    return DLDevice{kDLCUDA, cuda_impl::ordinal(p)};
  }
  static constexpr bool accepts(int32_t t) noexcept { return t == kDLCUDA || t == kDLCUDAManaged; }
  static const char* order_consumer(const kstage_device_sync_t& s) {
    return cuda_impl::order_consumer(s);
  }
  static constexpr const char* name = "Kokkos::CudaSpace (kDLCUDA, kDLCUDAManaged)";
};
/// CUDA managed memory (kDLCUDAManaged), readable from host and device.
template <>
struct DLPackSpace<Kokkos::CudaUVMSpace> {
  static DLDevice device(const void* p) noexcept {
    return DLDevice{kDLCUDAManaged, cuda_impl::ordinal(p)};
  }
  static constexpr bool accepts(int32_t t) noexcept { return t == kDLCUDAManaged; }
  static const char* order_consumer(const kstage_device_sync_t& s) {
    return cuda_impl::order_consumer(s);
  }
  static constexpr const char* name = "Kokkos::CudaUVMSpace (kDLCUDAManaged)";
};
/// Pinned host memory (kDLCUDAHost): host memory that CUDA kernels read.
template <>
struct DLPackSpace<Kokkos::CudaHostPinnedSpace> {
  static DLDevice device(const void*) noexcept { return DLDevice{kDLCUDAHost, 0}; }
  static constexpr bool accepts(int32_t t) noexcept { return t == kDLCUDAHost; }
  static const char* order_consumer(const kstage_device_sync_t& s) {
    return cuda_impl::order_consumer(s);
  }
  static constexpr const char* name = "Kokkos::CudaHostPinnedSpace (kDLCUDAHost)";
};
#endif  // KOKKOS_ENABLE_CUDA

#if defined(KOKKOS_ENABLE_HIP)
namespace hip_impl {
#if KOKKOS_VERSION >= 40000
using Exec = Kokkos::HIP;
using DeviceSpace = Kokkos::HIPSpace;
using PinnedSpace = Kokkos::HIPHostPinnedSpace;
#else
using Exec = Kokkos::Experimental::HIP;
using DeviceSpace = Kokkos::Experimental::HIPSpace;
using PinnedSpace = Kokkos::Experimental::HIPHostPinnedSpace;
#endif
/// The ordinal of ROCm memory at `p`; Kokkos' device when the runtime does
/// not know the pointer (an empty View's null data).
inline int ordinal(const void* p) noexcept {
  hipPointerAttribute_t a{};
#if HIP_VERSION_MAJOR >= 6
  if (p && hipPointerGetAttributes(&a, p) == hipSuccess && a.type == hipMemoryTypeDevice)
#else
  if (p && hipPointerGetAttributes(&a, p) == hipSuccess && a.memoryType == hipMemoryTypeDevice)
#endif
    return a.device;
  (void)hipGetLastError();
  return Exec().hip_device();
}
/// kstage.h's stream values: 1 the null stream, 2 the per-thread one.
inline hipStream_t stream(uintptr_t v) noexcept {
  return v == 1 ? nullptr : v == 2 ? hipStreamPerThread : reinterpret_cast<hipStream_t>(v);
}
/// nullptr when done; else the runtime's message (the device is put back).
inline const char* order_consumer(const kstage_device_sync_t& sync) {
  if (sync.stream == 0 && sync.event == 0) return nullptr;
  const Exec exec;
  int previous = -1;
  (void)hipGetDevice(&previous);
  if (previous != exec.hip_device()) (void)hipSetDevice(exec.hip_device());
  hipError_t e = hipSuccess;
  if (sync.event != 0)
    e = hipEventRecord(reinterpret_cast<hipEvent_t>(sync.event), exec.hip_stream());
  if (e == hipSuccess && sync.stream != 0) {
    hipEvent_t done;
    e = hipEventCreateWithFlags(&done, hipEventDisableTiming);
    if (e == hipSuccess) {
      e = hipEventRecord(done, exec.hip_stream());
      if (e == hipSuccess) e = hipStreamWaitEvent(stream(sync.stream), done, 0);
      (void)hipEventDestroy(done);
    }
  }
  if (previous >= 0 && previous != exec.hip_device()) (void)hipSetDevice(previous);
  if (e == hipSuccess) return nullptr;
  (void)hipGetLastError();
  return hipGetErrorString(e);
}
}  // namespace hip_impl

/// ROCm device memory (kDLROCM).
template <>
struct DLPackSpace<hip_impl::DeviceSpace> {
  static DLDevice device(const void* p) noexcept { return DLDevice{kDLROCM, hip_impl::ordinal(p)}; }
  static constexpr bool accepts(int32_t t) noexcept { return t == kDLROCM; }
  static const char* order_consumer(const kstage_device_sync_t& s) {
    return hip_impl::order_consumer(s);
  }
  static constexpr const char* name = "Kokkos::HIPSpace (kDLROCM)";
};
/// Pinned host memory (kDLROCMHost): host memory that HIP kernels read.
template <>
struct DLPackSpace<hip_impl::PinnedSpace> {
  static DLDevice device(const void*) noexcept { return DLDevice{kDLROCMHost, 0}; }
  static constexpr bool accepts(int32_t t) noexcept { return t == kDLROCMHost; }
  static const char* order_consumer(const kstage_device_sync_t& s) {
    return hip_impl::order_consumer(s);
  }
  static constexpr const char* name = "Kokkos::HIPHostPinnedSpace (kDLROCMHost)";
};
#endif  // KOKKOS_ENABLE_HIP

}  // namespace kstage

#endif  // KSTAGE_MEMORY_SPACE_HPP_
