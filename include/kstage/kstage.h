/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage/kstage.h
 * \brief The kstage C API: a columnar attribute store with DLPack tensor exchange.
 *
 * A *stage* holds *prims* (entities named by paths) and their *attributes* (typed
 * columns). Writers hand data in as DLPack tensors at an application-chosen
 * ordinal; advancing the write floor *seals* it; readers observe only sealed
 * state, as DLPack tensors that stay valid until they release them.
 *
 * Conventions, for every function below:
 * - Each function returns a ::kstage_status_t. On failure, kstage_last_error()
 *   gives the calling thread's message for that call; out-parameters are written
 *   only on success. No function throws or aborts on any input.
 * - Handles are `uint64_t`; 0 is never valid. A handle that is unknown, of the
 *   wrong kind, released, or belongs to a destroyed stage gives
 *   ::KSTAGE_INVALID_HANDLE.
 * - Every function may be called from several threads on the same stage.
 * - Pointers marked *host* must be readable by the CPU. Counts are elements,
 *   not bytes, unless they say otherwise.
 * - Alignment: every buffer kstage allocates, on every residency -- column
 *   storage, compact read buffers, map buffers -- starts at a 64-byte
 *   boundary (KSTAGE_BUFFER_ALIGNMENT; XLA/JAX need it to import CPU memory
 *   without a copy, and AVX-512 kernels want it). So the tensor of a
 *   fixed-size read group (zero-copy or compact) or map group, and row 0 of a
 *   compact array read group or array map group, start 64-byte aligned; later
 *   rows of array buffers start at 8-byte boundaries. Exception: a column
 *   whose storage is an adopted producer buffer (a dense managed write, see
 *   kstage_write_data_t) keeps the producer's alignment until a write
 *   replaces it.
 *
 * Versioning and compatibility (in the manner of dlpack.h):
 * - KSTAGE_VERSION_* below is the version of this header; kstage_version() the
 *   version of the library a program runs against. From 1.0, kstage follows
 *   semantic versioning: within one major version a program compiled against
 *   an older kstage.h runs unchanged against a newer libkstage (the shared
 *   library's soname carries the major version). Before 1.0, the soname
 *   carries MAJOR.MINOR and each minor version may change the ABI.
 * - Within a major version: functions are only added; enumerations only gain
 *   values (treat a status you do not know as a failure); the *extensible
 *   descriptors* -- kstage_config_t, kstage_write_data_t, kstage_read_desc_t,
 *   kstage_map_desc_t, kstage_attribute_info_t, kstage_filter_ex_t and
 *   kstage_transform_desc_t -- only gain fields,
 *   appended at or after the end of the previous version's struct. Every
 *   other struct (kstage_data_t, kstage_read_group_t, kstage_map_group_info_t,
 *   kstage_filter_t, kstage_device_sync_t, kstage_path_span_t,
 *   kstage_hierarchy_item_t, kstage_predicate_t) keeps its layout for the whole major version;
 *   what they cannot carry comes through new functions.
 * - Extensible descriptors begin with `uint32_t struct_size`, which the
 *   caller sets to sizeof the struct as its kstage.h declares it: use the
 *   kstage_*_init() functions below, which also zero every other field (zero
 *   is the default of every field). struct_size may be any value from the
 *   descriptor's first released layout (kstage_config_t 8 bytes,
 *   kstage_write_data_t 80, kstage_read_desc_t, kstage_map_desc_t and
 *   kstage_attribute_info_t 48, kstage_filter_ex_t 24, kstage_transform_desc_t 32) to
 *   KSTAGE_MAX_STRUCT_SIZE, a multiple of the struct's alignment or not; any
 *   other (0 included) is KSTAGE_INVALID_ARGUMENT. The library reads exactly
 *   struct_size bytes. A smaller struct than the library's means an older
 *   caller: a field that does not lie wholly inside struct_size is absent and
 *   takes its zero default -- so a byte of it that does lie inside must be 0
 *   (else KSTAGE_INVALID_ARGUMENT naming the byte). A larger one means a
 *   newer caller: accepted when every byte the library does not know is zero,
 *   else KSTAGE_NOT_SUPPORTED naming the first such byte. Fields named
 *   `reserved` must be zero. A descriptor the library fills
 *   (kstage_attribute_info_t) takes the same struct_size values: the library
 *   writes exactly struct_size bytes, the fields it knows that lie wholly
 *   inside and zeros for every other byte.
 * - Whatever a write call returns, each managed and legacy managed tensor it
 *   was handed is deleted exactly once when its field lies inside the
 *   caller's struct: wholly inside an accepted struct_size, or, for a
 *   struct_size kstage.h rejects (which says nothing of the caller's struct),
 *   inside this header's struct, which is then read whole.
 * - Arrays of descriptors (kstage_write_attributes) are laid out with the
 *   caller's struct size: element i starts struct_size * i bytes in, and
 *   every element must carry the same struct_size.
 */
#ifndef KSTAGE_KSTAGE_H_
#define KSTAGE_KSTAGE_H_

/* DLPack >= 1.0 (found by CMake as dlpack::dlpack). In C its versioned
 * tensor is `struct DLManagedTensorVersioned` (the header has no typedef). */
#include <dlpack/dlpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * \brief Marks the functions libkstage exports. The library is built with
 * hidden visibility, so these declarations are its whole dynamic interface.
 */
#ifndef KSTAGE_API
#if defined(__GNUC__)
#define KSTAGE_API __attribute__((visibility("default")))
#else
#define KSTAGE_API
#endif
#endif

/** \brief The alignment in bytes of every buffer kstage allocates (see Conventions). */
#define KSTAGE_BUFFER_ALIGNMENT 64

/** \brief Major version of this header; kstage_version() gives the library's (see
 * "Versioning and compatibility"). */
#define KSTAGE_VERSION_MAJOR 0
/** \brief Minor version of this header. */
#define KSTAGE_VERSION_MINOR 4
/** \brief Patch version of this header. */
#define KSTAGE_VERSION_PATCH 0

/** The largest struct_size any extensible descriptor may have (see
 * "Extensible descriptors" above): no kstage.h will declare a larger one. */
#define KSTAGE_MAX_STRUCT_SIZE 65536u

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */

/** \brief Result of every call. Stored as int32_t so the ABI does not depend on enum size. */
typedef int32_t kstage_status_t;
enum {
  KSTAGE_OK = 0,                    /**< success */
  KSTAGE_INVALID_ARGUMENT = 1,      /**< an input is malformed or inconsistent */
  KSTAGE_INVALID_HANDLE = 2,        /**< unknown, stale, released or wrong-kind handle */
  KSTAGE_NOT_FOUND = 3,             /**< UPDATE of a missing prim; unknown id */
  KSTAGE_ALREADY_EXISTS = 4,        /**< INSERT of an existing prim */
  KSTAGE_WRITE_FLOOR_VIOLATION = 5, /**< mutation ordinal <= the attribute's write floor */
  KSTAGE_NOT_SUPPORTED = 6,         /**< valid request this build cannot serve (device type, ...) */
  KSTAGE_END_OF_ITERATION = 7,      /**< no more groups; not an error */
  KSTAGE_TIMEOUT = 8,               /**< the wait ran out; the op or read is still pending */
  KSTAGE_OUT_OF_MEMORY = 9,         /**< a host or device allocation failed */
  KSTAGE_OUT_OF_RANGE = 10, /**< a change range cannot be answered (changed again after it) */
  KSTAGE_OP_FAILED = 11,    /**< an op failed for a reason with no code of its own */
  KSTAGE_DEVICE_ERROR = 12, /**< the device runtime reported an error */
  KSTAGE_INTERNAL = 13      /**< a bug in kstage; please report it with the message */
};

/** \brief Static name of a status code ("KSTAGE_OK", ...); "KSTAGE_UNKNOWN_STATUS" otherwise. */
KSTAGE_API const char* kstage_status_string(kstage_status_t status);

/**
 * \brief The calling thread's message for its last failed call ("" if none).
 * The pointer stays valid until this thread's next kstage call.
 */
KSTAGE_API const char* kstage_last_error(void);

/** \brief Library version as MAJOR*10000 + MINOR*100 + PATCH. */
KSTAGE_API uint32_t kstage_version(void);

/* ------------------------------------------------------------------------- */
/* Handles and ids                                                           */
/* ------------------------------------------------------------------------- */

typedef uint64_t kstage_stage_t;     /**< a stage */
typedef uint64_t kstage_path_list_t; /**< a refcounted, immutable array of path ids */
typedef uint64_t kstage_query_t;     /**< a fixed, ordered list of prims */
typedef uint64_t kstage_read_t;      /**< an open read (iterates groups) */
typedef uint64_t kstage_group_t;     /**< one read group (pins its snapshot data) */
typedef uint64_t kstage_op_t;        /**< a submitted mutation */
typedef uint64_t kstage_map_t;       /**< an open map (writable buffers for one attribute) */
typedef uint64_t kstage_map_group_t; /**< one group of a map */
typedef uint64_t kstage_token_t;     /**< interned attribute name; 0 is invalid */
typedef uint64_t kstage_path_t;      /**< interned prim path; 0 is invalid */
typedef uint64_t kstage_hierarchy_t; /**< a hierarchy answer (kstage_query_hierarchy) */

/** \brief Pass as a string length to mean "NUL-terminated". */
#define KSTAGE_NUL_TERMINATED ((size_t)-1)
/** \brief Timeout that blocks until the awaited thing is ready. 0 polls. */
#define KSTAGE_TIMEOUT_INFINITE UINT64_MAX

/* ------------------------------------------------------------------------- */
/* Enumerations (stored as int32_t)                                           */
/* ------------------------------------------------------------------------- */

/**
 * \brief What the bytes of a column mean; orthogonal to its dtype.
 *
 * Semantics from TOKEN_ID on fix the column's layout, as ovstage's do (a
 * write or map that creates a column declares its kind and dtype, and one
 * that does not fit is refused KSTAGE_INVALID_ARGUMENT naming the semantic
 * and the layout it needs; an existing column's layout and semantic are
 * checked against the write's either way). "Fixed or array" means either
 * kind; the layout is then that of one value (fixed) or one element (array).
 * Ids are this stage's: kstage_token_t values from kstage_intern_token,
 * kstage_path_t values from kstage_intern_path; 0 means none (no token, no
 * path). kstage never converts between strings and ids.
 */
typedef int32_t kstage_semantic_t;
enum {
  KSTAGE_SEMANTIC_NONE = 0,       /**< no particular meaning */
  KSTAGE_SEMANTIC_POINT = 1,      /**< a position */
  KSTAGE_SEMANTIC_VECTOR = 2,     /**< a direction or displacement */
  KSTAGE_SEMANTIC_NORMAL = 3,     /**< a surface normal */
  KSTAGE_SEMANTIC_COLOR = 4,      /**< a colour */
  KSTAGE_SEMANTIC_QUATERNION = 5, /**< (x, y, z, w) */
  KSTAGE_SEMANTIC_MATRIX = 6,     /**< row-major */
  KSTAGE_SEMANTIC_TEXCOORD = 7,   /**< a texture coordinate */
  KSTAGE_SEMANTIC_TOKEN_ID = 8,   /**< uint64 lanes 1, fixed or array: kstage_token_t values */
  KSTAGE_SEMANTIC_PATH_ID = 9,    /**< uint64 lanes 1, fixed or array: kstage_path_t values */
  KSTAGE_SEMANTIC_STRING = 10,    /**< array kind, 8-bit lanes 1: UTF-8 bytes */
  /** uint64 lanes 2, fixed or array (USD asset, asset[]): word 0 the authored asset path, word 1
   *  the resolved one, each a kstage_token_t of the path's text (0: no path; kstage resolves
   *  nothing). Not a prim path: a clone copies it as it is. ovstage's ASSET_PATH_ID. */
  KSTAGE_SEMANTIC_ASSET_PATH_ID = 11,
  /** uint64 lanes 1, fixed or array (USD pathExpression, pathExpression[]): kstage_token_t
   *  values, each an expression's text (0: no expression). ovstage's PATH_EXPRESSION_STRING. */
  KSTAGE_SEMANTIC_PATH_EXPRESSION_ID = 12,
  /** uint64 lanes 1, fixed or array (a USD relationship's targets; usually an array):
   *  kstage_path_t values. A clone rebases every word, as for PATH_ID. */
  KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID = 13,
  /** array kind, uint64 lanes 2 (a USD attribute's connections, one element per target): word 0
   *  the connected prim's kstage_path_t, word 1 the connected attribute's kstage_token_t. A clone
   *  rebases word 0 and keeps word 1. */
  KSTAGE_SEMANTIC_CONNECTION_PATH_ID = 14,
  /** float64 lanes 1, fixed or array (USD timecode, timecode[]): time codes. */
  KSTAGE_SEMANTIC_TIME_CODE = 15,
  /** float64 lanes 16, fixed or array (USD frame4d): a row-major 4x4 coordinate frame, laid out
   *  as MATRIX but a role of its own (a MATRIX write to a FRAME column is refused). */
  KSTAGE_SEMANTIC_FRAME = 16
};

/** \brief How a write treats prims that do or do not exist yet. */
typedef int32_t kstage_prim_mode_t;
enum {
  KSTAGE_PRIM_MODE_UPSERT = 0, /**< create missing prims, update existing ones */
  KSTAGE_PRIM_MODE_INSERT = 1, /**< create only; any existing prim -> KSTAGE_ALREADY_EXISTS */
  KSTAGE_PRIM_MODE_UPDATE = 2  /**< existing only; any missing prim -> KSTAGE_NOT_FOUND */
};

/**
 * \brief What a write or map does to a prim that holds its attribute with another schema
 * (kind, dtype or semantic). A name may hold several schemas on different prims, one column
 * each; a prim holds one value per name. (Added in 0.4; ovstage's AttributeMode.)
 */
typedef int32_t kstage_attribute_mode_t;
enum {
  /** Refused (KSTAGE_INVALID_ARGUMENT naming the prim and both schemas), the stage unchanged.
   * Also refused: a write that would make a pending REJECT write at a later ordinal change a
   * prim's schema. */
  KSTAGE_ATTRIBUTE_MODE_REJECT = 0,
  /** The prim's value is replaced, schema and all: at the write's ordinal the prim loses the
   * attribute in its old schema's column (a change range shows that as a deletion) and holds the
   * new value in the written schema's column. The prim exists throughout. Read groups held
   * across it keep the values they were handed (copy-on-write: nothing is refused for them). */
  KSTAGE_ATTRIBUTE_MODE_FORCE = 1
};

/** \brief Host execution space the stage runs its kernels on. */
typedef int32_t kstage_host_execution_t;
enum {
  KSTAGE_HOST_EXECUTION_DEFAULT = 0, /**< the build's default (see README) */
  KSTAGE_HOST_EXECUTION_SERIAL = 1,  /**< Kokkos::Serial */
  KSTAGE_HOST_EXECUTION_PARALLEL = 2 /**< Kokkos::OpenMP (or Threads) if enabled */
};

/* ------------------------------------------------------------------------- */
/* Structures                                                                */
/* ------------------------------------------------------------------------- */

/**
 * \brief GPU synchronisation handles (CUDA or HIP), as integers.
 * stream (the values of the Python array API's `__dlpack__(stream=...)`):
 *   - 0: none (no ordering through a stream);
 *   - 1: the legacy default stream (cudaStreamLegacy; HIP's null stream);
 *   - 2: the per-thread default stream (cudaStreamPerThread / hipStreamPerThread);
 *   - anything else: a cudaStream_t / hipStream_t of the device the data is on.
 * event: 0 = none, else a cudaEvent_t / hipEvent_t.
 * kstage cannot check a handle it is given: a value that is not a live stream
 * or event of that device is undefined behaviour, as it is for the runtime.
 *
 * The rules (also in docs/gpus.md, "Streams and events"):
 * - Write and unmap (`device_sync`, `done_sync`): kstage orders its own work
 *   after the producer's `event` -- or, with event 0, after all work enqueued
 *   on `stream` so far -- with a stream wait, never a host block. The call
 *   returns at once; its op completes when kstage's copies out of the
 *   caller's tensors have run (kstage_wait on the host; kstage_op_sync
 *   orders a stream or records an event after them on the device).
 * - Read (`desc.device_sync`): a non-zero `event` is recorded after kstage's
 *   work that produces the groups' data; a non-zero `stream` is made to wait
 *   for that work. Each read group carries in `data.device_sync` the
 *   stage's own {stream, event} (the event signals when the group's data is
 *   complete), or {0, 0} when the data is already complete. Consumers of
 *   device data wait on it before touching the data; the event is valid
 *   until the group is released.
 * - Map groups come with {0, 0}: kstage_map_attribute returns once the
 *   stage's stream has passed the allocation of their device buffers (a
 *   stream-ordered allocator may hand out a block freed on that stream with
 *   work still queued before the free), so no kstage work is pending on them
 *   and any stream or the host may fill them at once.
 * - Releases of device groups: kstage frees a group's memory in the order of
 *   its own stream, which knows nothing of the consumer's, and may reuse it
 *   for its next allocation at once. A consumer that reads a group (or an
 *   export of it) on another stream lets it go -- kstage_release_group, an
 *   export's deleter -- only once that work has completed (synchronise its
 *   stream or event first), or exports with kstage_group_export_on_stream,
 *   whose deleter orders the release after the consumer's stream itself (or,
 *   for KSTAGE_STREAM_UNORDERED, after the whole device). An Arrow device
 *   array's release (kstage_arrow.h) waits for the whole device itself: the
 *   Arrow interface names no consumer stream.
 * - Work that stays on the host -- host data written to a host column, a
 *   read whose data lands on the host, host map buffers unmapped -- takes
 *   {0, 0} and gives {0, 0}: any other value there is KSTAGE_INVALID_ARGUMENT
 *   naming the field (`device_sync`, `desc.device_sync`, `done_sync`). On
 *   CUDA and HIP a stream or event handle that is not live is undefined
 *   behaviour (the runtimes do not check handles); the emulated device's
 *   runtime refuses one it does not know with INVALID_ARGUMENT, as a
 *   courtesy to tests, not as a promise of the other backends.
 * - Reads that land on the host (a host column, or target_device = CPU)
 *   return complete data: the copy down is waited for inside
 *   kstage_read_attributes. kstage_fetch_read_next never blocks.
 */
typedef struct kstage_device_sync_t {
  /** 0 (none), 1 (legacy default), 2 (per-thread default), or a
   * cudaStream_t / hipStream_t of the data's device. */
  uintptr_t stream;
  /** 0 (none), or a cudaEvent_t / hipEvent_t of the data's device. */
  uintptr_t event;
} kstage_device_sync_t;

/**
 * \brief Options for kstage_create (an extensible descriptor: start from
 * kstage_config_init()).
 */
typedef struct kstage_config_t {
  /** sizeof(kstage_config_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** Host execution space for kernels on host-resident columns. */
  kstage_host_execution_t host_execution;
  /**
   * Where new columns live, unless a write or a map names a residency:
   * {0, 0} (the default) = where the column's first write's data lives (CPU
   * and pinned host memory, kDLCUDAHost and kDLROCMHost: the host; CUDA
   * managed memory, kDLCUDAManaged: the CUDA device of its ordinal, since
   * kernels there read it at device speed). A device this build has no
   * backend for is KSTAGE_NOT_SUPPORTED, an ordinal the process lacks
   * KSTAGE_INVALID_ARGUMENT, both from kstage_create. (Added in 0.3.)
   *
   * GPUs: Kokkos (before 5) drives one GPU per process. When kstage
   * initialises Kokkos itself (the application has not), it does so on the
   * GPU this field names, so a process picks its device here (an MPI rank's
   * local rank, say); a stage naming another GPU than Kokkos runs on is
   * KSTAGE_NOT_SUPPORTED. Device tensors are checked against their pointer:
   * a DLDevice whose device_id is not the memory's own device, or device
   * memory that is host memory, is KSTAGE_INVALID_ARGUMENT naming both --
   * kstage never assumes device 0. Index maps and masks are host memory
   * unless a write names their device (kstage_write_data_t::selection_device);
   * a device backend uploads host ones once per call. Row counts are host
   * memory.
   */
  DLDevice residency;
} kstage_config_t;

/**
 * \brief Payload of a write.
 *
 * Fixed-size attributes (`is_array` false): one tensor, canonical layout ndim=1,
 * shape=[rows], dtype.lanes = tuple width. Convenience shapes fold trailing axes
 * into lanes: (N,3) lanes 1 -> lanes 3; (N,4,4) -> lanes 16; (N,4) lanes 4 ->
 * lanes 16. A flat (N*L,) one-lane tensor is *not* N rows of width L.
 *
 * Array attributes (`is_array` true): `tensor_count` tensors, one per source
 * row (shape [elements], trailing axes fold into lanes as above), or a single
 * packed tensor whose elements divide evenly across the source rows.
 *
 * Source rows and logical elements: the write addresses the query's prims in
 * order; `count` = 0 means all of them, otherwise the leading `count`.
 * Without `index_map`, logical element i takes source row i, so the source row
 * count must equal the logical count. `index_map[i]` (`count` entries)
 * picks the source row for logical element i (gather, reorder, broadcast);
 * every entry must be < the source row count. `mask` (ceil(count/64) words;
 * bit i%64 of word i/64) picks which logical elements are written; source
 * row i belongs to element i; unselected prims keep their values.
 * `index_map`, `index_map64` (the same with int64 entries) and `mask` are
 * exclusive, and each requires `count` > 0. They are host memory unless
 * `selection_device` names a device.
 *
 * Device index maps and masks (`selection_device`): the call checks what it
 * can without reading them -- the pointer against its device, the device
 * against the tensors and the column, the count and the source rows -- and
 * the device reads them in place, in the gather of the rows, on the stage's
 * stream. A device mask's words are copied on the device at the call and
 * read back (ceil(count/64) words, once) when the host needs the selection
 * for its tables: when the write is sealed, or when a prim mode other than
 * UPSERT is checked (at the call: an UPDATE whose query's prims all hold
 * the attribute, with nothing pending, needs no read-back; an INSERT does).
 * A device index map's entries are checked on the device, in the gather that
 * reads it, and the check's 8-byte report is read back when the op completes.
 * A bad entry
 * fails the op, not the call: kstage_wait returns KSTAGE_INVALID_ARGUMENT
 * and kstage_op_error names the first bad position and value and the row
 * count, as the call does for a host map. Such a write is never applied: a
 * seal skips it (waiting for its check first), and the stage is exactly as
 * if the call had been refused -- the one case where a write is refused after
 * it was accepted. Every write of a batch call is skipped when any of its
 * device maps has a bad entry. A later write's prim mode was checked with
 * the failed write pending: a later UPDATE of prims that only the failed
 * write would have created creates them.
 *
 * An extensible descriptor: start from kstage_write_data_init().
 */
typedef struct kstage_write_data_t {
  /** sizeof(kstage_write_data_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** Semantic of the values. Together with is_array and the tensors' dtype it is the write's
   * schema, which picks the attribute's column: the column of exactly that schema, or, for
   * KSTAGE_SEMANTIC_NONE, the column of that kind and dtype whatever its semantic (NONE keeps
   * the column's semantic; INVALID_ARGUMENT when two such columns differ only in semantic).
   * No such column: the write makes one (see kstage_attribute_mode_t for prims that hold the
   * attribute with another schema). */
  kstage_semantic_t semantic;
  /** Client tensors (exactly one of tensors / managed_tensors /
   * legacy_managed_tensors is non-NULL).
   * They must stay valid until the op completes (kstage_wait returns OK). */
  const DLTensor* tensors;
  /** Managed tensors: ownership passes to the stage with the call. Each
   * deleter is called exactly once, also when the call is rejected -- even
   * for a bad struct_size (see "Extensible descriptors" at the top: a
   * rejected struct_size is read as this header's struct). The stage
   * takes every entry of an array write, and entry 0 only of a fixed-size
   * write, whatever its tensor_count (any tensor_count but 1 is rejected;
   * entries after 0 are never read and stay the caller's). A
   * fixed-size managed tensor that is compact, aligned to its element size
   * and on the column's device is adopted without a copy when it is written
   * densely (no index_map, or a mask with every bit set): its memory becomes
   * the column's storage at seal when the write covers every row. Written
   * through an index_map or a mask to a column in host memory, it is adopted
   * too, and kept whole until the write is sealed: the seal reads the
   * selected rows from it straight into the column. The index_map is checked
   * at the call and kept as first entry and step when it is an ascending or
   * constant progression; any other map is copied, and rows of at most 4
   * bytes are then copied instead (the map would cost as much). A tensor
   * that is not compact, not aligned or has no deleter is copied. An adopted
   * tensor's deleter runs when the stage no longer needs it (a sparse one:
   * once its write is sealed, or dropped by kstage_destroy), never while the
   * stage holds its lock, so a deleter may call the stage. A READ_ONLY one
   * is never written in place; a writable one becomes the stage's to
   * modify, so the producer must not keep using its memory (export it
   * READ_ONLY to keep a view of it). */
  struct DLManagedTensorVersioned* const* managed_tensors;
  /** Entries of `tensors` / `managed_tensors`: 1 for a fixed-size attribute
   * (checked before either array is read); for an array attribute, 1 (packed)
   * or one per source row (at most 2^32 - 1). */
  uint64_t tensor_count;
  /** Logical elements: the leading `count` prims of the query; 0 = all of
   * them (see "Source rows and logical elements" above). */
  uint64_t count;
  /** `count` entries: the source row of logical element i; NULL = row i.
   * Exclusive with `mask`; host memory unless `selection_device` names a device. */
  const uint32_t* index_map;
  /** ceil(count/64) words; bit i%64 of word i/64 selects logical element i;
   * NULL = all. Exclusive with `index_map`; host memory unless
   * `selection_device` names a device. */
  const uint64_t* mask;
  /** The producer's {stream, event}, after which kstage orders its work
   * (see kstage_device_sync_t for the rules). */
  kstage_device_sync_t device_sync;
  /** Declares the column kind; never inferred (part of the write's schema, see semantic). */
  bool is_array;
  /** A kstage_attribute_mode_t: what the write does to a target prim that holds the attribute
   * with another schema (0: KSTAGE_ATTRIBUTE_MODE_REJECT). (Added in 0.4, in a byte that was
   * reserved.) */
  uint8_t attribute_mode;
  /** Must be zero. */
  uint8_t reserved[6];
  /** Legacy DLPack producers (DLManagedTensor, before DLPack 1.0; JAX and
   * older PyTorch and CuPy hand these out): used instead of tensors and
   * managed_tensors (exactly one of the three is non-NULL), with the same
   * ownership rules as managed_tensors -- each deleter runs exactly once on
   * every path, and a dense fixed-size write is adopted without a copy. A
   * legacy tensor cannot say whether its producer lets anyone write into it
   * (JAX arrays are immutable), so an adopted one is treated as read-only:
   * the stage never writes into it, and a later sparse write to its column
   * copies it first. (Added in 0.2: callers whose struct_size ends before
   * this field pass none.) */
  DLManagedTensor* const* legacy_managed_tensors;
  /** Where the column lives if this write creates it: {0, 0} (the default)
   * = the stage's config.residency, or, if that is {0, 0} too, where the
   * data lives. Ignored for a column that exists (its residency never
   * changes; data elsewhere is copied to it). (Added in 0.3.) */
  DLDevice residency;
  /** Where `index_map` and `mask` live: {0, 0} (the default) or kDLCPU =
   * host memory, read by the call. Otherwise device memory of the write's
   * source tensors' device (their device_type and device_id exactly), on
   * which the column lives, ordered by `device_sync` like the tensors: the
   * gather kernel reads them in place -- no upload, and an index map's
   * entries are checked on the device (see "Device index maps and masks"
   * above). Another device than the tensors', or one the column does not
   * live on, is KSTAGE_INVALID_ARGUMENT naming both. Fixed-size attributes
   * only for now: an array attribute's device index map or mask is
   * KSTAGE_NOT_SUPPORTED. (Added in 0.4.) */
  DLDevice selection_device;
  /** `index_map` with int64 entries (PyTorch's and most codes' index type), where
   * `selection_device` says, exactly as `index_map`: `count` entries, each a
   * source row; a negative entry, or one above 2^32 - 1 (the rows kstage
   * addresses), is out of range and reported as any other bad entry, with its
   * position and value. Exclusive with
   * `index_map` and `mask`. A device one is read in place by the gather, as
   * an int64 map, and checked there; a host one is read by the call.
   * (Added in 0.4, after selection_device.) */
  const int64_t* index_map64;
} kstage_write_data_t;

/**
 * \brief Payload of a read (or map) group.
 * Fixed-size: one tensor, canonical layout (ndim=1, shape=[rows], lanes =
 * tuple width). Array: one tensor per row. Logical element i (the group's
 * prim i) is row `index_map[i]` when `index_map` is non-NULL, else row i.
 * `mask` is NULL in read groups. Data is on the group's device; honour
 * `device_sync` before touching device data. Everything here stays valid
 * until the group is released.
 */
typedef struct kstage_data_t {
  /** `tensor_count` tensors on the group's device: one for a fixed-size
   * attribute, one per prim for an array attribute, none in a tombstone group. */
  const DLTensor* tensors;
  /** Entries of `tensors`. */
  uint64_t tensor_count;
  /** Logical elements: the group's prims (its prim_count). */
  uint64_t count;
  /** `count` entries: the row of the tensor that holds logical element i;
   * NULL = row i. Host memory, unless the read asked for
   * kstage_read_desc_t::device_index_map (see there). */
  const uint32_t* index_map;
  /** NULL in read and map groups. */
  const uint64_t* mask;
  /** The stage's {stream, event} to wait on before touching device data;
   * {0, 0} when the data is complete (see kstage_device_sync_t). */
  kstage_device_sync_t device_sync;
} kstage_data_t;

/** \brief Filter over existing prims (AND of every set criterion). */
typedef struct kstage_filter_t {
  /** Prims that hold every one of these attributes (sealed). May be NULL if count is 0. */
  const kstage_token_t* has_attributes;
  /** Entries of `has_attributes` (0: no constraint). */
  uint64_t has_attribute_count;
  /** Prims whose path is in this list; 0 = no constraint. */
  kstage_path_list_t path_in;
  /** Prims at or below this path (`/a` matches `/a` and `/a/b`, not `/ab`); 0 = none. */
  kstage_path_t path_prefix;
} kstage_filter_t;

/**
 * \brief What a read returns (an extensible descriptor: start from
 * kstage_read_desc_init(), which means "latest, on the column's device").
 */
typedef struct kstage_read_desc_t {
  /** sizeof(kstage_read_desc_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** false: the latest sealed values. true: only prims that changed at a
   * sealed ordinal in [range_begin, range_end], plus tombstone groups. */
  bool change_range;
  /** false: tensors are the (pinned) column storage and index_map maps each prim
   * to its row, zero-copy. true: rows are gathered into a new buffer in prim
   * order and index_map is NULL. */
  bool compact;
  /** true: a zero-copy group of a column on a device hands out
   * `data.index_map` in that device's memory (as the tensors: ordered by the
   * group's device_sync, valid until the group is released), for a GPU
   * consumer to gather through without an upload of its own. The stage
   * uploads it once (a column's cached row map is shared). Groups of host
   * data keep a host index_map. kstage_group_export_index_map hands it to a
   * DLPack consumer. (Added in 0.4: a reserved byte before.) */
  bool device_index_map;
  /** true: a group whose prims are a progression with no list of ids -- of a
   * path-range query (kstage_query_range), or of a filter whose result is
   * every existing prim and they are one run of ids -- has `prims` NULL
   * (prim_count as always): its prim i is first + i * stride, which
   * kstage_group_prim_progression gives. No 8-byte id per prim is made for
   * it. Other groups have `prims` as with false. (Added in 0.4: a reserved
   * byte before; 0 or 1.) */
  bool prims_as_progression;
  /** First ordinal of the change range (inclusive; `change_range` only). */
  uint64_t range_begin;
  /** Last ordinal of the change range (inclusive; >= range_begin). */
  uint64_t range_end;
  /** Device the reader wants the data on; device_type 0 = the column's residency.
   * A device other than the residency implies `compact`. */
  DLDevice target_device;
  /** Recorded after kstage's producing work when non-zero (device reads). */
  kstage_device_sync_t device_sync;
  /** Split each attribute's prims into groups of at most this many, in query
   * order (0: one group per attribute, plus its tombstone group). The groups
   * share the snapshot; each carries its own slice of prims, and of index_map
   * or tensors: a zero-copy group whose rows are in prim order (no index_map)
   * is a window of the column, one read through an index_map keeps the whole
   * column as its tensor and slices the map. A read of a path-range query
   * makes each group's `prims` array when the group is fetched, so a bounded
   * group size bounds that memory.
   * (Added in 0.3: a caller whose kstage.h predates it reads one group.) */
  uint64_t max_group_prims;
} kstage_read_desc_t;

/** \brief One group of a read. Valid until kstage_release_group(group.handle). */
typedef struct kstage_read_group_t {
  /** The group, for kstage_release_group and the exports. */
  kstage_group_t handle;
  /** The attribute read. */
  kstage_token_t attribute;
  /** The prims (path ids) of this group, `prim_count` of them (== data.count). */
  const kstage_path_t* prims;
  /** Entries of `prims`. */
  uint64_t prim_count;
  /** The attribute's write floor at the snapshot: everything <= it is sealed. */
  uint64_t ordinal;
  /** The group's tensors (see kstage_data_t). */
  kstage_data_t data;
  /** The column's dtype (lanes = tuple width). */
  DLDataType dtype;
  /** true: a tombstone group; `prims` lost the attribute in the range; no tensors. */
  bool is_delete;
  /** true: an array attribute (one tensor per prim). */
  bool is_array;
  /** The column's semantic. */
  kstage_semantic_t semantic;
} kstage_read_group_t;

/**
 * \brief What a map writes (an extensible descriptor: start from
 * kstage_map_desc_init(), then set what applies).
 */
typedef struct kstage_map_desc_t {
  /** sizeof(kstage_map_desc_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** The map's schema is (is_array, dtype, semantic) and picks the column as a write's does
   * (kstage_write_data_t::semantic): NONE keeps an existing column's semantic; no column of
   * that schema: the map's commit makes one. */
  kstage_semantic_t semantic;
  /** The attribute; it may not exist yet. */
  kstage_token_t attribute;
  /** The column's dtype (lanes = tuple width). All zero ({0, 0, 0}): the attribute's existing
   * column's dtype and semantic (INVALID_ARGUMENT when it has none, or several of this kind). */
  DLDataType dtype;
  /** UPSERT creates missing prims; INSERT requires all to be missing; UPDATE
   * requires all to exist (checked at map and again at each unmap). */
  kstage_prim_mode_t prim_mode;
  /** Where a new column's storage lives; device_type 0 = the stage's
   * config.residency, or the host (kDLCPU) when that is {0, 0} too.
   * Ignored for an existing column (its residency is fixed). */
  DLDevice residency;
  /** Split the prims into groups of at most this many (0: one group). */
  uint64_t max_group_prims;
  /** true: an array attribute (kstage_map_attribute then takes
   * element_counts); part of the map's schema. */
  bool is_array;
  /** A kstage_attribute_mode_t, as a write's (checked at the map and at each unmap). (Added in
   * 0.4, in a byte that was reserved.) */
  uint8_t attribute_mode;
  /** Must be zero. */
  uint8_t reserved[6];
} kstage_map_desc_t;

/**
 * \brief One writable group of a map. Fill `data.tensors` (uninitialised
 * memory: every byte of every row must be written), then unmap it.
 * Fixed-size: one tensor in canonical layout; the group's prim i is row
 * `data.index_map[i]` (or row i when index_map is NULL). Array: one tensor per
 * prim, shape [element_counts of that prim]. Valid until unmapped or the map
 * is released.
 */
typedef struct kstage_map_group_info_t {
  /** The group, for kstage_unmap_group and kstage_map_group_export. */
  kstage_map_group_t handle;
  /** The mapped attribute. */
  kstage_token_t attribute;
  /** The prims (path ids) of this group, `prim_count` of them (== data.count). */
  const kstage_path_t* prims;
  /** Entries of `prims`. */
  uint64_t prim_count;
  uint64_t ordinal; /**< the map's ordinal */
  /** The buffers to fill (see kstage_data_t; device_sync is {0, 0}). */
  kstage_data_t data;
  /** The column's dtype (lanes = tuple width). */
  DLDataType dtype;
  /** true: an array attribute (one tensor per prim). */
  bool is_array;
  /** The column's semantic. */
  kstage_semantic_t semantic;
} kstage_map_group_info_t;

/**
 * \brief What a stage holds of one attribute (kstage_attribute_info fills it;
 * an extensible descriptor written by the library: start from
 * kstage_attribute_info_init(), which sets struct_size, and the library
 * writes exactly struct_size bytes -- the fields its kstage.h knows that lie
 * wholly inside, zeros for the rest). (Added in 0.4.)
 */
typedef struct kstage_attribute_info_t {
  /** sizeof(kstage_attribute_info_t) as the caller's header declares it (set by the caller). */
  uint32_t struct_size;
  /** The column's semantic. */
  kstage_semantic_t semantic;
  /** The attribute. */
  kstage_token_t attribute;
  /** The column's dtype (lanes = tuple width; array attributes: of each element). */
  DLDataType dtype;
  /** true: an array attribute (one row of its own length per prim). */
  bool is_array;
  /** Zero. */
  uint8_t reserved[3];
  /** Where the column's storage lives. */
  DLDevice residency;
  /** The attribute's write floor: everything at or below it is sealed. */
  uint64_t write_floor;
  /** The prims that hold the attribute in the sealed state (kstage_attribute_info: in every
   * schema; kstage_attribute_schema: in this one). */
  uint64_t prim_count;
  /** The attribute's columns, one per schema (usually 1). kstage_attribute_info describes the
   * column holding the most sealed prims (of equals, the newest); kstage_attribute_schema
   * describes each. */
  uint64_t schema_count;
} kstage_attribute_info_t;

/* ------------------------------------------------------------------------- */
/* Descriptor initialisers                                                   */
/* ------------------------------------------------------------------------- */

/* An all-zero descriptor in C and C++ (C++ has no `{0}` for a struct whose
 * first member is not a scalar-from-int in every compiler's warnings). */
/* (clang-format 14 would break these one-token bodies onto lines of their own.) */
/* clang-format off */
#ifdef __cplusplus
#define KSTAGE_IMPL_ZERO {}
#else
#define KSTAGE_IMPL_ZERO {0}
#endif
/* clang-format on */

/** \brief Defaults for kstage_create, struct_size set: the way to start a config. */
static inline kstage_config_t kstage_config_init(void) {
  kstage_config_t c = KSTAGE_IMPL_ZERO;
  c.struct_size = (uint32_t)sizeof(kstage_config_t);
  return c;
}
/** \brief An empty write (no tensors yet), struct_size set: the way to start a write. */
static inline kstage_write_data_t kstage_write_data_init(void) {
  kstage_write_data_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_write_data_t);
  return d;
}
/** \brief "Latest sealed values, zero-copy, on the column's device", struct_size set. */
static inline kstage_read_desc_t kstage_read_desc_init(void) {
  kstage_read_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_read_desc_t);
  return d;
}
/** \brief A kstage_attribute_info_t for kstage_attribute_info to fill, struct_size set. */
static inline kstage_attribute_info_t kstage_attribute_info_init(void) {
  kstage_attribute_info_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_attribute_info_t);
  return d;
}
/** \brief An empty map description (UPSERT, the stage's residency, one group), struct_size set. */
static inline kstage_map_desc_t kstage_map_desc_init(void) {
  kstage_map_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_map_desc_t);
  return d;
}

