/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage/kstage_adios2.h
 * \brief kstage with ADIOS2: a stage's sealed state as ADIOS2 steps -- checkpoints and restarts
 * in BP5 files, and streams to readers in other processes (SST) or the same one (Inline).
 *
 * The bridge is its own library, libkstage_adios2 (CMake: find_package(kstage COMPONENTS
 * adios2), target kstage::adios2); libkstage never links ADIOS2. It writes and reads through
 * ADIOS2's engines, chosen at run time by name, so one API gives files, streams and in-process
 * coupling.
 *
 * A *step* holds, for a query's prims, the sealed values of some attributes: all of them (a
 * full step, e.g. a checkpoint), or only what changed in a change range of ordinals, with the
 * prims that lost an attribute (an incremental step). Reading a step into a stage interns its
 * paths, makes the columns with the recorded schema, writes the values at the recorded write
 * floors and seals them: a restart reads a checkpoint, then the incremental steps after it, in
 * order. The layout of a step, for tools that read kstage files without kstage, is in
 * docs/adios2.md.
 *
 * Checkpoints that can be trusted: every BP5 folder the bridge writes is flushed to stable
 * storage and sealed by a manifest (kstage_adios2_manifest_t) that a restart checks before
 * ADIOS2 opens anything, and every step carries per-attribute checksums of its values that a
 * reader checks before anything is written into its stage; kstage_adios2_checkpoint_latest keeps
 * the last complete checkpoint named through a kill or a power loss.
 *
 * Conventions (those of kstage.h): every function returns a ::kstage_status_t; on failure
 * kstage_adios2_last_error() gives the calling thread's message; out-parameters are written
 * only on success; no function throws or aborts. Streams are uint64_t handles, 0 never valid.
 * A call that fails leaves the stage exactly as it was: a step is checked whole -- its format,
 * its dtypes, its schema against the stage's columns, its ordinals against the write floors --
 * before anything of it is written.
 */
#ifndef KSTAGE_KSTAGE_ADIOS2_H_
#define KSTAGE_KSTAGE_ADIOS2_H_

#include <kstage/kstage.h>

#ifdef __cplusplus
extern "C" {
#endif

/** \brief An open ADIOS2 engine with the bridge's IO: a file or a stream, to write or to read. */
typedef uint64_t kstage_adios2_stream_t;

/** \brief What a stream does. */
typedef int32_t kstage_adios2_mode_t;
enum {
  KSTAGE_ADIOS2_WRITE = 0, /**< write steps (a new file, or a stream's writer side) */
  KSTAGE_ADIOS2_READ = 1   /**< read steps, in order */
};

/**
 * \brief Whether a read checks a BP5 folder's manifest before ADIOS2 opens it.
 *
 * Every BP5 folder the bridge writes (kstage_adios2_checkpoint, and a BP5 stream when it is
 * closed) is sealed by a manifest, `kstage.manifest`, written last (docs/adios2.md, "The
 * manifest"): each file's size and XXH3-64 checksum, the steps, the kstage and ADIOS2 versions.
 * A folder whose manifest matches is exactly what was written; one that does not is refused
 * with KSTAGE_OP_FAILED naming the file and what differs (its size, its checksum, missing, not
 * in the manifest, a damaged manifest) -- before ADIOS2, whose BP5 reader may crash or wait
 * forever on damaged files, reads any of it. Checking reads every byte once (XXH3-64 runs at
 * memory speed: the read is the cost).
 */
typedef int32_t kstage_adios2_manifest_t;
enum {
  /** kstage_adios2_open: not checked (a stream, or a file a writer may still be writing);
   * restarts: checked where there is a manifest, and a folder without one (written before
   * manifests, or not by kstage) is read unchecked with a WARNING on the "adios2" log channel. */
  KSTAGE_ADIOS2_MANIFEST_DEFAULT = 0,
  /** Checked where there is a manifest; a folder without one is read unchecked, silently. */
  KSTAGE_ADIOS2_MANIFEST_IF_PRESENT = 1,
  /** Verified reads only: a folder without a manifest is KSTAGE_INVALID_ARGUMENT naming it. */
  KSTAGE_ADIOS2_MANIFEST_REQUIRED = 2
};

/**
 * \brief How kstage_adios2_open opens a stream (an extensible descriptor, as kstage.h's: start
 * from kstage_adios2_open_desc_init()).
 */
typedef struct kstage_adios2_open_desc_t {
  /** sizeof(kstage_adios2_open_desc_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** KSTAGE_ADIOS2_WRITE (the default) or KSTAGE_ADIOS2_READ. */
  kstage_adios2_mode_t mode;
  /** ADIOS2's engine type ("BP5", "SST", "Inline", ...); NULL: "BP5". An engine this ADIOS2
   * does not have is KSTAGE_NOT_SUPPORTED naming it. */
  const char* engine;
  /** Engine parameters as NULL-terminated {key, value, key, value, ..., NULL} (ADIOS2's
   * IO::SetParameter; SST's "DataTransport", "NetworkInterface", ...); NULL: none. */
  const char* const* parameters;
  /** A reader of the Inline engine: the writer's stream, whose IO it must share (Inline couples
   * a writer and a reader in one process; the reader is opened under a name of its own); 0
   * otherwise. */
  kstage_adios2_stream_t inline_writer;
  /** A reader of a BP5 folder: whether its manifest is checked before ADIOS2 opens it
   * (::kstage_adios2_manifest_t; 0: not checked). Ignored by writers and other engines. Added
   * after the descriptor's first layout: a struct_size of that layout (32 bytes, up to
   * inline_writer) is still accepted and leaves it 0. */
  kstage_adios2_manifest_t manifest;
} kstage_adios2_open_desc_t;

/** \brief What kstage_adios2_write_step writes (start from kstage_adios2_step_desc_init()). */
typedef struct kstage_adios2_step_desc_t {
  /** sizeof(kstage_adios2_step_desc_t) as the caller's header declares it. */
  uint32_t struct_size;
  /** false: a full step (every value of the attributes for the query's prims that hold them);
   * true: an incremental step, the change range [range_begin, range_end] with its deletions. */
  bool change_range;
  /** Must be zero. */
  uint8_t reserved[3];
  /** First ordinal of the change range (inclusive; change_range only). */
  uint64_t range_begin;
  /** Last ordinal of the change range (inclusive). */
  uint64_t range_end;
} kstage_adios2_step_desc_t;

/**
 * \brief How kstage_adios2_restart_ex restarts (start from kstage_adios2_restart_desc_init()).
 */
typedef struct kstage_adios2_restart_desc_t {
  /** sizeof(kstage_adios2_restart_desc_t) as the caller's header declares it (first layout: 8). */
  uint32_t struct_size;
  /** Whether the folder's manifest is checked (KSTAGE_ADIOS2_MANIFEST_DEFAULT: where there is
   * one, with a warning where there is none; KSTAGE_ADIOS2_MANIFEST_REQUIRED: verified restarts
   * only). */
  kstage_adios2_manifest_t manifest;
} kstage_adios2_restart_desc_t;

/** \brief Defaults for kstage_adios2_restart_ex (the manifest checked where there is one). */
static inline kstage_adios2_restart_desc_t kstage_adios2_restart_desc_init(void) {
  kstage_adios2_restart_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_adios2_restart_desc_t);
  return d;
}
/** \brief Defaults for kstage_adios2_open (write BP5), struct_size set. */
static inline kstage_adios2_open_desc_t kstage_adios2_open_desc_init(void) {
  kstage_adios2_open_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_adios2_open_desc_t);
  return d;
}
/** \brief A full step, struct_size set. */
static inline kstage_adios2_step_desc_t kstage_adios2_step_desc_init(void) {
  kstage_adios2_step_desc_t d = KSTAGE_IMPL_ZERO;
  d.struct_size = (uint32_t)sizeof(kstage_adios2_step_desc_t);
  return d;
}

