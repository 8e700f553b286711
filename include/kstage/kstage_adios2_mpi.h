/* SPDX-License-Identifier: Apache-2.0 */
/**
 * \file kstage/kstage_adios2_mpi.h
 * \brief The ADIOS2 bridge on MPI ranks: a step written by P ranks, each its block of the
 * step's global arrays, and read back by any number Q of ranks.
 *
 * In libkstage_adios2 where the ADIOS2 it is built with has MPI (ADIOS2_HAVE_MPI; CMake:
 * find_package(kstage COMPONENTS adios2_mpi), target kstage::adios2_mpi). libkstage itself
 * never links MPI or ADIOS2.
 *
 * A stream opened here is *collective* over `comm`: every rank of it opens, writes each step,
 * reads each step and closes, in the same order, with the same arguments but its own stage
 * and query. (The ::kstage_adios2_stream_t handles are each rank's own.) Each rank owns a
 * stage -- typically the prims of its part of a decomposed domain -- and:
 *
 * - kstage_adios2_write_step writes the sealed state of the rank's query as the rank's block of
 *   every global array of the step: rank r's rows start where ranks 0 .. r-1's end (an exscan
 *   of the blocks' sizes), and every index in them (a path run's string, a position, an
 *   offset) counts from the start of the whole array, so a reader of the whole file (ADIOS2's
 *   own readers, `bpls`, ParaView, kstage alone) sees one step holding every rank's prims.
 *   The step's attributes are every rank's (a rank without a column of another's attribute
 *   writes an empty block of it); one attribute with two schemas on two ranks fails the step
 *   on every rank, naming both. The step's ordinal and each attribute's `floor` are the largest
 *   of the ranks'; each rank's own floor is kept per block (`kstage/attr/<name>/floors`).
 *   A change range must be the same on every rank.
 * - kstage_adios2_read_step, on Q ranks of a step of W writers, reads into reading rank q's
 *   stage the blocks of writers [W q / Q, W (q + 1) / Q): Q = W gives each rank its own block
 *   back, Q < W merges neighbouring writers' blocks, Q > W leaves some ranks without blocks (for
 *   W = 1, Q = 2: rank 0; their stages get every column of the step, empty, at the step's
 *   floors). Merged blocks are one step: a prim one writer deleted and another wrote in it (it
 *   moved between them) is written; a prim two of them wrote or deleted (a ghost copy) fails
 *   the step, naming it. Each attribute is written at the largest floor among the rank's
 *   writers; a rank none of whose writers had a column of an attribute gets none.
 * - Failures: a call that fails on one rank (a bad argument, a step that does not fit its
 *   stage) fails on every rank -- the others with the failing rank's number and message --
 *   before any prim of any stage changes (a step's paths may stay interned, which makes no
 *   prim), so that no rank waits forever in a collective call. Not agreed, as with MPI's own
 *   collectives, whose arguments must be valid on every rank: a handle that is not an open
 *   stream on some rank (that rank fails alone, before the communicator is known, and the
 *   others wait for it), and an I/O failure inside ADIOS2's own collective calls (ADIOS2's to
 *   report).
 *
 * Build: an ADIOS2 with MPI (Spack's adios2+mpi, a module, or `scripts/setup.sh --adios2-mpi`,
 * which builds ADIOS2 from PyPI's source distribution with the machine's MPI); the same MPI
 * for the application. The layout of the step is docs/adios2.md's.
 */
#ifndef KSTAGE_KSTAGE_ADIOS2_MPI_H_
#define KSTAGE_KSTAGE_ADIOS2_MPI_H_

#include <kstage/kstage_adios2.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * \brief Opens `name` on every rank of `comm` (collective): kstage_adios2_open's stream, whose
 * steps the ranks of `comm` write or read together. `comm` is duplicated (ADIOS2 keeps its
 * own duplicate); the caller may free it after this returns. An Inline reader
 * (desc->inline_writer) is not collective and cannot be opened here (INVALID_ARGUMENT).
 */
KSTAGE_API kstage_status_t kstage_adios2_open_mpi(const char* name,
                                                  const kstage_adios2_open_desc_t* desc,
                                                  MPI_Comm comm, kstage_adios2_stream_t* stream);

/**
 * \brief A checkpoint on every rank of `comm` (collective): every attribute of every existing
 * prim of each rank's `stage`, as that rank's block of one full step of a new BP5 file at
 * `path` (the same on every rank).
 */
KSTAGE_API kstage_status_t kstage_adios2_checkpoint_mpi(kstage_stage_t stage, const char* path,
                                                        MPI_Comm comm);

/**
 * \brief A restart on every rank of `comm` (collective): every step of the BP5 file at `path`,
 * in order, each rank reading its share of the writers' blocks (above) into its `stage`.
 * `*ordinal` (may be NULL) is the last step's. Any number of ranks reads a file any number
 * wrote.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart_mpi(kstage_stage_t stage, const char* path,
                                                     MPI_Comm comm, uint64_t* ordinal);

/**
 * \brief kstage_adios2_restart_ex on every rank of `comm` (collective): kstage_adios2_restart_mpi
 * as `desc` says (NULL: the defaults). The folder is checked against its manifest by rank 0
 * before ADIOS2 opens anything, and the ranks agree on the outcome: a folder that does not match
 * (a damaged file of any rank's blocks) is KSTAGE_OP_FAILED on every rank -- rank 0 naming the
 * file, the others naming rank 0 -- and one without a manifest, with
 * KSTAGE_ADIOS2_MANIFEST_REQUIRED, KSTAGE_INVALID_ARGUMENT on every rank; no stage changes.
 * `desc` must say the same on every rank.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart_ex_mpi(kstage_stage_t stage, const char* path,
                                                        const kstage_adios2_restart_desc_t* desc,
                                                        MPI_Comm comm, uint64_t* ordinal);

/**
 * \brief kstage_adios2_checkpoint_latest on every rank of `comm` (collective): the ranks read the
 * pointer (rank 0's reading, agreed), write the checkpoint it does not name
 * (kstage_adios2_checkpoint_mpi: each rank its block, flushed and sealed by rank 0 after every
 * rank closed), and rank 0 replaces the pointer durably once the seal is there. `pointer` must be
 * the same on every rank.
 */
KSTAGE_API kstage_status_t kstage_adios2_checkpoint_latest_mpi(kstage_stage_t stage,
                                                               const char* pointer, MPI_Comm comm);

/**
 * \brief kstage_adios2_restart_latest on every rank of `comm` (collective): the checkpoint the
 * pointer names -- as rank 0 reads it, agreed by the ranks, so that every rank reads the same
 * checkpoint -- restarted as kstage_adios2_restart_ex_mpi with KSTAGE_ADIOS2_MANIFEST_REQUIRED.
 */
KSTAGE_API kstage_status_t kstage_adios2_restart_latest_mpi(kstage_stage_t stage,
                                                            const char* pointer, MPI_Comm comm,
                                                            uint64_t* ordinal);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KSTAGE_KSTAGE_ADIOS2_MPI_H_ */
