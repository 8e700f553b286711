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
///  - `device(ptr)`: the DLDevice of memory at `ptr` in this space;
///  - `accepts(t)`: whether memory of device type `t` can be viewed as this space's;
///  - `name`: for messages.
template <class MemorySpace>
struct DLPackSpace;

/// Host memory. (Serial, OpenMP and Threads all execute in it.)
template <>
struct DLPackSpace<Kokkos::HostSpace> {
  static DLDevice device(const void*) noexcept { return DLDevice{kDLCPU, 0}; }
  static constexpr bool accepts(int32_t t) noexcept { return is_host_memory(t); }
  static constexpr const char* name = "Kokkos::HostSpace (kDLCPU, kDLCUDAHost, kDLROCMHost)";
};

// Device spaces (CudaSpace, CudaHostPinnedSpace, CudaUVMSpace, HIPSpace, ...)
// join this table under KOKKOS_ENABLE_CUDA / KOKKOS_ENABLE_HIP with their
// backends in backends/<name>/.

}  // namespace kstage

#endif  // KSTAGE_MEMORY_SPACE_HPP_