/* ------------------------------------------------------------------------- */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------- */

/**
 * \brief Create a stage. Initialises Kokkos if the application has not; kstage
 * then finalises it at process exit, after destroying any remaining stages.
 * \param[in] config may be NULL for defaults.
 * \param[out] stage the new stage's handle, on success.
 */
KSTAGE_API kstage_status_t kstage_create(const kstage_config_t* config, kstage_stage_t* stage);
/** \brief Destroy a stage and everything it owns: handles become stale, pending managed tensors are
 * deleted. */
KSTAGE_API kstage_status_t kstage_destroy(kstage_stage_t stage);
/**
 * \brief How this library was built and what it runs on (the first thing to
 * ask of an installation; the `kstage-info` command prints it): one
 * "key: value" line per item, keys in this order --
 *   - `kstage`: the library's version ("0.4.0");
 *   - `kokkos_built`: the Kokkos version it was compiled against;
 *   - `kokkos_running`: the version the loaded Kokkos reports, or
 *     "not initialized" before the first kstage_create (or the application)
 *     initialises Kokkos;
 *   - `host_execution`: the default host execution of a stage
 *     (KSTAGE_HOST_EXECUTION_DEFAULT's meaning in this build: "Serial", or
 *     the parallel space's name, "OpenMP" or "Threads");
 *   - `host_threads`: the parallel host space's thread count, or
 *     "not initialized";
 *   - `backends`: the backends compiled in, space-separated ("host cuda");
 *   - `devices`: the devices of each that this process sees
 *     ("host:1 cuda:4").
 * `*text` is the library's, NUL-terminated, valid until this thread's next
 * kstage_build_info call. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_build_info(const char** text);
/**
 * \brief Copies between host and device memory that kstage has enqueued in
 * this process so far, summed over every stage and device backend: payload
 * copies host -> device and device -> host, and uploads of host index, mask
 * and offset arrays for device kernels. Monotonic; for checking that a data
 * path takes no detour through the host (compare before and after a call).
 * Any pointer may be NULL.
 */
