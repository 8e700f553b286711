/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage_emulated.h
 * \brief The emulated device: a GPU stand-in for testing kstage's device
 * paths on machines without one. Test builds only (CMake option
 * KSTAGE_EMULATED_DEVICE, off by default, on in the presets scripts/test.sh
 * runs); never installed.
 *
 * To the engine it is a device like CUDA:
 * - DLPack device type kDLExtDev ("reserved extension device type, for
 *   testing extension devices", dlpack.h), ordinals 0 and 1
 *   (KSTAGE_EMULATED_DEVICE_COUNT), so that device-to-device copies and
 *   ordinal checks have something to cross;
 * - memory in a separate arena per ordinal (not the heap), 64-byte aligned;
 * - kernels and copies run later, in order, on a worker thread per stream:
 *   work that was not waited for is really not done yet;
 * - streams and events with CUDA's semantics: an event signals when the
 *   stream it was recorded on reaches it; a stream that waits on an event
 *   runs nothing after the wait until then; an event never recorded is
 *   complete.
 * Two checks make it a test of the engine, not only of the data:
 * - under AddressSanitizer, arena memory is poisoned except while the
 *   device's own kernels and copies run, so host code that reads or writes
 *   device memory is reported;
 * - every launch checks that each pointer it is handed (data, index maps,
 *   masks, offsets, selected lists, row pointers) lies in its own arena: a
 *   kernel given a host array calls the violation handler (default: print
 *   and abort).
 *
 * Handles are integers like kstage_device_sync_t's: a stream or an event is
 * the value these functions return; stream 1 is the ordinal-0 device's
 * default stream. Functions that take a handle refuse one they did not make.
 */
#ifndef KSTAGE_EMULATED_H_
#define KSTAGE_EMULATED_H_

#include <kstage/kstage.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KSTAGE_EMULATED_DEVICE_TYPE kDLExtDev
#define KSTAGE_EMULATED_DEVICE_COUNT 2

/** Arena memory of `ordinal` (64-byte aligned), or NULL. Free with kstage_emulated_free. */
KSTAGE_API void* kstage_emulated_malloc(int32_t ordinal, size_t bytes);
/** Frees at once: synchronise first if work may still use it. */
KSTAGE_API void kstage_emulated_free(void* ptr);
/** The ordinal whose arena holds `ptr`, or -1. */
KSTAGE_API int32_t kstage_emulated_ordinal_of(const void* ptr);
/** Bytes allocated in `ordinal`'s arena (by kstage and by tests). */
KSTAGE_API size_t kstage_emulated_live_bytes(int32_t ordinal);
/** Data copies between the host and `ordinal` enqueued by kstage's backend
 * (copy_from_host / copy_to_host; index uploads are not counted). */
KSTAGE_API void kstage_emulated_copy_counts(int32_t ordinal, uint64_t* host_to_device,
                                            uint64_t* device_to_host);

/** Host index arrays (index maps, masks' selections, offsets, row pointers, row maps)
 * kstage's backend uploaded to `ordinal`. */
KSTAGE_API uint64_t kstage_emulated_upload_count(int32_t ordinal);

KSTAGE_API uintptr_t kstage_emulated_stream_create(int32_t ordinal);
/** Synchronises, then destroys. */
KSTAGE_API void kstage_emulated_stream_destroy(uintptr_t stream);
/** Work enqueued on `stream` after this waits until kstage_emulated_stream_release. */
KSTAGE_API void kstage_emulated_stream_hold(uintptr_t stream);
KSTAGE_API void kstage_emulated_stream_release(uintptr_t stream);
KSTAGE_API void kstage_emulated_stream_synchronize(uintptr_t stream);
KSTAGE_API void kstage_emulated_stream_wait_event(uintptr_t stream, uintptr_t event);
/** Copies on `stream`; either side may be arena or host memory. */
KSTAGE_API void kstage_emulated_memcpy_async(uintptr_t stream, void* dst, const void* src,
                                             size_t bytes);
/** kstage_emulated_memcpy_async on the default stream of `ptr`'s ordinal, then synchronise. */
KSTAGE_API void kstage_emulated_memcpy(void* dst, const void* src, size_t bytes);

KSTAGE_API uintptr_t kstage_emulated_event_create(void);
KSTAGE_API void kstage_emulated_event_destroy(uintptr_t event);
KSTAGE_API void kstage_emulated_event_record(uintptr_t event, uintptr_t stream);
/** 1 when every work recorded into `event` so far is done (or it was never recorded). */
KSTAGE_API int kstage_emulated_event_query(uintptr_t event);
KSTAGE_API void kstage_emulated_event_synchronize(uintptr_t event);

/** Every kernel and copy first sleeps `us` microseconds (0: none): slow device work. */
KSTAGE_API void kstage_emulated_set_kernel_delay_us(uint32_t us);
typedef void (*kstage_emulated_violation_fn)(const char* message);
/** Replaces the handler of the arena check (NULL: print and abort); returns the old one. */
KSTAGE_API kstage_emulated_violation_fn kstage_emulated_set_violation_handler(kstage_emulated_violation_fn f);

#ifdef __cplusplus
}
#endif

#endif /* KSTAGE_EMULATED_H_ */
