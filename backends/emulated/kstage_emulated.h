/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage_emulated.h
 * \brief The emulated device: a GPU stand-in for testing kstage's device
 * paths on machines without one. Test builds only (CMake option
 * KSTAGE_EMULATED_DEVICE, off by default, on in the presets scripts/test.sh
 * runs); never installed.
 *
 * It is the one GPU backend (backends/gpu/gpu_backend.hpp) on a runtime
 * table of its own (backends/emulated/emulated_runtime.hpp): every device
 * path CI tests is the code CUDA and HIP users run, but for the runtime calls.
 *
 * To the engine it is a device like CUDA:
 * - DLPack device type kDLExtDev ("reserved extension device type, for
 *   testing extension devices", dlpack.h), ordinals 0 and 1
 *   (KSTAGE_EMULATED_DEVICE_COUNT), so that device-to-device copies and
 *   ordinal checks have something to cross;
 * - memory in a separate arena per ordinal (not the heap), 64-byte aligned,
 *   and pinned host memory in an arena of its own (kstage_emulated_host_malloc);
 * - kernels and copies run later, in order, on a worker thread per stream:
 *   work that was not waited for is really not done yet;
 * - streams and events with CUDA's semantics: an event signals when the
 *   stream it was recorded on reaches it; a stream that waits on an event
 *   runs nothing after the wait until then; an event never recorded is
 *   complete; an event recorded on one ordinal may be waited on by a stream
 *   of the other.
 *
 * It is as strict as CUDA where a forgiving stand-in would hide a bug:
 * - stream-ordered reuse: a block freed on a stream (the backend's
 *   cudaFreeAsync) is handed out again by the next allocation on that stream
 *   at once, before the work before the free has run; another stream gets it
 *   only once the free has completed. Every block the stream-ordered
 *   allocator hands out is filled with KSTAGE_EMULATED_FRESH_BYTE in stream
 *   order, so a reader not ordered after the allocating stream sees the
 *   marker (or has its data overwritten by it);
 * - pageable copies: an asynchronous copy from pageable host memory reads its
 *   source when the call is made (the driver stages it), and the source must
 *   still be valid when the copy completes (checked under AddressSanitizer);
 *   one enqueued to a device behind unfinished work is counted
 *   (kstage_emulated_pageable_waits): CUDA may make that call wait for the stream;
 *   a copy to pageable host memory returns only once it is done. Pinned host
 *   memory is read and written in stream order;
 * - copy kinds: a copy whose kind (host to device, device to host, device to
 *   device) contradicts its pointers fails (cudaErrorInvalidMemcpyDirection);
 * - errors: a failing runtime call sets the calling thread's last error, which
 *   stays set until taken (cudaGetLastError), so a caller that forgets to
 *   clear it sees its next launch check fail;
 * - asynchronous faults (kstage_emulated_inject_fault): a kernel or copy that
 *   faults when it runs (an illegal address) makes its ordinal's context
 *   faulty: the error is sticky and surfaces at the next event query, stream
 *   synchronize, allocation, copy or launch, and nothing runs on that ordinal
 *   until kstage_emulated_device_reset. A launch that fails at launch time
 *   (too many resources) is refused by the launch and is not sticky; so is a
 *   failed allocation. Memory pools can be made unsupported, as some
 *   containers and sanitizers refuse them.
 * Two checks make it a test of the engine, not only of the data:
 * - under AddressSanitizer, arena memory is poisoned except while the
 *   device's own kernels and copies run, so host code that reads or writes
 *   device memory is reported;
 * - every launch checks that each pointer it is handed (data, index maps,
 *   masks, offsets, selected lists, row pointers) lies in its own arena or in
 *   pinned host memory: a kernel given other host memory calls the violation
 *   handler (default: print and abort).
 *
 * Handles are integers like kstage_device_sync_t's: a stream or an event is
 * the value these functions return; streams 1 and 2 (the legacy and the
 * per-thread default streams) are the default stream of the calling thread's
 * current device (ordinal 0 unless kstage's work set it). Functions that take
 * a handle refuse one they did not make.
 */
#ifndef KSTAGE_EMULATED_H_
#define KSTAGE_EMULATED_H_

#include <kstage/kstage.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KSTAGE_EMULATED_DEVICE_TYPE kDLExtDev
#define KSTAGE_EMULATED_DEVICE_COUNT 2
/** What every block of the stream-ordered allocator holds when the stream reaches its
 * allocation (CUDA leaves it undefined). */
#define KSTAGE_EMULATED_FRESH_BYTE 0xA5

/** Arena memory of `ordinal` (64-byte aligned), or NULL. Free with kstage_emulated_free. */
KSTAGE_API void* kstage_emulated_malloc(int32_t ordinal, size_t bytes);
/** Frees at once: synchronise first if work may still use it. */
KSTAGE_API void kstage_emulated_free(void* ptr);
/** Pinned host memory (cudaMallocHost): host memory the device reads and writes in stream
 * order. NULL when full. Free with kstage_emulated_host_free. */
KSTAGE_API void* kstage_emulated_host_malloc(size_t bytes);
KSTAGE_API void kstage_emulated_host_free(void* ptr);
/** The ordinal whose arena holds `ptr`, or -1. */
KSTAGE_API int32_t kstage_emulated_ordinal_of(const void* ptr);
/** Bytes allocated in `ordinal`'s arena and in use (by kstage and by tests): blocks the
 * stream-ordered pools cache after a free count as free. */
KSTAGE_API size_t kstage_emulated_live_bytes(int32_t ordinal);
/** Data copies between the host and `ordinal` enqueued by kstage's backend
 * (copy_from_host / copy_to_host; index uploads are not counted). */
KSTAGE_API void kstage_emulated_copy_counts(int32_t ordinal, uint64_t* host_to_device,
                                            uint64_t* device_to_host);

/** Host index arrays (index maps, masks' selections, offsets, row pointers, row maps)
 * kstage's backend uploaded to `ordinal`. */
KSTAGE_API uint64_t kstage_emulated_upload_count(int32_t ordinal);
/** Copies to `ordinal` from pageable host memory enqueued while their stream still had work
 * queued or running: where CUDA may stage the copy by waiting for the stream, so that the call
 * blocks its caller until the stream drains. Counted rather than waited for (a test holding
 * the stream would hang instead of failing). */
KSTAGE_API uint64_t kstage_emulated_pageable_waits(int32_t ordinal);
/** Pinned host blocks kstage's backend allocated through the runtime (cudaMallocHost): its
 * upload staging, which it recycles (kstage_emulated_host_malloc is not counted). */
KSTAGE_API uint64_t kstage_emulated_pinned_allocations(void);
/** Bytes of pinned host memory in use: kstage's staging blocks, cached or in flight, and the
 * tests' kstage_emulated_host_malloc blocks. */
KSTAGE_API size_t kstage_emulated_pinned_live_bytes(void);

KSTAGE_API uintptr_t kstage_emulated_stream_create(int32_t ordinal);
/** Synchronises, then destroys. */
KSTAGE_API void kstage_emulated_stream_destroy(uintptr_t stream);
/** Work enqueued on `stream` after this waits until kstage_emulated_stream_release. */
KSTAGE_API void kstage_emulated_stream_hold(uintptr_t stream);
KSTAGE_API void kstage_emulated_stream_release(uintptr_t stream);
KSTAGE_API void kstage_emulated_stream_synchronize(uintptr_t stream);
/** Waits for the work enqueued so far on every stream of device `ordinal`
 * (cudaDeviceSynchronize): what a consumer of an export made with no stream
 * ordering (DLPack's stream -1) does before it reads. */
KSTAGE_API void kstage_emulated_device_synchronize(int32_t ordinal);
KSTAGE_API void kstage_emulated_stream_wait_event(uintptr_t stream, uintptr_t event);
/** Copies on `stream` (cudaMemcpyDefault: either side may be arena or host memory), with
 * the pageable rules above. 0, or the runtime's error code (nonzero). */
KSTAGE_API int kstage_emulated_memcpy_async(uintptr_t stream, void* dst, const void* src,
                                            size_t bytes);
/** kstage_emulated_memcpy_async on the default stream of the device pointer's ordinal, then
 * synchronise. */
KSTAGE_API int kstage_emulated_memcpy(void* dst, const void* src, size_t bytes);
/** Copy kinds (cudaMemcpyKind's values). */
typedef enum kstage_emulated_copy_kind_t {
  KSTAGE_EMULATED_HOST_TO_DEVICE = 1,
  KSTAGE_EMULATED_DEVICE_TO_HOST = 2,
  KSTAGE_EMULATED_DEVICE_TO_DEVICE = 3,
  KSTAGE_EMULATED_COPY_DEFAULT = 4
} kstage_emulated_copy_kind_t;
/** kstage_emulated_memcpy_async with an explicit kind: a kind that contradicts the pointers
 * fails (nonzero: cudaErrorInvalidMemcpyDirection) and copies nothing. */
KSTAGE_API int kstage_emulated_memcpy_kind_async(uintptr_t stream, void* dst, const void* src,
                                                 size_t bytes, kstage_emulated_copy_kind_t kind);
/** Runs `fn(data)` on the host in stream order (cudaLaunchHostFunc): 0 or an error code. */
KSTAGE_API int kstage_emulated_launch_host_func(uintptr_t stream, void (*fn)(void*), void* data);

KSTAGE_API uintptr_t kstage_emulated_event_create(void);
KSTAGE_API void kstage_emulated_event_destroy(uintptr_t event);
KSTAGE_API void kstage_emulated_event_record(uintptr_t event, uintptr_t stream);
/** 1 when every work recorded into `event` so far is done (or it was never recorded). */
KSTAGE_API int kstage_emulated_event_query(uintptr_t event);
KSTAGE_API void kstage_emulated_event_synchronize(uintptr_t event);

/** A CUDA graph capture in global mode (cudaStreamBeginCapture with
 * cudaStreamCaptureModeGlobal, as torch.cuda.graph opens one) as the rest of the process sees
 * it: until kstage_emulated_capture_end, any call on the legacy default stream (handle 1: a
 * copy, launch, event record or wait, query, synchronisation, stream-ordered allocation or
 * free) is refused (cudaErrorStreamCaptureImplicit), a device-wide synchronisation too
 * (cudaErrorStreamCaptureUnsupported), and either invalidates the capture. Nothing is
 * captured: other streams, the per-thread default stream (2) included, run as before. */
KSTAGE_API void kstage_emulated_capture_begin(void);
/** Ends it: 0 when the capture stayed valid, nonzero when a call invalidated it. */
KSTAGE_API int kstage_emulated_capture_end(void);

/** Every kernel and copy first sleeps `us` microseconds (0: none): slow device work. */
KSTAGE_API void kstage_emulated_set_kernel_delay_us(uint32_t us);
typedef void (*kstage_emulated_violation_fn)(const char* message);
/** Replaces the handler of the arena check (NULL: print and abort); returns the old one. */
KSTAGE_API kstage_emulated_violation_fn
kstage_emulated_set_violation_handler(kstage_emulated_violation_fn f);

/** Faults a test injects into one ordinal (each fires once, on the nth matching call). */
typedef enum kstage_emulated_fault_t {
  /** The nth kernel launched faults when it runs: sticky cudaErrorIllegalAddress. */
  KSTAGE_EMULATED_FAULT_KERNEL = 1,
  /** The nth copy faults when it runs: sticky cudaErrorIllegalAddress. */
  KSTAGE_EMULATED_FAULT_COPY = 2,
  /** The nth launch is refused at launch (cudaErrorLaunchOutOfResources): not sticky. */
  KSTAGE_EMULATED_FAULT_LAUNCH = 3,
  /** The nth stream-ordered allocation fails (cudaErrorMemoryAllocation): not sticky. */
  KSTAGE_EMULATED_FAULT_ALLOC = 4
} kstage_emulated_fault_t;
/** Arms `fault` on `ordinal` for the `nth` (>= 1) matching call from now: 1 when armed. */
KSTAGE_API int kstage_emulated_inject_fault(int32_t ordinal, kstage_emulated_fault_t fault,
                                            uint32_t nth);
/** The sticky error of `ordinal`'s context (0: none). */
KSTAGE_API int kstage_emulated_device_status(int32_t ordinal);
/** Clears `ordinal`'s sticky error, its armed faults, and makes memory pools supported
 * (unlike cudaDeviceReset, nothing is freed: tests go on in the same process). */
KSTAGE_API void kstage_emulated_device_reset(int32_t ordinal);
/** Whether `ordinal` supports stream-ordered memory pools (default 1): with 0, pool creation
 * and stream-ordered allocations fail with cudaErrorNotSupported. */
KSTAGE_API void kstage_emulated_set_pools_supported(int32_t ordinal, int supported);

#ifdef __cplusplus
}
#endif

#endif /* KSTAGE_EMULATED_H_ */