KSTAGE_API kstage_status_t kstage_transfer_counts(uint64_t* host_to_device,
                                                  uint64_t* device_to_host,
                                                  uint64_t* index_uploads);
/**
 * \brief Waits until the stage's work on `device` has run, and reports a fault of that device:
 * KSTAGE_DEVICE_ERROR with the runtime's error (a sticky fault of the device's context, which
 * another library's failed kernel or copy leaves too). For code that hands the stage's device
 * memory to a library that does not check its own device calls -- ADIOS2's GPU copies, which
 * the ADIOS2 bridge checks with it after each step -- so that a fault is reported instead of a
 * garbage result. Host memory ({kDLCPU, 0}, pinned host memory): KSTAGE_OK at once. A device
 * this build has no backend for: KSTAGE_NOT_SUPPORTED; an ordinal the process lacks:
 * KSTAGE_INVALID_ARGUMENT. The stage is not changed. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_device_check(kstage_stage_t stage, DLDevice device);

/* ------------------------------------------------------------------------- */
/* Logging                                                                   */
/* ------------------------------------------------------------------------- */

/**
 * \brief How serious a log message is; also a threshold ("this and more
 * serious"). Ordered: a message is delivered when its severity is >= the
 * threshold that applies to its channel.
 */
typedef int32_t kstage_log_severity_t;
enum {
  KSTAGE_LOG_DEBUG = 0,   /**< detail for finding out why: a stage created or destroyed */
  KSTAGE_LOG_INFO = 1,    /**< what kstage chose where the caller may care (a slower path) */
  KSTAGE_LOG_WARNING = 2, /**< something went wrong that no call reports (a failure dropped
                               on a cleanup path), or a deprecated call */
  KSTAGE_LOG_ERROR = 3,   /**< a failure (a device fault), also reported by the calls it fails */
  KSTAGE_LOG_OFF = 4      /**< a threshold only, never a message's severity: deliver nothing */
};

