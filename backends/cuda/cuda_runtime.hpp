// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime in the terms of the GPU backend (backends/gpu/: gpu_backend.hpp and its
// parts lanes.hpp, shared.hpp, completion.hpp): the one table of allocate / copy / stream /
// event calls the GPU backend uses.
#pragma once

#include <Kokkos_Core.hpp>
#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "backends/gpu/launch.hpp"
#include "backends/gpu/memory_kind.hpp"

namespace kstage::backends::cuda {

using gpu::MemoryKind;

struct CudaRuntime {
  static constexpr const char* kName = "cuda";
  static constexpr int32_t kDeviceType = kDLCUDA;
  static constexpr int32_t kManagedType = kDLCUDAManaged;
  static constexpr int32_t kHostPinnedType = kDLCUDAHost;

  using Exec = Kokkos::Cuda;
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  using Error = cudaError_t;
  using CopyKind = cudaMemcpyKind;
  static constexpr Error success = cudaSuccess;
  static constexpr Error not_ready = cudaErrorNotReady;
  static constexpr CopyKind kHostToDevice = cudaMemcpyHostToDevice;
  static constexpr CopyKind kDeviceToHost = cudaMemcpyDeviceToHost;
  static constexpr CopyKind kDefault = cudaMemcpyDefault;  // from the pointers (UVA)

  static const char* error_string(Error e) { return cudaGetErrorString(e); }
  static Error take_error() { return cudaGetLastError(); }
  static bool is_out_of_memory(Error e) { return e == cudaErrorMemoryAllocation; }
  static bool is_not_supported(Error e) { return e == cudaErrorNotSupported; }
  // The device failed (not the caller's arguments): the sticky faults that corrupt the
  // context, and launches the device cannot run.
  static bool is_device_fault(Error e) {
    switch (e) {
      case cudaErrorIllegalAddress:
      case cudaErrorLaunchFailure:
      case cudaErrorIllegalInstruction:
      case cudaErrorMisalignedAddress:
      case cudaErrorInvalidAddressSpace:
      case cudaErrorInvalidPc:
      case cudaErrorHardwareStackError:
      case cudaErrorAssert:
      case cudaErrorLaunchTimeout:
      case cudaErrorLaunchOutOfResources:
      case cudaErrorECCUncorrectable:
      case cudaErrorUnknown: return true;
      default: return false;
    }
  }
  static Error device_count(int* n) {
    Error e = cudaGetDeviceCount(n);
    if (e != cudaSuccess) cudaGetLastError();  // no driver / no device: not sticky
    return e;
  }
  static Error get_device(int* d) { return cudaGetDevice(d); }
  static Error set_device(int d) { return cudaSetDevice(d); }
  // The device Kokkos' execution space runs on in this process.
  static int kokkos_device() { return Kokkos::Cuda().cuda_device(); }
  static Exec make_exec(Stream s) { return Kokkos::Cuda(s); }

  static Error stream_create(Stream* s) {
    return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
  }
  static Error stream_destroy(Stream s) { return cudaStreamDestroy(s); }
  static Error stream_synchronize(Stream s) { return cudaStreamSynchronize(s); }
  // success: everything enqueued has run; not_ready: work in flight (not kept as an error).
  static Error stream_query(Stream s) {
    Error r = cudaStreamQuery(s);
    if (r == cudaErrorNotReady) (void)cudaGetLastError();
    return r;
  }
  static Error stream_wait_event(Stream s, Event e) { return cudaStreamWaitEvent(s, e, 0); }
  static Stream legacy_stream() { return cudaStreamLegacy; }
  static Stream per_thread_stream() { return cudaStreamPerThread; }

  static Error event_create(Event* e) {
    return cudaEventCreateWithFlags(e, cudaEventDisableTiming);
  }
  static Error event_destroy(Event e) { return cudaEventDestroy(e); }
  static Error event_record(Event e, Stream s) { return cudaEventRecord(e, s); }
  static Error event_query(Event e) {
    Error r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) cudaGetLastError();  // "not ready" is not an error to keep
    return r;
  }
  static Error event_synchronize(Event e) { return cudaEventSynchronize(e); }

  // kstage's own pool per device: freed blocks stay cached (release threshold: never), since
  // the default pool gives memory back to the driver at every synchronisation. Trimmed when a
  // stage lets its device go.
  using Pool = cudaMemPool_t;
  static Error pool_create(Pool* pool, int device) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    Error e = cudaMemPoolCreate(pool, &props);
    if (e != cudaSuccess) return e;
    uint64_t keep = UINT64_MAX;
    return cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  static Error pool_usage(Pool pool, size_t* reserved, size_t* used) {
    uint64_t r = 0, u = 0;
    Error e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &r);
    if (e == cudaSuccess) e = cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &u);
    *reserved = size_t(r);
    *used = size_t(u);
    return e;
  }
  static Error pool_trim(Pool pool, size_t keep) { return cudaMemPoolTrimTo(pool, keep); }
  static Error malloc_async(void** p, size_t bytes, Pool pool, Stream s) {
    return pool ? cudaMallocFromPoolAsync(p, bytes, pool, s) : cudaMallocAsync(p, bytes, s);
  }
  static Error free_async(void* p, Stream s) { return cudaFreeAsync(p, s); }
  // Plain allocations, where stream-ordered pools are unsupported.
  static Error malloc(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static Error free(void* p) { return cudaFree(p); }
  // Pinned (page-locked) host memory: a copy from it is a DMA in stream order, never staged by
  // the driver (a pageable source may make the call wait for the stream).
  static Error host_malloc(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static Error host_free(void* p) { return cudaFreeHost(p); }
  // Waits for every stream of the current device (an export released with no consumer stream).
  static Error device_synchronize() { return cudaDeviceSynchronize(); }
  static Error memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
    return cudaMemcpyAsync(dst, src, bytes, kind, s);
  }

  // Where the memory at `p` is: device (or managed) memory of `ordinal`,
  // pinned host memory, or pageable host memory the runtime does not know.
  static Error pointer_kind(const void* p, int* ordinal, MemoryKind* kind) {
    cudaPointerAttributes a{};
    Error e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return e;
    }
    *ordinal = a.device;
    *kind = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MemoryKind::Device
            : a.type == cudaMemoryTypeHost ? MemoryKind::PinnedHost
                                           : MemoryKind::Pageable;
    return cudaSuccess;
  }

  // The one place kernels are launched: on the stage's instance, then the
  // launch checked (Kokkos 3.4 checks launches only in debug builds).
  template <class Kernel>
  static Error launch(const Exec& exec, Stream, const gpu::LaunchArgs&, Kernel&& kernel) {
    try {
      kernel(exec);
    } catch (...) {  // Kokkos' own launch check threw: the error it saw, taken
      const Error e = cudaGetLastError();
      return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }
  static void count(int, gpu::Transfer) {}
};

}  // namespace kstage::backends::cuda