/** \brief The calling thread's message for its last failed kstage_adios2_* call ("" if none). */
KSTAGE_API const char* kstage_adios2_last_error(void);

/**
 * \brief Opens `name` (a file path for BP5, a stream name for SST and Inline) with the engine
 * `desc` names. `desc` may be NULL for "write BP5". A reader of a file that is not a kstage
 * file fails at its first step, not here (ADIOS2 opens any file).
 */
KSTAGE_API kstage_status_t kstage_adios2_open(const char* name,
                                              const kstage_adios2_open_desc_t* desc,
                                              kstage_adios2_stream_t* stream);
/**
 * \brief Closes a stream (a writer's last step is complete when this returns). A writer of a
 * BP5 folder then seals it: its files and the folder are flushed to stable storage (fsync), and
 * its manifest written last, atomically and durably (kstage_adios2_manifest_t); on MPI ranks,
 * by rank 0 once every rank has closed. A failure to flush or seal is KSTAGE_OP_FAILED naming
 * the file (the folder then has no manifest: a restart that requires one refuses it); a folder
 * holding a step whose write failed half-way (a put, the step's end -- a full disk -- or a GPU
 * check) is not sealed (a WARNING on the "adios2" channel).
 */
KSTAGE_API kstage_status_t kstage_adios2_close(kstage_adios2_stream_t stream);

/**
 * \brief Writes one step: the sealed state of `attributes` (n of them, distinct; n = 0: every
 * attribute with a column) for the query's prims, as `desc` says (NULL: a full step). Each
 * attribute's values are read from the stage (zero-copy groups, put without a copy when their
 * rows are in prim order) and held until the step ends. A fixed-size column on a GPU is put
 * from device memory where ADIOS2 takes it (an ADIOS2 with GPU support for that device, and the
 * BP5 engine), else read to the host; the memory space is always stated. The step's ordinal is
 * the highest write floor among the attributes written. Each writer's block of each attribute's
 * values carries its XXH3-64 (kstage/attr/NAME/checksums; not for values put from GPU memory),
 * which readers check. After ADIOS2 has copied values out of GPU memory, each such GPU is
 * synchronised and checked (kstage_device_check): a fault is KSTAGE_DEVICE_ERROR naming the
 * step, whose data is then not to be trusted.
 */