/**
 * \brief The channels kstage's messages come on (`channel` of
 * ::kstage_log_callback_t, and the names a filter takes):
 *   - `"stage"`: a stage's life (created, destroyed; DEBUG);
 *   - `"device"`: a device's runtime: a device fault (ERROR, naming the
 *     runtime, the device and the runtime's error; said where kstage finds
 *     it: a failed op's completion, also one nobody waits for, a refused
 *     enqueue, a stage's stream drained at its destruction), a fallback from
 *     a device path to a host one (the host waiting for a write's producer
 *     event where the device would have: a pageable host source, which the
 *     runtime reads at the call, or rows gathered on the host; INFO) or to a
 *     slower one (no stream-ordered memory pools: plain allocations, once per
 *     stage and device; WARNING);
 *   - `"adios2"`: the ADIOS2 bridge (libkstage_adios2): an attribute of a
 *     device column that a step writes or reads through host memory because
 *     the engine takes no device buffers (INFO), and what an ADIOS2 engine reports on a
 *     path that cannot fail the call, such as ending a step after an earlier
 *     failure or closing a stream after a failed restart (WARNING);
 *   - `"api"`: the C API itself: a deprecated call (WARNING, once per
 *     function and process; kstage has no deprecated function today), and
 *     the logger's own notices (messages dropped because the callback fell
 *     behind; WARNING).
 * Messages name what they are about: the stage handle, the attribute, the
 * device ("emulated device 0", "CUDA device 1"), as far as the place that
 * emits them knows it. Their text is for people
 * and may change in any release; the channels and severities above only
 * gain entries.
 */
#define KSTAGE_LOG_CHANNELS "stage,device,adios2,api"

/**
 * \brief A log callback (kstage_set_log_callback).
 * \param severity the message's severity (never KSTAGE_LOG_OFF).
 * \param channel one of the channel names above, NUL-terminated; a static
 *   string (the pointer stays valid for the process's life).
 * \param message the message, UTF-8, NUL-terminated, with no trailing
 *   newline; valid only during the call.
 * \param user_data the pointer given to kstage_set_log_callback.
 */
typedef void (*kstage_log_callback_t)(kstage_log_severity_t severity, const char* channel,
                                      const char* message, void* user_data);

/**
 * \brief Install the process's log callback (one per process; this replaces
 * the previous one), or remove it (`callback` NULL).
 *
 * Which messages: a message on channel C is delivered when its severity is
 * >= the level `channel_filter` gives C, or, for a channel the filter does
 * not name, >= `threshold`. `channel_filter` (host, NUL-terminated; NULL
 * or "" names no channel) is a comma-separated list of `<channel>=<level>`
 * entries: `<channel>` one of KSTAGE_LOG_CHANNELS, `<level>` one of
 * `debug`, `info`, `warning` (or `warn`), `error`, `off`, both
 * case-insensitive, spaces around names ignored; a later entry for a channel
 * replaces an earlier one. E.g. threshold KSTAGE_LOG_WARNING with
 * "device=debug,stage=off". Every setting is checked before anything
 * changes: a threshold outside DEBUG..OFF, or a malformed filter entry (no
 * `=`, an unknown channel or level, an empty entry), is
 * KSTAGE_INVALID_ARGUMENT naming the entry, and the previous setting stays.
 *
 * Delivery rules:
 * - Messages are delivered on one kstage thread, in the order they were
 *   emitted, one at a time: the callback is never called concurrently with
 *   itself, and never while kstage holds any of its locks. Emitting a message
 *   never waits for its delivery, so a message costs the code that emits it
 *   only its formatting; when no callback admits a message's channel and
 *   severity (the default), checking costs one atomic load and nothing is
 *   formatted.
 * - Messages emitted before this call returns go to the setting in force when
 *   they are delivered, filtered again by it; this call first delivers those
 *   already queued (as kstage_flush_log) and, once it returns, the previous
 *   callback is never called again and is not running (unless this call is
 *   made by that callback itself: then the change applies from the next
 *   message).
 * - The callback may call any kstage function, including
 *   kstage_set_log_callback and kstage_flush_log (which then returns at once:
 *   it cannot wait for the delivery it is part of). The messages such calls
 *   emit are delivered after the callback returns.
 * - The callback must not throw (in C++) or longjmp out; kstage does not
 *   catch what a C callback does. It should return soon: while it runs,
 *   later messages wait (at most 65536 of them; beyond that they are dropped
 *   and counted, and an "api" WARNING says how many).
 * - Without a callback, messages go to stderr when KSTAGE_LOG asks for them
 *   (below), one line each: `kstage [<level>] <channel>: <message>`.
 *
 * KSTAGE_LOG (environment variable, read once, at the first kstage call
 * that creates a stage or touches the log): the same grammar as
 * `channel_filter`, plus one entry that is a level alone and sets the
 * threshold (default `off`): "warning", "info,device=debug", "off,adios2=info".
 * It applies while no callback is installed, writing to stderr. A value that
 * does not parse is reported once on stderr ("kstage: KSTAGE_LOG=...
 * ignored: ...") and otherwise ignored (nothing is logged); it never aborts.
 *
 * After fork() the child delivers its own messages (it starts a dispatcher
 * of its own); what the parent had queued stays the parent's.
 *
 * At process exit kstage waits up to one second for the messages still
 * queued; to be sure of them, call kstage_flush_log before exit, and remove
 * the callback before unloading what it needs.
 * \param callback the new callback, or NULL to remove it (back to KSTAGE_LOG).
 * \param user_data passed to every call of `callback`; kstage never reads it.
 * \param threshold KSTAGE_LOG_DEBUG .. KSTAGE_LOG_OFF, for the channels
 *   `channel_filter` does not name (ignored when `callback` is NULL).
 * \param channel_filter per-channel levels (ignored when `callback` is NULL).
 * (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_set_log_callback(kstage_log_callback_t callback, void* user_data,
                                                   kstage_log_severity_t threshold,
                                                   const char* channel_filter);
/**
 * \brief A barrier: when it returns, every message emitted before the call
 * (by any thread) has been delivered -- its callback call has returned, or
 * its line is written to stderr -- and no delivery is in progress. Called
 * by the log callback itself, it returns KSTAGE_OK at once (see
 * kstage_set_log_callback). (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_flush_log(void);
/**
 * \brief Emit a message on one of kstage's channels, as a layer over the C
 * API does (the ADIOS2 bridge); an application may use it to put its own
 * notes in the same stream. Delivered as any other
 * message: when the setting in force admits `channel` and `severity`.
 * \param severity KSTAGE_LOG_DEBUG .. KSTAGE_LOG_ERROR.
 * \param channel one of KSTAGE_LOG_CHANNELS, in any case (host, NUL-terminated).
 * \param message host, NUL-terminated; copied.
 * \return KSTAGE_INVALID_ARGUMENT for another severity or channel, or a NULL
 * message; KSTAGE_OK otherwise, whether or not the message is delivered.
 * (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_log_message(kstage_log_severity_t severity, const char* channel,
                                              const char* message);

/* ------------------------------------------------------------------------- */
/* Dictionary                                                                */
/* ------------------------------------------------------------------------- */

