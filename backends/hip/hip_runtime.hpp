// SPDX-License-Identifier: Apache-2.0
// The HIP runtime in the terms of the GPU backend (backends/gpu/): the same
// table as backends/cuda/cuda_runtime.hpp, on hip* calls and Kokkos' HIP
// execution space (Kokkos::Experimental::HIP before Kokkos 4).
#pragma once

#include <Kokkos_Core.hpp>
#include <dlpack/dlpack.h>
#include <hip/hip_runtime_api.h>

#include "backends/gpu/launch.hpp"
#include "backends/gpu/memory_kind.hpp"

namespace kstage::backends::hip {

#if KOKKOS_VERSION >= 40000
using KokkosHip = Kokkos::HIP;
#else
using KokkosHip = Kokkos::Experimental::HIP;
#endif

using gpu::MemoryKind;

struct HipRuntime {
  static constexpr const char* kName = "rocm";
  static constexpr int32_t kDeviceType = kDLROCM;
  static constexpr int32_t kManagedType = -1;  // DLPack has no ROCm managed memory type
  static constexpr int32_t kHostPinnedType = kDLROCMHost;

  using Exec = KokkosHip;
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  using Error = hipError_t;
  using CopyKind = hipMemcpyKind;
  static constexpr Error success = hipSuccess;
  static constexpr Error not_ready = hipErrorNotReady;
  static constexpr CopyKind kHostToDevice = hipMemcpyHostToDevice;
  static constexpr CopyKind kDeviceToHost = hipMemcpyDeviceToHost;
  static constexpr CopyKind kDefault = hipMemcpyDefault;  // from the pointers

  static const char* error_string(Error e) { return hipGetErrorString(e); }
  static Error take_error() { return hipGetLastError(); }
  static bool is_out_of_memory(Error e) { return e == hipErrorOutOfMemory; }
  static bool is_not_supported(Error e) { return e == hipErrorNotSupported; }
  static bool is_device_fault(Error e) {
    switch (e) {
      case hipErrorIllegalAddress:
      case hipErrorLaunchFailure:
      case hipErrorAssert:
      case hipErrorLaunchTimeOut:
      case hipErrorLaunchOutOfResources:
      case hipErrorECCNotCorrectable:
      case hipErrorUnknown: return true;
      default: return false;
    }
  }
  static Error device_count(int* n) {
    Error e = hipGetDeviceCount(n);
    if (e != hipSuccess) (void)hipGetLastError();
    return e;
  }
  static Error get_device(int* d) { return hipGetDevice(d); }
  static Error set_device(int d) { return hipSetDevice(d); }
  static int kokkos_device() { return KokkosHip().hip_device(); }
  static Exec make_exec(Stream s) { return KokkosHip(s); }

  static Error stream_create(Stream* s) {
    return hipStreamCreateWithFlags(s, hipStreamNonBlocking);
  }
  static Error stream_destroy(Stream s) { return hipStreamDestroy(s); }
  static Error stream_synchronize(Stream s) { return hipStreamSynchronize(s); }
  // success: everything enqueued has run; not_ready: work in flight (not kept as an error).
  static Error stream_query(Stream s) {
    Error r = hipStreamQuery(s);
    if (r == hipErrorNotReady) (void)hipGetLastError();
    return r;
  }
  static Error stream_wait_event(Stream s, Event e) { return hipStreamWaitEvent(s, e, 0); }
  static Stream legacy_stream() { return nullptr; }  // HIP's null stream
  static Stream per_thread_stream() { return hipStreamPerThread; }

  static Error event_create(Event* e) { return hipEventCreateWithFlags(e, hipEventDisableTiming); }
  static Error event_destroy(Event e) { return hipEventDestroy(e); }
  static Error event_record(Event e, Stream s) { return hipEventRecord(e, s); }
  static Error event_query(Event e) {
    Error r = hipEventQuery(e);
    if (r == hipErrorNotReady) (void)hipGetLastError();
    return r;
  }
  static Error event_synchronize(Event e) { return hipEventSynchronize(e); }

  // kstage's own pool per device: freed blocks stay cached (release threshold: never), since
  // the default pool gives memory back to the driver at every synchronisation. Trimmed when a
  // stage lets its device go.
  using Pool = hipMemPool_t;
  static Error pool_create(Pool* pool, int device) {
    hipMemPoolProps props{};
    props.allocType = hipMemAllocationTypePinned;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = device;
    Error e = hipMemPoolCreate(pool, &props);
    if (e != hipSuccess) return e;
    uint64_t keep = UINT64_MAX;
    return hipMemPoolSetAttribute(*pool, hipMemPoolAttrReleaseThreshold, &keep);
  }
  static Error pool_usage(Pool pool, size_t* reserved, size_t* used) {
    uint64_t r = 0, u = 0;
    Error e = hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemCurrent, &r);
    if (e == hipSuccess) e = hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, &u);
    *reserved = size_t(r);
    *used = size_t(u);
    return e;
  }
  static Error pool_trim(Pool pool, size_t keep) { return hipMemPoolTrimTo(pool, keep); }
  static Error malloc_async(void** p, size_t bytes, Pool pool, Stream s) {
    return pool ? hipMallocFromPoolAsync(p, bytes, pool, s) : hipMallocAsync(p, bytes, s);
  }
  static Error free_async(void* p, Stream s) { return hipFreeAsync(p, s); }
  static Error malloc(void** p, size_t bytes) { return hipMalloc(p, bytes); }
  static Error free(void* p) { return hipFree(p); }
  // Pinned (page-locked) host memory: a copy from it is a DMA in stream order, never staged by
  // the driver (a pageable source may make the call wait for the stream).
  static Error host_malloc(void** p, size_t bytes) { return hipHostMalloc(p, bytes, 0); }
  static Error host_free(void* p) { return hipHostFree(p); }
  // Waits for every stream of the current device (an export released with no consumer stream).
  static Error device_synchronize() { return hipDeviceSynchronize(); }
  static Error memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
    return hipMemcpyAsync(dst, src, bytes, kind, s);
  }

  // As CudaRuntime::pointer_kind. HIP 5.2 answers hipErrorInvalidValue for
  // pageable memory it never saw: that is pageable host memory, not an error.
  static Error pointer_kind(const void* p, int* ordinal, MemoryKind* kind) {
    hipPointerAttribute_t a{};
    Error e = hipPointerGetAttributes(&a, p);
    if (e != hipSuccess) {
      (void)hipGetLastError();
      if (e != hipErrorInvalidValue) return e;
      *ordinal = -1;
      *kind = MemoryKind::Pageable;
      return hipSuccess;
    }
    *ordinal = a.device;
#if HIP_VERSION_MAJOR >= 6
    const hipMemoryType type = a.type;  // ROCm 6 renamed memoryType
#else
    const hipMemoryType type = a.memoryType;
#endif
    *kind = type == hipMemoryTypeDevice || a.isManaged ? MemoryKind::Device
            : type == hipMemoryTypeHost                ? MemoryKind::PinnedHost
                                                       : MemoryKind::Pageable;
    return hipSuccess;
  }

  // The one place kernels are launched: on the stage's instance, then checked.
  template <class Kernel>
  static Error launch(const Exec& exec, Stream, const gpu::LaunchArgs&, Kernel&& kernel) {
    try {
      kernel(exec);
    } catch (...) {  // Kokkos' own launch check threw: the error it saw, taken
      const Error e = hipGetLastError();
      return e != hipSuccess ? e : hipErrorLaunchFailure;
    }
    return hipGetLastError();
  }
  static void count(int, gpu::Transfer) {}
};

}  // namespace kstage::backends::hip
