/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage/kstage_arrow.h
 * \brief kstage to Apache Arrow: a read group as an Arrow C Device Data Interface array,
 * zero-copy where the memory allows, for pyarrow, polars, pandas, DuckDB and any other consumer
 * of Arrow's C interfaces -- also for ragged and STRING attributes, which DLPack cannot carry.
 *
 * Part of libkstage itself: the Arrow structs below are a stable ABI that the Arrow
 * specification defines to be copied into each project, so no Arrow library is needed.
 *
 * What a group becomes (its prims are the array's rows, in group order; no nulls):
 *
 *   column                               Arrow type (format string)
 *   fixed-size, 1 lane                   the primitive: int8..int64 "c" "s" "i" "l", uint8..uint64
 *                                        "C" "S" "I" "L", float16/32/64 "e" "f" "g"; bool (8-bit)
 *                                        is Arrow's bit-packed boolean "b" (a host copy)
 *   fixed-size, L lanes                  FixedSizeList<primitive>[L] "+w:L"
 *   array (ragged) of 1-lane elements    LargeList<primitive> "+L" (int64 offsets)
 *   array of L-lane elements             LargeList<FixedSizeList<primitive>[L]>
 *   array, semantic STRING               LargeString "U" (int64 offsets, the UTF-8 bytes)
 *   TOKEN_ID, PATH_ID (uint64, 1 lane)   uint64 "L" (the ids, as kstage_token_t / kstage_path_t)
 *
 * With KSTAGE_ARROW_PATH_IDS or KSTAGE_ARROW_PATH_STRINGS the array is a struct "+s" of two
 * fields: "path" (the prims: uint64 ids, or their path strings dictionary-encoded, int32
 * indices into a LargeString dictionary) and the attribute's column, named by the attribute.
 * Without them it is the column itself, named by the attribute. Field metadata is not used:
 * kstage's semantic travels as the field's name only (see kstage_attribute_info for the rest).
 *
 * Zero-copy: the values of a group whose rows are its prims in order -- a fixed-size group
 * with no index_map; an array group whose rows lie back to back, which kstage's layout gives
 * where every row's byte length is a multiple of 8 (ragged rows start on 8-byte boundaries) --
 * are the group's own memory. Otherwise they are gathered once into the export's own buffer, in
 * the group's memory (one kernel on a device). Offsets and path columns are the export's own
 * small buffers, in the group's memory too. Like a DLPack export, the array keeps the group's
 * data alive after kstage_release_group, until its release callback runs: exactly once, by the
 * consumer (children moved out of it are released by whoever moved them, as the specification
 * says). The ArrowSchema is independent and has its own release.
 *
 * Device groups: the array's device_type and device_id are the group's DLPack device (Arrow's
 * device types are DLPack's); sync_event points to an event of that device (a cudaEvent_t,
 * hipEvent_t: kstage_device_sync_t.event's kind) that completes after the group's data and the
 * export's own device work, or is NULL when there is nothing to wait for. The consumer waits on
 * it before it reads the buffers, which stay valid until release.
 *
 * Releasing device arrays: who orders the release after the consumer's reads. The C Device Data
 * Interface orders one way only -- sync_event, producer to consumer -- and gives the release no
 * stream: the consumer may call it (or drop a moved child) right after enqueueing its last read,
 * on any stream, without synchronising (the specification's own example releases with cudaFree,
 * which waits for the device). So the producer owns that ordering, and kstage keeps it: the last
 * release of a device export waits until every stream of the device has run the work enqueued on
 * it before the release (cudaDeviceSynchronize / hipDeviceSynchronize), and only then lets the
 * memory go to kstage's stream-ordered allocator. The release therefore blocks its thread while
 * the device is busy -- as a release that calls cudaFree does -- and must not be called where a
 * device-wide wait is not allowed (inside a CUDA graph capture) or from a host function on a
 * stream of the device. A consumer that wants no wait synchronises first, then releases (the
 * wait then returns at once). A host array's release never waits.
 *
 * Errors: INVALID_HANDLE (stage, group), INVALID_ARGUMENT (a NULL out-pointer, a tombstone
 * group, unknown flags), NOT_SUPPORTED naming the attribute and dtype (bfloat16 and complex have
 * no Arrow type; bool on a device: Arrow's boolean is bit-packed, which the export does on the
 * host only), OUT_OF_MEMORY. On failure *schema and *array are left untouched.
 */
#ifndef KSTAGE_KSTAGE_ARROW_H_
#define KSTAGE_KSTAGE_ARROW_H_

#include <kstage/kstage.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The Arrow C Data Interface and C Device Data Interface structs, exactly as the Arrow
 * specification states them (https://arrow.apache.org/docs/format/CDataInterface.html, "Structure
 * definitions", and https://arrow.apache.org/docs/format/CDeviceDataInterface.html, "Structure
 * definitions"), under the specification's own include guards, so that a translation unit that
 * also includes Arrow's, nanoarrow's or another project's copy sees one definition.
 */
/** \cond ARROW_SPECIFICATION (the specification documents these; not kstage's API reference) */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  /* Array type description */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;

  /* Release callback */
  void (*release)(struct ArrowSchema*);
  /* Opaque producer-specific data */
  void* private_data;
};

struct ArrowArray {
  /* Array data description */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;

  /* Release callback */
  void (*release)(struct ArrowArray*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

/* Spec and documentation: https://arrow.apache.org/docs/format/CDeviceDataInterface.html */

/* DeviceType for the allocated memory */
typedef int32_t ArrowDeviceType;

/* CPU device, same as using ArrowArray directly instead of ArrowDeviceArray */
#define ARROW_DEVICE_CPU 1
/* CUDA GPU Device */
#define ARROW_DEVICE_CUDA 2
/* Pinned CUDA CPU memory by cudaMallocHost */
#define ARROW_DEVICE_CUDA_HOST 3
/* OpenCL Device */
#define ARROW_DEVICE_OPENCL 4
/* Vulkan buffer for next-gen graphics */
#define ARROW_DEVICE_VULKAN 7
/* Metal for Apple GPU */
#define ARROW_DEVICE_METAL 8
/* Verilog simulator buffer */
#define ARROW_DEVICE_VPI 9
/* ROCm GPUs for AMD GPUs */
#define ARROW_DEVICE_ROCM 10
/* Pinned ROCm CPU memory allocated by hipMallocHost */
#define ARROW_DEVICE_ROCM_HOST 11
/* Reserved for extension */
#define ARROW_DEVICE_EXT_DEV 12
/* CUDA managed/unified memory allocated by cudaMallocManaged */
#define ARROW_DEVICE_CUDA_MANAGED 13
/* unified shared memory allocated on a Intel GPU */
#define ARROW_DEVICE_ONEAPI 14
/* GPU support for next-gen WebGPU standard */
#define ARROW_DEVICE_WEBGPU 15
/* Qualcomm Hexagon DSP */
#define ARROW_DEVICE_HEXAGON 16

struct ArrowDeviceArray {
  /* the Allocated Array */
  /* the buffers in the array (along with the buffers of any children) are what is allocated on
   * the device. */
  struct ArrowArray array;
  /* The device id to identify a specific device */
  int64_t device_id;
  /* The type of device which can access this memory. */
  ArrowDeviceType device_type;
  /* An event-like object to synchronize on if needed. */
  void* sync_event;
  /* Reserved bytes for future expansion. */
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */
/** \endcond */

/** Flag of kstage_group_export_arrow: a struct array of "path" (uint64 path ids) and the column. */
#define KSTAGE_ARROW_PATH_IDS ((uint64_t)1 << 0)
/** Flag of kstage_group_export_arrow: a struct array of "path" (the prims' path strings,
 * dictionary-encoded: int32 indices into a LargeString dictionary) and the column. */
#define KSTAGE_ARROW_PATH_STRINGS ((uint64_t)1 << 1)

/**
 * \brief Export a read group as an Arrow array and its schema (see the file's documentation
 * for the types). `schema` and `array` are the caller's structs, filled on success; each gets
 * its own release callback, which the consumer calls once. A host group's array is
 * device_type ARROW_DEVICE_CPU with sync_event NULL, so `&array->array` may also be used as a
 * plain ArrowArray. The group may be released at once: the export keeps its data.
 * (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_group_export_arrow(kstage_stage_t stage, kstage_group_t group,
                                                     uint64_t flags, struct ArrowSchema* schema,
                                                     struct ArrowDeviceArray* array);

/**
 * \brief Read `attributes` (n of them, distinct tokens) of `query`'s prims as one Arrow record
 * batch: a struct array whose row i is query prim i, with a column per attribute, named by it,
 * after a "path" column when `flags` asks for one (as kstage_group_export_arrow). `desc` is the
 * read's (NULL: the latest sealed values; a change range leaves the prims that did not change
 * null). A column is its read group's own memory, zero-copy as in kstage_group_export_arrow,
 * when one group holds it for every query prim in query order; otherwise it is gathered into
 * memory of the export's own, nullable, with a null for each prim that does not hold the
 * attribute (a column no prim holds is Arrow's null type). Gathering happens on the host: a
 * batch of device columns that would need it is NOT_SUPPORTED (read to the host with
 * desc->target_device kDLCPU), as is a batch whose columns are on different devices. The read
 * is the call's own: nothing needs releasing but the structs. Errors as kstage_read_attributes
 * and kstage_group_export_arrow; INVALID_ARGUMENT when n is 0. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_read_export_arrow(kstage_stage_t stage, kstage_query_t query,
                                                    const kstage_token_t* attributes, uint64_t n,
                                                    const kstage_read_desc_t* desc, uint64_t flags,
                                                    struct ArrowSchema* schema,
                                                    struct ArrowDeviceArray* array);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KSTAGE_KSTAGE_ARROW_H_ */