/**
 * \brief Intern an attribute name. `length` in bytes, or KSTAGE_NUL_TERMINATED.
 * Empty strings and strings with an embedded NUL are rejected.
 */
KSTAGE_API kstage_status_t kstage_intern_token(kstage_stage_t stage, const char* str, size_t length,
                                               kstage_token_t* token);
/**
 * \brief Intern a prim path: "/" or "/a/b" (absolute, no empty component, no
 * trailing "/"). Empty strings and embedded NULs are rejected.
 * Ids are assigned in interning order, except that interning a path also
 * reserves ids for its ancestors not yet interned ("/a" for "/a/b"), which
 * they keep when they are interned themselves. Paths are stored as a tree
 * (parent, last component), so siblings share their parent's bytes.
 */
KSTAGE_API kstage_status_t kstage_intern_path(kstage_stage_t stage, const char* str, size_t length,
                                              kstage_path_t* path);
/**
 * \brief Intern `count` prim paths at once: paths[i] gets the id of
 * strings[i] (each as kstage_intern_path takes it; `lengths` may be NULL for
 * NUL-terminated strings, else lengths[i] is as kstage_intern_path's
 * `length`). Every string is checked before any is interned: on
 * KSTAGE_INVALID_ARGUMENT, naming strings[i], nothing was interned. Faster
 * than a loop of kstage_intern_path (one lock; siblings find their parent
 * once). (Added in 0.3.)
 */
KSTAGE_API kstage_status_t kstage_intern_paths(kstage_stage_t stage, const char* const* strings,
                                               const size_t* lengths, uint64_t count,
                                               kstage_path_t* paths);
/**
 * \brief Intern a *path range*: the `count` paths "<parent>/<prefix><n>" for n
 * in [begin, begin + count), n written in decimal without leading zeros, in
 * O(1) memory and time. Their ids are consecutive: `*first` for n = begin,
 * `*first + i` for n = begin + i. (Added in 0.3.) The one check that is not
 * O(1), that no member was interned before, looks at nothing unless
 * `parent` already has paths whose names end in a digit (then it takes one
 * pass over the stage's paths, or a lookup per member, whichever is less).
 *
 * Range members are ordinary paths everywhere else -- queries, writes,
 * reads, filters (HAS, PREFIX, IN), deletes, change ranges, maps -- and
 * their strings are made on demand. The same string always gives the same
 * id: kstage_intern_path of a member's string returns the member. `parent`
 * is a path ("/" for top-level members; it need not be interned: it gets a
 * reserved id, see kstage_intern_path); `prefix` (may be empty, length or
 * KSTAGE_NUL_TERMINATED) holds no '/' or NUL; 1 <= count < 2^32.
 * Interning the same range again returns the same first id. Errors:
 * INVALID_ARGUMENT (a bad parent, prefix or count), ALREADY_EXISTS when a
 * member was interned before as a path of its own (or as the ancestor of
 * one), or another range under the same parent could name the same paths
 * (an overlapping range with the same prefix, or a prefix that starts the
 * other's: "p" 15 and "p1" 5 are both "p15"); the message names it.
 */
KSTAGE_API kstage_status_t kstage_intern_path_range(kstage_stage_t stage, const char* parent,
                                                    size_t parent_length, const char* prefix,
                                                    size_t prefix_length, uint64_t begin,
                                                    uint64_t count, kstage_path_t* first);
/**
 * \brief The range `path` belongs to: its first id, its count, and `path`'s
 * index in it (path = first + index, named by number begin + index). Any
 * pointer may be NULL. NOT_FOUND if `path` is no range's member.
 */
KSTAGE_API kstage_status_t kstage_path_range_info(kstage_stage_t stage, kstage_path_t path,
                                                  kstage_path_t* first, uint64_t* count,
                                                  uint64_t* index);
/**
 * \brief How the range whose first id is `first` was made: the arguments of its
 * kstage_intern_path_range, so that another stage (a restart, a reader in
 * another process) can make the same range. `*parent` is the parent path
 * ("/" for top-level members) and `*prefix` the prefix ("" for none), each
 * NUL-terminated and valid for the stage's lifetime, with their lengths;
 * `*begin` is the number of the first member (its count comes from
 * kstage_path_range_info). Any pointer may be NULL. INVALID_ARGUMENT naming
 * `first` when it is not the first id of a range. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_path_range_definition(kstage_stage_t stage, kstage_path_t first,
                                                        const char** parent, size_t* parent_length,
                                                        const char** prefix, size_t* prefix_length,
                                                        uint64_t* begin);
/** \brief Member `index` (0 <= index < count) of the range whose first id is `first`. */
KSTAGE_API kstage_status_t kstage_path_range_member(kstage_stage_t stage, kstage_path_t first,
                                                    uint64_t index, kstage_path_t* path);
/** \brief The string of a token; valid (NUL-terminated) for the stage's lifetime. `length` may be
 * NULL. */
KSTAGE_API kstage_status_t kstage_token_string(kstage_stage_t stage, kstage_token_t token,
                                               const char** str, size_t* length);
/** \brief The string of a path; valid (NUL-terminated) for the stage's lifetime. `length` may be
 * NULL. */
KSTAGE_API kstage_status_t kstage_path_string(kstage_stage_t stage, kstage_path_t path,
                                              const char** str, size_t* length);

/** \brief A path list holding a copy of `paths` (each a valid path id), with one reference. */
KSTAGE_API kstage_status_t kstage_path_list_create(kstage_stage_t stage, const kstage_path_t* paths,
                                                   uint64_t count, kstage_path_list_t* list);
/** \brief The list's ids; valid while the caller holds a reference. */
KSTAGE_API kstage_status_t kstage_path_list_get(kstage_stage_t stage, kstage_path_list_t list,
                                                const kstage_path_t** paths, uint64_t* count);
/** \brief Add one reference to the list (each reference is dropped by one
 * kstage_path_list_release). */
KSTAGE_API kstage_status_t kstage_path_list_retain(kstage_stage_t stage, kstage_path_list_t list);
/** \brief Drop one reference; the last one frees the list (its handle becomes stale). */
KSTAGE_API kstage_status_t kstage_path_list_release(kstage_stage_t stage, kstage_path_list_t list);

/* ------------------------------------------------------------------------- */
/* Queries                                                                   */
/* ------------------------------------------------------------------------- */

/*
 * Prims: lifetime and visibility. A path exists as a name from the moment it
 * is interned; a *prim* exists while it holds at least one attribute. It
 * appears when a write giving it its first attribute is sealed and disappears
 * when a seal removes its last one (kstage_delete_attributes of every
 * attribute it holds, or n = 0); a FORCE write that moves it to another schema
 * keeps it in existence throughout. There is no empty prim: a prim that holds
 * nothing is gone, so a later INSERT of it succeeds.
 *   - Queries over existing prims (kstage_query_filter, kstage_query_filter_ex,
 *     the hierarchy) see the latest sealed state only, as reads do: a prim
 *     whose first write is not sealed is not found; one whose deletion is not
 *     sealed still is.
 *   - Prim modes see the ledger: INSERT and UPDATE judge a target at the
 *     write's ordinal, the sealed state plus the mutations submitted before it
 *     at or below that ordinal (an unsealed INSERT makes a second INSERT of the
 *     same prim at a later ordinal ALREADY_EXISTS).
 * ovstage keeps a prim after its last attribute and counts unsealed prims in
 * queries; docs/from-ovstage.md has the differences and the reasons.
 */

/** \brief A query over explicit paths, in this order; they may name prims that do not exist yet.
 * Duplicates are rejected. */
KSTAGE_API kstage_status_t kstage_query_paths(kstage_stage_t stage, const kstage_path_t* paths,
                                              uint64_t count, kstage_query_t* query);
/**
 * \brief A query over members start, start + stride, start + 2 stride, ... of
 * the path range whose first id is `first` (`count` of them; 0: as many as
 * the range holds from `start`; stride 0 means 1), in that order: the range
 * in order is `kstage_query_range(stage, first, 0, 0, 0, &q)`. (Added in 0.3.)
 */
KSTAGE_API kstage_status_t kstage_query_range(kstage_stage_t stage, kstage_path_t first,
                                              uint64_t start, uint64_t count, uint64_t stride,
                                              kstage_query_t* query);
/** \brief A query over the existing prims (latest sealed state) that match `filter`, in path-id
 * order (see kstage_intern_path). */
KSTAGE_API kstage_status_t kstage_query_filter(kstage_stage_t stage, const kstage_filter_t* filter,
                                               kstage_query_t* query);
/** \brief The number of prims in the query. */
KSTAGE_API kstage_status_t kstage_query_count(kstage_stage_t stage, kstage_query_t query,
                                              uint64_t* count);
/** \brief The query's prims as a new path list (one reference, owned by the caller). */
KSTAGE_API kstage_status_t kstage_query_get_paths(kstage_stage_t stage, kstage_query_t query,
                                                  kstage_path_list_t* paths);
/**
 * \brief Release a query; its handle becomes stale. Reads, maps, ops and path
 * lists already made from it are unaffected.
 */
KSTAGE_API kstage_status_t kstage_query_release(kstage_stage_t stage, kstage_query_t query);

/* ------------------------------------------------------------------------- */
/* Mutations                                                                 */
/* ------------------------------------------------------------------------- */

/**
 * \brief Write one attribute of the query's prims at `ordinal` (> the attribute's floor).
 * The call validates everything and either rejects the write, leaving the stage
 * unchanged, or accepts it and returns an op. Prim mode and schema are checked
 * against the state the stage will have at `ordinal` given what has been
 * submitted so far: the sealed state and the pending mutations ordered before
 * this one. An attribute sealed past `ordinal` (per-attribute floors) counts
 * as sealed -- kstage keeps no history of which prims held it at `ordinal` --
 * so a prim that gained it later already exists for INSERT and UPDATE. The
 * write becomes visible to reads when the floor passes `ordinal`.
 */
KSTAGE_API kstage_status_t kstage_write_attribute(kstage_stage_t stage, kstage_query_t query,
                                                  kstage_token_t attribute, uint64_t ordinal,
                                                  const kstage_write_data_t* data,
                                                  kstage_prim_mode_t prim_mode, kstage_op_t* op);
/**
 * \brief Write `n` attributes (data[i] to attributes[i]) as one op: all are
 * accepted or none is. Attributes must be distinct.
 */
KSTAGE_API kstage_status_t kstage_write_attributes(kstage_stage_t stage, kstage_query_t query,
                                                   const kstage_token_t* attributes,
                                                   const kstage_write_data_t* data, uint64_t n,
                                                   uint64_t ordinal, kstage_prim_mode_t prim_mode,
                                                   kstage_op_t* op);
/**
 * \brief Delete `attributes` (n of them) from the query's prims at `ordinal`;
 * n = 0 deletes the prims (every attribute they hold). A prim disappears with
 * its last attribute. Prims or attributes that are absent are ignored.
 */
KSTAGE_API kstage_status_t kstage_delete_attributes(kstage_stage_t stage, kstage_query_t query,
                                                    const kstage_token_t* attributes, uint64_t n,
                                                    uint64_t ordinal, kstage_op_t* op);