KSTAGE_API kstage_status_t kstage_adios2_write_step(kstage_adios2_stream_t stream,
                                                    kstage_stage_t stage, kstage_query_t query,
                                                    const kstage_token_t* attributes, uint64_t n,
                                                    const kstage_adios2_step_desc_t* desc);

/**
 * \brief Reads the next step into `stage`: its paths interned, its columns made with the
 * recorded schema (or checked against the stage's), its values written and its deletions made
 * at each attribute's recorded write floor, which is then sealed. A fixed-size attribute whose
 * column is on a GPU ADIOS2 takes memory of (as for kstage_adios2_write_step) is read by ADIOS2
 * into device memory of the stage's (a map), else into host memory and written. `*ordinal` is the
 * step's ordinal. KSTAGE_END_OF_ITERATION when the stream has no more steps; KSTAGE_TIMEOUT when a
 * stream's next step is not ready within `timeout_ns` (KSTAGE_TIMEOUT_INFINITE waits). Errors:
 * INVALID_ARGUMENT naming what does not fit -- not a kstage step, an unknown dtype, an
 * attribute whose kind or dtype differs from the stage's column, an ordinal at or below the
 * stage's write floor of that attribute; OP_FAILED for a file ADIOS2 cannot read (one shorter
 * than its metadata says is refused at once, naming it: every read of a file is bounded by its
 * size, docs/adios2.md "Bounded reads"); OP_FAILED naming the attribute for values that do not
 * match the step's checksums of them (every step the bridge writes carries them:
 * kstage/attr/NAME/checksums); DEVICE_ERROR naming the step for a fault of a GPU ADIOS2 copied
 * values into (checked with kstage_device_check before anything is committed). The stage is
 * unchanged by a step that fails. A BP5 folder is checked against its manifest at
 * kstage_adios2_open only where desc.manifest asks: ADIOS2 alone may crash or hang on damaged BP5
 * files (docs/adios2.md, "What ADIOS2 alone does with damaged files").
 */
KSTAGE_API kstage_status_t kstage_adios2_read_step(kstage_adios2_stream_t stream,
                                                   kstage_stage_t stage, uint64_t timeout_ns,
                                                   uint64_t* ordinal);

/**
 * \brief A checkpoint: every attribute of every existing prim of `stage`, as one full step of a
 * new BP5 file at `path` (replaced if it exists), flushed to stable storage and sealed by its
 * manifest (kstage_adios2_close). A checkpoint is complete when this returns KSTAGE_OK; a crash
 * before leaves a folder without a manifest, or with one its files do not match.
 */
KSTAGE_API kstage_status_t kstage_adios2_checkpoint(kstage_stage_t stage, const char* path);
/**
 * \brief A restart: every step of the BP5 file at `path` read into `stage`, in order (a
 * checkpoint and the incremental steps after it). `*ordinal` (may be NULL) is the last step's.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart(kstage_stage_t stage, const char* path,
                                                 uint64_t* ordinal);
/**
 * \brief kstage_adios2_restart as `desc` says (NULL: the defaults, as kstage_adios2_restart).
 * Before ADIOS2 opens anything, the folder is checked against its manifest
 * (kstage_adios2_manifest_t): a folder that does not match is KSTAGE_OP_FAILED naming the file
 * and what differs (size, checksum, a missing or extra file, a damaged manifest); one without a
 * manifest is read unchecked with a WARNING on the "adios2" log channel, or, with
 * KSTAGE_ADIOS2_MANIFEST_REQUIRED, refused with KSTAGE_INVALID_ARGUMENT. The stage is unchanged
 * by a restart refused.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart_ex(kstage_stage_t stage, const char* path,
                                                    const kstage_adios2_restart_desc_t* desc,
                                                    uint64_t* ordinal);

/**
 * \brief A checkpoint made the latest, durably: the procedure of docs/adios2.md ("A checkpoint
 * that survives a crash"). `pointer` is a small file naming the latest complete checkpoint; the
 * checkpoint is written to `<pointer>.0` or `<pointer>.1` -- the one `pointer` does not name
 * (`.0` when there is no pointer yet) -- flushed and sealed (kstage_adios2_checkpoint), and then
 * `pointer` is replaced atomically (written aside, flushed, renamed over, its folder flushed) to
 * name it. A kill or a power loss at any instant leaves `pointer` naming a complete checkpoint:
 * the new one or the one before. `pointer`'s content is the checkpoint's file name (relative to
 * `pointer`'s folder) and a newline.
 */
KSTAGE_API kstage_status_t kstage_adios2_checkpoint_latest(kstage_stage_t stage,
                                                           const char* pointer);
/**
 * \brief A restart from the checkpoint `pointer` names (kstage_adios2_checkpoint_latest), its
 * manifest required (KSTAGE_ADIOS2_MANIFEST_REQUIRED). No pointer, or one that names nothing, is
 * KSTAGE_INVALID_ARGUMENT naming it. `*ordinal` (may be NULL) is the checkpoint's.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart_latest(kstage_stage_t stage, const char* pointer,
                                                        uint64_t* ordinal);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KSTAGE_KSTAGE_ADIOS2_H_ */