/**
 * \brief Seal: advance the write floor of `attributes` (n = 0: every attribute,
 * including ones not created yet) to `ordinal`, applying their pending
 * mutations at ordinals <= `ordinal` in ordinal order, then submission order.
 * A floor never moves backwards (that is a no-op, not an error).
 */
KSTAGE_API kstage_status_t kstage_advance_write_floor(kstage_stage_t stage, uint64_t ordinal,
                                                      const kstage_token_t* attributes, uint64_t n);
/** \brief The write floor of `attribute`, or the global floor (the minimum) for 0. */
KSTAGE_API kstage_status_t kstage_get_write_floor(kstage_stage_t stage, kstage_token_t attribute,
                                                  uint64_t* ordinal);

/* ------------------------------------------------------------------------- */
/* Describing a stage                                                        */
/* ------------------------------------------------------------------------- */

/*
 * What a generic consumer -- a checkpoint writer, a viewer -- asks of a stage
 * it did not fill itself. The prims go with a query: kstage_query_filter with
 * an all-zero filter is every existing prim (sealed state), with
 * has_attributes = {a} the prims that hold `a`.
 */

/**
 * \brief The attributes that have a column, in token order: `*count` is
 * how many there are, and the first min(capacity, *count) of them go into
 * `attributes` (which may be NULL when capacity is 0: ask for the count,
 * then for the tokens), each once whatever its schemas. A column exists from
 * the first accepted write or map of its attribute in a schema -- the column's
 * schema (kind, dtype, semantic, residency) is fixed from then on; another
 * schema gets a column of its own -- before that write is sealed, and stays
 * when its prims are deleted (with prim_count 0). (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_list_attributes(kstage_stage_t stage, kstage_token_t* attributes,
                                                  uint64_t capacity, uint64_t* count);
/**
 * \brief The schema, residency, write floor and sealed prim count of an
 * attribute's column, in `*info` (the caller sets info->struct_size, see
 * kstage_attribute_info_t). NOT_FOUND naming the attribute when it has no
 * column; INVALID_ARGUMENT for a token the stage never interned or a bad
 * struct_size. The fields are one consistent state of the stage. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_attribute_info(kstage_stage_t stage, kstage_token_t attribute,
                                                 kstage_attribute_info_t* info);
/**
 * \brief One schema of an attribute: column `index` of the attribute's
 * info.schema_count columns, oldest first (0 <= index < schema_count), in
 * `*info` as kstage_attribute_info fills it, with prim_count counting this
 * column's prims. An attribute has several columns when prims hold it with
 * different schemas (kstage_attribute_mode_t); a column stays, with
 * prim_count 0, when its prims are gone (change ranges still see their
 * deletions). NOT_FOUND for an attribute with no column or an index at or
 * past schema_count; INVALID_ARGUMENT as kstage_attribute_info. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_attribute_schema(kstage_stage_t stage, kstage_token_t attribute,
                                                   uint64_t index, kstage_attribute_info_t* info);

/* ------------------------------------------------------------------------- */
/* Reads                                                                     */
/* ------------------------------------------------------------------------- */

/**
 * \brief Open a read of `attributes` (n > 0, distinct) for the query's prims,
 * against the latest sealed state. `desc` may be NULL for "latest".
 * A change-range read fails with KSTAGE_OUT_OF_RANGE when a selected prim
 * changed again after range_end. Never sees or fails on unsealed writes.
 */
KSTAGE_API kstage_status_t kstage_read_attributes(kstage_stage_t stage, kstage_query_t query,
                                                  const kstage_token_t* attributes, uint64_t n,
                                                  const kstage_read_desc_t* desc,
                                                  kstage_read_t* read);
/** \brief Next group, or KSTAGE_END_OF_ITERATION. Prims without the attribute appear in no group.
 */
KSTAGE_API kstage_status_t kstage_fetch_read_next(kstage_stage_t stage, kstage_read_t read,
                                                  uint64_t timeout_ns, kstage_read_group_t* group);
/** \brief Release a group; its data stays valid until now, whatever was sealed since. */
KSTAGE_API kstage_status_t kstage_release_group(kstage_stage_t stage, kstage_group_t group);

/**
 * \brief Whether the prims of `group` are a progression: prims[i] = *first +
 * i * *stride for i < prim_count (the prims of a path-range query, a filter
 * whose result is one run of ids, a list whose ids step by one constant).
 * KSTAGE_OK with both set; KSTAGE_NOT_FOUND when they are not (read
 * `prims`), leaving both unchanged. A group read with
 * kstage_read_desc_t::prims_as_progression whose `prims` is NULL is always
 * one. INVALID_ARGUMENT for a NULL out-pointer or a group that is not one.
 * (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_group_prim_progression(kstage_stage_t stage, kstage_group_t group,
                                                         uint64_t* first, uint64_t* stride);
/** \brief Release a read; groups already fetched stay valid until released. */
KSTAGE_API kstage_status_t kstage_release_read(kstage_stage_t stage, kstage_read_t read);

/* ------------------------------------------------------------------------- */
/* DLPack export of read groups                                              */
/* ------------------------------------------------------------------------- */

/** \brief Export flag: the consumer must not write through the tensor. */
#define KSTAGE_EXPORT_READ_ONLY UINT64_C(1)
/**
 * \brief Export flag for kstage_group_export_legacy only: the caller promises
 * that the consumer never writes through the tensor (JAX and XLA arrays are
 * immutable), so a read-only group -- a zero-copy group sharing the column's
 * storage, or one exported with KSTAGE_EXPORT_READ_ONLY -- may go out as a
 * legacy DLManagedTensor, which cannot say read-only, without a copy.
 *
 * The risk is the caller's: a consumer that writes anyway writes into the
 * column's storage, and every group and export sharing that buffer sees the
 * change (the stage's copy-on-write protects held data from the stage's own
 * seals, not from a consumer). Nothing else is affected: the export still
 * keeps its buffer alive until its deleter runs, and later seals still copy
 * rather than write into a buffer an export holds.
 */
#define KSTAGE_EXPORT_CONSUMER_READS_ONLY UINT64_C(2)

/**
 * \brief Export tensor `index` of a read group as an owning DLPack tensor.
 *
 * The export keeps its data alive after kstage_release_group and after any
 * later seal, until the consumer calls its deleter (exactly once). Layout: a
 * fixed-size group's tensor is exported as shape (rows, lanes) with lanes 1
 * (shape (rows) when lanes is 1), so that consumers which refuse DLPack lanes
 * (numpy, PyTorch) accept it; an array group's tensor i is prim i's row,
 * shape (elements, lanes) or (elements). Strides are always filled.
 *
 * A zero-copy group (read without `compact`) shares the column's storage: it
 * is always exported READ_ONLY. A compact group owns its buffer: it is
 * writable unless `flags` has KSTAGE_EXPORT_READ_ONLY.
 * Errors: INVALID_HANDLE (group), INVALID_ARGUMENT (index out of range, a
 * tombstone group, unknown flag bits, KSTAGE_EXPORT_CONSUMER_READS_ONLY).
 */
KSTAGE_API kstage_status_t kstage_group_export(kstage_stage_t stage, kstage_group_t group,
                                               uint64_t index, uint64_t flags,
                                               struct DLManagedTensorVersioned** tensor);
/**
 * \brief As kstage_group_export, as a legacy DLManagedTensor. The legacy struct
 * cannot say read-only, so exporting a zero-copy group, or passing
 * KSTAGE_EXPORT_READ_ONLY, is refused with KSTAGE_NOT_SUPPORTED (as numpy
 * refuses to export read-only arrays that way) -- unless `flags` has
 * KSTAGE_EXPORT_CONSUMER_READS_ONLY: then the export shares the column's
 * storage with no copy (see that flag for the promise and its risk).
 */
KSTAGE_API kstage_status_t kstage_group_export_legacy(kstage_stage_t stage, kstage_group_t group,
                                                      uint64_t index, uint64_t flags,
                                                      DLManagedTensor** tensor);
/**
 * \brief The stream value of kstage_group_export_on_stream (and its legacy and
 * index-map forms) for a consumer that names no stream and orders its own
 * reads: DLPack's `__dlpack__(stream=-1)`, "the producer must not perform any
 * synchronization". Nothing is ordered at the export (the consumer waits for
 * the group's data itself: its data.device_sync), and, since the producer then
 * knows none of the streams that read the memory, the export's deleter
 * releases it only once every stream of the device has run the work enqueued
 * on it by then: the deleter blocks until the device has (cudaDeviceSynchronize,
 * as the cudaFree of a synchronous release would). Not for a deleter that may
 * run inside a CUDA graph capture. A host group takes it as 0. (Added in 0.4.)
 */
#define KSTAGE_STREAM_UNORDERED ((uintptr_t)-1)
/**
 * \brief As kstage_group_export, for a consumer that uses the tensor on its
 * device stream `stream` (kstage_device_sync_t's stream values; 0: exactly
 * kstage_group_export; KSTAGE_STREAM_UNORDERED: no stream, released after the
 * whole device). The stream is ordered after the group's data (as
 * kstage_group_sync with {stream, 0}), and when the export's deleter runs,
 * the group's memory is released only after the work enqueued on `stream` by
 * then has completed (an event recorded there: the deleter never blocks).
 * The event goes on the stream the consumer named and no other: 1 the legacy
 * default stream, 2 the per-thread default stream of the thread that runs the
 * deleter (a consumer that named 2 runs its deleter on the thread that used the
 * tensor), else the handle. So a deleter that runs while a CUDA graph is
 * captured in global mode (torch.cuda.graph) touches no stream the consumer did
 * not name -- work on the legacy stream then would be refused and invalidate the
 * capture --; a consumer that named 1 must not release during such a capture.
 * This is what a consumer that calls deleters without synchronising its
 * stream needs (PyTorch, CuPy; Python's `__dlpack__(stream=...)` uses it). A
 * host group takes 0 only (KSTAGE_INVALID_ARGUMENT otherwise); a stream the
 * device does not know is KSTAGE_INVALID_ARGUMENT naming it.
 */
KSTAGE_API kstage_status_t kstage_group_export_on_stream(kstage_stage_t stage, kstage_group_t group,
                                                         uint64_t index, uint64_t flags,
                                                         uintptr_t stream,
                                                         struct DLManagedTensorVersioned** tensor);
/** \brief As kstage_group_export_on_stream, as a legacy DLManagedTensor
 * (kstage_group_export_legacy's rules). */
KSTAGE_API kstage_status_t kstage_group_export_legacy_on_stream(kstage_stage_t stage,
                                                                kstage_group_t group,
                                                                uint64_t index, uint64_t flags,
                                                                uintptr_t stream,
                                                                DLManagedTensor** tensor);
/**
 * \brief Export a read group's `data.index_map` (prim i's row of its tensor)
 * as an owning, read-only DLPack tensor: one axis of `prim_count` uint32
 * entries, in the memory that holds it -- the group's device when the read
 * asked for kstage_read_desc_t::device_index_map and the group is on a
 * device, else host memory (kDLCPU). A GPU consumer then takes the map as it
 * takes the rows, with no upload. It keeps the map alive after
 * kstage_release_group until its deleter runs (exactly once), and `stream`
 * orders it as kstage_group_export_on_stream does (0: no stream; a host group
 * takes 0 only). Errors: INVALID_HANDLE (group), INVALID_ARGUMENT (a group
 * without an index_map -- its rows are its prims in order --, a tombstone
 * group, a stream the device does not know).
 */
KSTAGE_API kstage_status_t kstage_group_export_index_map(kstage_stage_t stage, kstage_group_t group,
                                                         uintptr_t stream,
                                                         struct DLManagedTensorVersioned** tensor);
/**
 * \brief Order a consumer after the work that produces a read group's data,
 * as a DLPack producer does for `__dlpack__(stream=...)`: `consumer.stream`
 * (kstage_device_sync_t's values) is made to wait for it, and a non-zero
 * `consumer.event` is recorded after it -- stream waits, never a host block.
 * Call it before handing an export of a device group to a consumer that
 * reads on its own stream. A group whose data is on the host is complete and
 * takes {0, 0}: anything else is KSTAGE_INVALID_ARGUMENT naming `consumer`.
 * Errors: INVALID_HANDLE (group), INVALID_ARGUMENT (a handle the device
 * runtime refuses).
 *
 * The other direction is the consumer's: kstage frees device memory in the
 * order of its own stream, so a consumer reading device data on its own
 * stream must have finished (synchronised that stream, or an event recorded
 * after its reads) before it releases the group or runs an export's
 * deleter -- as with any DLPack producer.
 *
 * Writes and map commits have the same call for their producers:
 * kstage_op_sync orders a producer's stream or event after the op's work,
 * once the stage has consumed the producer's buffers (a write's staging
 * copies have read them; an unmap's groups are ordered after done_sync), so
 * the producer can reuse them without a host wait.
 */
KSTAGE_API kstage_status_t kstage_group_sync(kstage_stage_t stage, kstage_group_t group,
                                             kstage_device_sync_t consumer);

/* ------------------------------------------------------------------------- */
/* Map / unmap                                                               */
/* ------------------------------------------------------------------------- */

/**
 * \brief Map the query's prims for `desc->attribute` at `ordinal` (> its floor):
 * writable buffers the producer fills, committed by unmap at that ordinal.
 *
 * Fixed-size (element_counts NULL, n 0): a map whose single group covers
 * every row of the column (or creates it) hands out memory that becomes the
 * column's storage when sealed: no copy of the payload anywhere. Other maps
 * (a subset of rows, several groups) are scattered into storage at seal.
 * Array: `element_counts[i]` (n = the query's prim count) is prim i's new
 * length; storage for exactly that is allocated.
 * Buffers are uninitialised. Reads never see them before unmap and seal.
 */
KSTAGE_API kstage_status_t kstage_map_attribute(kstage_stage_t stage, kstage_query_t query,
                                                const kstage_map_desc_t* desc, uint64_t ordinal,
                                                const uint64_t* element_counts, uint64_t n,
                                                kstage_map_t* map);
/** \brief Next writable group, or KSTAGE_END_OF_ITERATION. */
KSTAGE_API kstage_status_t kstage_fetch_map_next(kstage_stage_t stage, kstage_map_t map,
                                                 uint64_t timeout_ns,
                                                 kstage_map_group_info_t* group);
/**
 * \brief Commit one fetched group at the map's ordinal (a write, ordered with
 * other submissions by when this call is made). The stage orders its work
 * after `done_sync.event` (host: {0, 0}). On failure the group stays mapped.
 */
KSTAGE_API kstage_status_t kstage_unmap_group(kstage_stage_t stage, kstage_map_t map,
                                              kstage_map_group_t group,
                                              kstage_device_sync_t done_sync, kstage_op_t* op);
/**
 * \brief Commit every fetched group not yet unmapped (as one op) and end the
 * map. Groups never fetched were never filled: they are dropped, not
 * committed. On failure nothing is committed and the map stays open.
 */
KSTAGE_API kstage_status_t kstage_unmap_attribute(kstage_stage_t stage, kstage_map_t map,
                                                  kstage_device_sync_t done_sync, kstage_op_t* op);
/** \brief Abandon a map: its uncommitted buffers are freed; nothing more is written. */
KSTAGE_API kstage_status_t kstage_release_map(kstage_stage_t stage, kstage_map_t map);
/**
 * \brief Abandon a map whose device buffers a producer may still be writing
 * (work enqueued on its own stream, not yet complete): as kstage_release_map,
 * but the stage frees the buffers only after `producer` -- after its event,
 * or after everything enqueued on its stream so far when the event is 0 (as
 * the unmaps' done_sync) -- stream waits, never a host block. A host map takes
 * {0, 0}: anything else is KSTAGE_INVALID_ARGUMENT naming `producer`, as is a
 * handle the device runtime refuses; on any failure the map stays open.
 * Errors: INVALID_HANDLE (map). (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_release_map_after(kstage_stage_t stage, kstage_map_t map,
                                                    kstage_device_sync_t producer);
/**
 * \brief Export tensor `index` of a fetched, not yet unmapped map group as a
 * writable DLPack tensor (READ_ONLY with KSTAGE_EXPORT_READ_ONLY), so a
 * DLPack-speaking producer can fill it. Writing through it after the group
 * is unmapped is undefined: the memory may have become column storage.
 */
KSTAGE_API kstage_status_t kstage_map_group_export(kstage_stage_t stage, kstage_map_t map,
                                                   kstage_map_group_t group, uint64_t index,
                                                   uint64_t flags,
                                                   struct DLManagedTensorVersioned** tensor);

/* ------------------------------------------------------------------------- */
/* Scene: hierarchy, prim types, relational filters, world transforms        */
/* (Added in 0.4; docs/scene.md explains each with examples.)                */
/* ------------------------------------------------------------------------- */

/**
 * \brief Reserved attribute names (those of the system kstage follows, so that
 * code written against it finds them).
 *
 * - KSTAGE_PRIM_TYPE: a prim's type, fixed-size uint64 lanes 1, semantic
 *   TOKEN_ID (a kstage_token_t such as "Xform"). A write of another kind,
 *   dtype or semantic is INVALID_ARGUMENT naming the reserved name.
 * - KSTAGE_APPLIED_SCHEMAS: a prim's applied schemas, array kind, uint64
 *   lanes 1, TOKEN_ID: a write replaces the prim's whole set; an empty row
 *   clears it. Checked as KSTAGE_PRIM_TYPE.
 * Both are otherwise ordinary columns: sealed, change-tracked, read and
 * exported like any other.
 * - KSTAGE_PATH_ATTRIBUTE, KSTAGE_PARENT_ATTRIBUTE, KSTAGE_CHILDREN_ATTRIBUTE:
 *   names of the hierarchy itself in filter predicates (kstage_predicate_t);
 *   derived from paths, so a write of one is NOT_SUPPORTED.
 * - KSTAGE_LOCAL_MATRIX, KSTAGE_RESET_XFORM_STACK, KSTAGE_WORLD_MATRIX: the
 *   default columns of kstage_compute_world_transforms.
 */
#define KSTAGE_PRIM_TYPE "usd-prim-type"
#define KSTAGE_APPLIED_SCHEMAS "usd-schemas"            /**< a prim's applied schemas (see above) */
#define KSTAGE_PATH_ATTRIBUTE "usd-path"                /**< the prim's own path (filters) */
#define KSTAGE_PARENT_ATTRIBUTE "usd-parent"            /**< the prim's parent (filters) */
#define KSTAGE_CHILDREN_ATTRIBUTE "usd-children"        /**< the prim's children (filters) */
#define KSTAGE_LOCAL_MATRIX "omni:xform"                /**< local matrices (world transforms) */
#define KSTAGE_RESET_XFORM_STACK "omni:resetXformStack" /**< reset flags (world transforms) */
#define KSTAGE_WORLD_MATRIX "omni:fabric:worldMatrix"   /**< world matrices (world transforms) */

/**
 * \brief The hierarchy comes from paths alone: a prim's *parent* is its nearest
 * ancestor path that is a prim of the sealed state (holds an attribute), and
 * a prim with no such ancestor is a *root*. So "/a/b/c" is a child of "/a"
 * while "/a/b" holds nothing, and becomes a child of "/a/b" when "/a/b"
 * gains an attribute. There is no parenting call.
 */
typedef int32_t kstage_relation_t;
enum {
  KSTAGE_RELATION_PARENT = 0,   /**< the prim's parent: one path, none for a root */
  KSTAGE_RELATION_CHILDREN = 1, /**< the prims whose parent it is */
  KSTAGE_RELATION_SIBLINGS = 2  /**< the other children of its parent (roots: the other roots) */
};

/**
 * \brief `count` consecutive path ids first, first + 1, ...: the members of one
 * path range (kstage_intern_path_range), or one path (count 1). A range's
 * members come back as spans, never as one id each: the 1e8 children of
 * "/World/envs" that are members of one range are one span.
 */
typedef struct kstage_path_span_t {
  kstage_path_t first; /**< the first path */
  uint64_t count;      /**< paths in the span (>= 1) */
} kstage_path_span_t;

/** \brief The answer for one input prim of kstage_query_hierarchy. */
typedef struct kstage_hierarchy_item_t {
  /** KSTAGE_OK, or KSTAGE_NOT_FOUND when the input prim does not exist (holds no
   * attribute): only its own item fails. */
  kstage_status_t status;
  /** Zero. */
  uint32_t reserved;
  /** The item's paths are spans[span_offset, span_offset + span_count). */
  uint64_t span_offset;
  /** Entries of `spans` that belong to this item (0: none, or a failed item). */
  uint64_t span_count;
  /** Paths in those spans (the sum of their counts). */
  uint64_t path_count;
} kstage_hierarchy_item_t;

/**
 * \brief The parent, children or siblings of every prim of `query`, in one call,
 * over the latest sealed state: one item per query prim, in query order,
 * each with its own status, and its paths as spans of one array (CSR). The
 * paths of an item are in path-id order (the order of kstage_query_filter);
 * a range's members in member order, as spans. Siblings leave out the prim
 * itself. `*result` holds the answer until kstage_hierarchy_release.
 * INVALID_ARGUMENT for a relation that is none of kstage_relation_t.
 */
KSTAGE_API kstage_status_t kstage_query_hierarchy(kstage_stage_t stage, kstage_query_t query,
                                                  kstage_relation_t relation,
                                                  kstage_hierarchy_t* result);
/** \brief The items (one per query prim) and spans of a hierarchy answer; valid until it is
 * released. Any pointer may be NULL. */
KSTAGE_API kstage_status_t kstage_hierarchy_get(kstage_stage_t stage, kstage_hierarchy_t result,
                                                const kstage_hierarchy_item_t** items,
                                                uint64_t* item_count,
                                                const kstage_path_span_t** spans,
                                                uint64_t* span_count);
/** \brief Release a hierarchy answer; its handle becomes stale. */
KSTAGE_API kstage_status_t kstage_hierarchy_release(kstage_stage_t stage,
                                                    kstage_hierarchy_t result);

/** \brief The operator of a filter predicate (the values of the system kstage follows). */
typedef int32_t kstage_filter_op_t;
enum {
  KSTAGE_FILTER_HAS = 0,      /**< the prim holds `attribute` (no values) */
  KSTAGE_FILTER_IN = 1,       /**< the prim's value is one of `values` */
  KSTAGE_FILTER_CONTAINS = 2, /**< the prim's set holds every one of `values` */
  KSTAGE_FILTER_PREFIX = 3,   /**< the prim's path is at or below values[0] (one value) */
  KSTAGE_FILTER_LT = 4,       /**< reserved: NOT_SUPPORTED */
  KSTAGE_FILTER_LE = 5,       /**< reserved: NOT_SUPPORTED */
  KSTAGE_FILTER_GT = 6,       /**< reserved: NOT_SUPPORTED */
  KSTAGE_FILTER_GE = 7        /**< reserved: NOT_SUPPORTED */
};

/**
 * \brief One criterion of a filter. What is supported (anything else is
 * KSTAGE_NOT_SUPPORTED naming the predicate, its operator and attribute --
 * never ignored):
 *   - HAS on any attribute (`values` unused: 0 of them). On the derived names:
 *     KSTAGE_PATH_ATTRIBUTE every prim, KSTAGE_PARENT_ATTRIBUTE the prims that have a parent (not
 *     the roots), KSTAGE_CHILDREN_ATTRIBUTE the prims that have children;
 *   - KSTAGE_PATH_ATTRIBUTE IN path ids; KSTAGE_PATH_ATTRIBUTE PREFIX one path id;
 *   - KSTAGE_PARENT_ATTRIBUTE IN path ids: the children of those prims;
 *   - KSTAGE_CHILDREN_ATTRIBUTE CONTAINS path ids: the prim is the parent of every one;
 *   - KSTAGE_PRIM_TYPE IN token ids;
 *   - KSTAGE_APPLIED_SCHEMAS CONTAINS token ids: the prim has every one applied.
 * `values` are host memory, `value_count` entries (at least one; exactly one
 * for PREFIX), each a valid path or token id of the stage; a path need not be
 * a prim (it then matches nothing). A malformed predicate -- an operator
 * outside kstage_filter_op_t, `reserved` not zero, an attribute that is no
 * token, values on HAS, a wrong value count, a bad entry -- is
 * INVALID_ARGUMENT naming it (and the entry).
 */
typedef struct kstage_predicate_t {
  kstage_filter_op_t op;    /**< the operator */
  uint32_t reserved;        /**< zero */
  kstage_token_t attribute; /**< what it tests (a reserved name or any attribute for HAS) */
  const uint64_t* values;   /**< path or token ids (see above) */
  uint64_t value_count;     /**< entries of `values` */
} kstage_predicate_t;

/**
 * \brief A filter over existing prims: the AND of its predicates (an
 * extensible descriptor: start from kstage_filter_ex_init(); no predicate:
 * every existing prim). (Added in 0.4; kstage_filter_t keeps working.)
 */
typedef struct kstage_filter_ex_t {
  /** sizeof(kstage_filter_ex_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** Must be zero. */
  uint32_t reserved;
  /** `predicate_count` criteria, all of which a prim must meet (host memory). */
  const kstage_predicate_t* predicates;
  /** Entries of `predicates`. */
  uint64_t predicate_count;
} kstage_filter_ex_t;

/** \brief A query over the existing prims (latest sealed state) that meet every predicate of
 * `filter`, in path-id order (as kstage_query_filter). */
KSTAGE_API kstage_status_t kstage_query_filter_ex(kstage_stage_t stage,
                                                  const kstage_filter_ex_t* filter,
                                                  kstage_query_t* query);

/** \brief What kstage_compute_world_transforms recomputes. */
typedef int32_t kstage_transform_mode_t;
enum {
  /** Exactly the prims whose local matrix or reset changed (sealed) since the previous
   * compute of the same world column, their descendants, and prims that appeared,
   * disappeared or got another parent since then; everything when there was no previous
   * compute, or when it cannot vouch for the world column (see kstage_compute_world_transforms). */
  KSTAGE_TRANSFORM_INCREMENTAL = 0,
  /** Every prim that holds a local matrix. */
  KSTAGE_TRANSFORM_FULL = 1
};

/**
 * \brief Which columns kstage_compute_world_transforms reads and writes (an
 * extensible descriptor: start from kstage_transform_desc_init(), which means
 * "incremental, with the default column names").
 */
typedef struct kstage_transform_desc_t {
  /** sizeof(kstage_transform_desc_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** INCREMENTAL (0, the default) or FULL. */
  kstage_transform_mode_t mode;
  /** The local matrices: fixed-size float64 x 16 (or float32 x 16), row-major. 0:
   * KSTAGE_LOCAL_MATRIX. */
  kstage_token_t local;
  /** The reset flags: fixed-size bool (kDLBool, 8 bits, lanes 1): a prim whose flag is
   * true is a root, its world matrix its local one. 0: KSTAGE_RESET_XFORM_STACK. A reset
   * column that does not exist resets nothing. */
  kstage_token_t reset;
  /** The world matrices written: created with the local column's dtype and residency when
   * it does not exist, else it must have that dtype and residency. 0: KSTAGE_WORLD_MATRIX. */
  kstage_token_t world;
} kstage_transform_desc_t;

/** \brief "Incremental, default column names", struct_size set. */
static inline kstage_transform_desc_t kstage_transform_desc_init(void) {
  kstage_transform_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_transform_desc_t);
  return d;
}
/** \brief "Every existing prim", struct_size set. */
static inline kstage_filter_ex_t kstage_filter_ex_init(void) {
  kstage_filter_ex_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_filter_ex_t);
  return d;
}

/**
 * \brief Compute world matrices from local ones, as one write of the world column
 * at `ordinal` (an op, asynchronous like a write; the caller seals it).
 *
 * Convention (USD's): matrices are 4 x 4, row-major, for row vectors, with
 * the translation in elements 12-14: world = local . parent_world, where the
 * parent is the nearest ancestor that holds a local matrix (a prim between
 * them that holds none passes its parent's world through: an identity local).
 * A prim with no such ancestor, or whose reset flag is true, is a root:
 * world = local. Every prim that holds a local matrix gets a world row; the
 * compute deletes (at `ordinal`) the world rows of prims that no longer hold
 * one. Reads never compute: the world column is an ordinary column, read,
 * exported, checkpointed and change-tracked like any other -- its change
 * range says exactly which prims' world matrices this call wrote.
 *
 * Inputs are the local and reset columns' latest sealed state when the call
 * is made. INCREMENTAL (the default) writes exactly the prims named there;
 * it computes everything when the world column was not written by the
 * previous compute of the same columns, that compute's ordinal is not yet
 * sealed, or its op failed. A write of the world column by anyone else
 * (sealed) makes its prims recomputed: the world column never drifts from
 * the local matrices. On a device column the compute runs on the device, in
 * the stage's stream order after the seals it reads, with no host copy of
 * the data.
 *
 * Errors, each naming the input and leaving the stage unchanged: NOT_FOUND
 * when the local column does not exist; INVALID_ARGUMENT for a local column
 * that is not fixed-size float64/float32 x 16, a reset column that is not
 * fixed-size bool, a world column of another kind, dtype or residency than
 * the local one, two of the three names the same, or a mode that is none of
 * kstage_transform_mode_t; WRITE_FLOOR_VIOLATION for an ordinal at or below
 * the world column's write floor; NOT_SUPPORTED for a reset column on
 * another device than the local one.
 */
KSTAGE_API kstage_status_t kstage_compute_world_transforms(kstage_stage_t stage,
                                                           const kstage_transform_desc_t* desc,
                                                           uint64_t ordinal, kstage_op_t* op);

/**
 * \brief Clone: copy the prim `source` and every existing prim below it (its
 * subtree in the sealed state) to each of `n` target paths, creating them, as
 * one op at `ordinal` (asynchronous like a write; the caller seals it).
 *
 * For a target T, the copy of source prim S/x is T/x; it gets every attribute
 * S/x holds -- fixed and array columns of every dtype and semantic, prim type
 * and applied schemas included -- with the values of the latest sealed state
 * when the call is made. Paths between them that hold nothing stay paths that
 * hold nothing. Values of KSTAGE_SEMANTIC_PATH_ID and
 * KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID columns (fixed or array: every word),
 * and word 0 (the path) of KSTAGE_SEMANTIC_CONNECTION_PATH_ID elements (word
 * 1, the attribute's token, is kept), that name a path at or below `source`
 * are rebased to the same path below the target (a relationship or
 * connection inside the subtree points inside the copy); values naming
 * paths outside the subtree, or no path, are copied as they are, and so are
 * KSTAGE_SEMANTIC_ASSET_PATH_ID values (asset paths, not prim paths). The
 * created paths are interned by the call, in one batch (their strings are
 * never made). A path range below `source` (kstage_intern_path_range, say
 * S/pts/p{0..999}) is copied as a range: each target gets one range of the
 * same prefix, first number and count under its copy of the range's parent
 * (T/pts/p{0..999}: kstage_path_range_definition and range queries work on
 * it), and the copy of member S/pts/p17 is its member T/pts/p17; members
 * that hold nothing stay paths that hold nothing. Each column is copied by
 * one gather on its own device: device columns stay in device memory.
 *
 * Create-only and all-or-nothing. Everything is checked at the call, which
 * either refuses the clone, leaving the stage unchanged, or returns an op
 * that fails only if its device work does (KSTAGE_DEVICE_ERROR):
 *   - NOT_FOUND: `source` does not exist (holds no attribute);
 *   - INVALID_ARGUMENT: `source` or a target is not a path id, a target is
 *     `source` or lies below it, a target is listed twice or lies below
 *     another target (their copies would overlap), n is 0, or `targets` is
 *     NULL;
 *   - ALREADY_EXISTS: a path the copy would create exists at `ordinal`
 *     (sealed state plus the mutations submitted before, as for an INSERT
 *     write); the message names it and its target; or a range the copy needs
 *     cannot be made under a target's existing copy of its parent (a path
 *     there, or another range, has a member's name: as for
 *     kstage_intern_path_range);
 *   - WRITE_FLOOR_VIOLATION: `ordinal` is not above the write floor of an
 *     attribute the subtree holds.
 * Once sealed, the copies are ordinary prims: change ranges report them (and
 * only them) at `ordinal`, and reads, exports, the hierarchy and checkpoints
 * see them like written prims. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_clone(kstage_stage_t stage, kstage_path_t source,
                                        const kstage_path_t* targets, uint64_t n, uint64_t ordinal,
                                        kstage_op_t* op);
/**
 * \brief kstage_clone to `count` members of the path range whose first id is
 * `first`, from member `start` (count 0: to the range's end): 4,096 or 1e6
 * targets named without a string or an id list each (kstage_intern_path_range).
 * INVALID_ARGUMENT when `first` is no range's first id or start and count
 * reach beyond it; otherwise as kstage_clone. (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_clone_range(kstage_stage_t stage, kstage_path_t source,
                                              kstage_path_t first, uint64_t start, uint64_t count,
                                              uint64_t ordinal, kstage_op_t* op);

/* ------------------------------------------------------------------------- */
/* Ops                                                                       */
/* ------------------------------------------------------------------------- */

/**
 * \brief Wait for an op's device work (the copy out of the caller's tensors).
 * Host work is complete when the call that made the op returns; an op on a
 * device column completes when its copies have run (after the producer's
 * event, if the write named one). `timeout_ns` 0 polls, KSTAGE_TIMEOUT_INFINITE
 * blocks. Managed tensors the stage copied (not adopted) are deleted once
 * the op's work is done. kstage_op_error and kstage_release_op work on ops
 * still in flight; releasing one does not cancel its work, and
 * kstage_destroy waits for all work in flight before freeing anything.
 * \return KSTAGE_OK when done, KSTAGE_TIMEOUT if still running, or the code
 * the op failed with (its message from kstage_op_error).
 */
KSTAGE_API kstage_status_t kstage_wait(kstage_stage_t stage, kstage_op_t op, uint64_t timeout_ns);
/**
 * \brief Order a consumer after an op's device work, on the device instead
 * of the host (kstage_wait's counterpart, and kstage_group_sync's for writes
 * and map commits): `consumer.stream` (kstage_device_sync_t's values) is made
 * to wait for it, and a non-zero `consumer.event` is recorded after it --
 * stream waits, never a host block. "After it" is after all the work the
 * stage enqueued so far on each device the op's work ran on, which includes
 * the op's (as for kstage_group_sync). Call it any time while the op handle
 * is live, before or after the work completes (then the stream waits for
 * nothing and the event completes at once).
 *
 * What the work is, so what the consumer is ordered after ("consumed"):
 *   - a write (kstage_write_attribute(s)): the staging copies out of the
 *     caller's tensors -- data, a device index map or mask -- have run. The
 *     producer may then overwrite or free those buffers: the stage reads
 *     them no more (its seal reads its own staged copy). A managed tensor
 *     the write adopted (kstage_write_data_t::managed_tensors: memory the
 *     stage keeps instead of copying) is excluded: it was the stage's from
 *     the call on, is read until its write is sealed (or becomes the
 *     column's storage) and is let go through its deleter, never by this
 *     event; its producer must not reuse it, and the event says nothing about
 *     it (the op's work is then the rest of the write's copies, if any);
 *   - an unmap (kstage_unmap_group, kstage_unmap_attribute): the stage's
 *     order after the producer's `done_sync` -- everything the producer
 *     enqueued into the group's buffers has run, and the buffers are the
 *     stage's alone (they were its memory from the map on; the seal reads
 *     them);
 *   - a clone: its source gathers; world transforms: the kernel; a delete:
 *     nothing (host work).
 * An op with no device work -- host data into a host column (a device
 * source staged on the host is copied before the call returns), host map
 * buffers, a delete -- is complete when the call that made it returned and
 * takes {0, 0} (OK at once): anything else is KSTAGE_INVALID_ARGUMENT naming
 * `consumer`. An op whose work ran on several devices (a batch of columns on
 * different devices) orders `consumer.stream` after each; a non-zero
 * `consumer.event` is then KSTAGE_INVALID_ARGUMENT (one event cannot be
 * recorded after work on several devices). A consumer handle of a device
 * the op did not touch is passed to the runtime as by kstage_group_sync: a
 * stream may wait across devices; what the runtime refuses is
 * KSTAGE_INVALID_ARGUMENT naming `consumer.stream` or `consumer.event`.
 * It does not report the op's outcome (kstage_wait, kstage_op_error do): a
 * failed device copy still completes the event. Errors: INVALID_HANDLE (op
 * unknown or released), INVALID_ARGUMENT (above). (Added in 0.4.)
 */
KSTAGE_API kstage_status_t kstage_op_sync(kstage_stage_t stage, kstage_op_t op,
                                          kstage_device_sync_t consumer);
/** \brief The op's failure message ("" if it did not fail); valid until the op is released. */
KSTAGE_API kstage_status_t kstage_op_error(kstage_stage_t stage, kstage_op_t op,
                                           const char** message);
/** \brief Release an op; its handle becomes stale. Its work is not cancelled (see kstage_wait). */
KSTAGE_API kstage_status_t kstage_release_op(kstage_stage_t stage, kstage_op_t op);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KSTAGE_KSTAGE_H_ */
