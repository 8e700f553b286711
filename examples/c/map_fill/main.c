/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kstage map / unmap: let a producer write straight into kstage's buffers.
 *
 * kstage_write_attribute copies the caller's tensor in. A *map* turns that
 * around: kstage hands out writable buffers, the producer fills them in place,
 * and *unmap* commits them as a write at the map's ordinal. When one map
 * group covers every row of a fixed-size column (or creates the column), the
 * buffer itself becomes the column's storage at seal: the payload is never
 * copied, only filled.
 *
 * This example
 *   1. maps a new float3 "points" column for N prims, fills it from a loop,
 *      unmaps, seals, reads it back zero-copy and checks every value and that
 *      the storage the read sees *is* the mapped buffer (no copy);
 *   2. maps an array attribute "samples" with a per-prim element count (some
 *      zero), in several groups, fills each prim's row, unmaps group by
 *      group, seals and checks every row.
 * It prints a short report and "map_fill: OK", or exits 1 on a mismatch.
 *
 * The life of a map:
 *   kstage_map_attribute     open it: attribute, schema (for a new column),
 *                            prim mode, ordinal (> the attribute's floor),
 *                            per-prim element counts for arrays
 *   kstage_fetch_map_next    next writable group, until KSTAGE_END_OF_ITERATION
 *   ... fill group.data.tensors (uninitialised memory: write every byte) ...
 *   kstage_unmap_group       commit one group (a write at the map's ordinal)
 *   kstage_unmap_attribute   commit every fetched group not yet unmapped, end the map
 *   kstage_release_map       abandon it: uncommitted buffers are freed
 *   kstage_advance_write_floor  seal: only now do readers see the data
 */
#include <kstage/kstage.h>

#include <stdio.h>
#include <string.h>

/* Every kstage call returns a status; on failure kstage_last_error() says why. */
#define CHECK(call)                                                            \
  do {                                                                         \
    kstage_status_t st_ = (call);                                              \
    if (st_ != KSTAGE_OK) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, kstage_status_string(st_), \
              kstage_last_error());                                            \
      return 1;                                                                \
    }                                                                          \
  } while (0)

#define N 1000                /* prims */
#define SAMPLES_PER_GROUP 256 /* max_group_prims of the array map */

/* What the producer writes: lane l of prim k's point, element e of its samples. */
static float point_value(uint64_t k, int lane) { return 0.5f * (float)k + (float)lane; }
static uint64_t sample_count(uint64_t k) { return k % 5; } /* 0..4, some rows empty */
static float sample_value(uint64_t k, uint64_t e) { return (float)(k * 10 + e); }

/* The data of a DLTensor (honouring byte_offset). */
static void* tensor_data(const DLTensor* t) { return (char*)t->data + t->byte_offset; }

int main(void) {
  static kstage_path_t paths[N];
  static uint64_t counts[N];
  kstage_stage_t stage = 0;
  kstage_token_t points = 0, samples = 0;
  kstage_query_t query = 0;
  kstage_map_desc_t desc;
  kstage_map_t map = 0;
  kstage_map_group_info_t group;
  kstage_device_sync_t no_sync = {0, 0}; /* host buffers: nothing to wait for */
  kstage_op_t op = 0;
  kstage_read_t read = 0;
  kstage_read_group_t rg;
  kstage_status_t st;
  const void* map_buffer = NULL;
  const void* storage = NULL;
  uint64_t i, checked = 0, groups = 0, elements = 0, empty_rows = 0;
  char name[64];

  /* --- Setup: a stage, the attribute names, N prims and a query over them. */
  CHECK(kstage_create(NULL, &stage));
  CHECK(kstage_intern_token(stage, "points", KSTAGE_NUL_TERMINATED, &points));
  CHECK(kstage_intern_token(stage, "samples", KSTAGE_NUL_TERMINATED, &samples));
  for (i = 0; i < N; ++i) {
    snprintf(name, sizeof name, "/cloud/p%llu", (unsigned long long)i);
    CHECK(kstage_intern_path(stage, name, KSTAGE_NUL_TERMINATED, &paths[i]));
  }
  CHECK(kstage_query_paths(stage, paths, N, &query));

  /* ===================================================================== */
  /* 1. A new fixed-size float3 column, mapped in one group.               */
  /* ===================================================================== */

  /* The descriptor: zero-initialise, then set what applies. The column does
   * not exist yet, so the descriptor gives its schema (dtype with the tuple
   * width in lanes, semantic, kind) and residency ({0, 0}: the host). UPSERT
   * creates the prims. max_group_prims 0: a single group for all N prims. */
  desc = kstage_map_desc_init();
  desc.attribute = points;
  desc.dtype.code = kDLFloat;
  desc.dtype.bits = 32;
  desc.dtype.lanes = 3;
  desc.semantic = KSTAGE_SEMANTIC_POINT;
  desc.is_array = false;
  desc.prim_mode = KSTAGE_PRIM_MODE_UPSERT;
  desc.max_group_prims = 0;

  /* Map at ordinal 1 (it must be above the attribute's write floor, 0 here).
   * A fixed-size map passes no element counts (NULL, 0). */
  CHECK(kstage_map_attribute(stage, query, &desc, 1, NULL, 0, &map));

  /* Fetch the group. Its tensor is one buffer in the canonical fixed-size
   * layout: ndim 1, shape [rows], lanes 3. The group's prim i lives in row
   * data.index_map[i], or row i when index_map is NULL (as for a new column,
   * whose rows are created in prim order). The memory is uninitialised. */
  CHECK(kstage_fetch_map_next(stage, map, 0, &group));
  {
    const DLTensor* t = &group.data.tensors[0];
    float* rows = (float*)tensor_data(t);
    map_buffer = rows;
    for (i = 0; i < group.prim_count; ++i) {
      /* The group's prims come in query order: prim i is paths[i] here. */
      const uint64_t row = group.data.index_map ? group.data.index_map[i] : i;
      int lane;
      for (lane = 0; lane < 3; ++lane) rows[row * 3 + lane] = point_value(i, lane);
    }
    printf("points: mapped %llu prims in one group at ordinal %llu (%s index_map)\n",
           (unsigned long long)group.prim_count, (unsigned long long)group.ordinal,
           group.data.index_map ? "with an" : "no");
  }
  /* One group only: the next fetch says so. */
  st = kstage_fetch_map_next(stage, map, 0, &group);
  if (st != KSTAGE_END_OF_ITERATION) {
    fprintf(stderr, "map_fill: expected one group, fetch said %s\n", kstage_status_string(st));
    return 1;
  }

  /* Unmap: commit every fetched group as one write at ordinal 1 and end the
   * map (its handle is stale afterwards). The op completes on the host before
   * the call returns; kstage_wait is how device code would wait for it. */
  CHECK(kstage_unmap_attribute(stage, map, no_sync, &op));
  CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(stage, op));

  /* Seal ordinal 1: the committed buffer becomes the column's storage. */
  CHECK(kstage_advance_write_floor(stage, 1, NULL, 0));

  /* Read it back without `compact`: the group's tensor is the column's own
   * storage (zero-copy), prim p at row index_map[p] (or p). */
  CHECK(kstage_read_attributes(stage, query, &points, 1, NULL, &read));
  while ((st = kstage_fetch_read_next(stage, read, 0, &rg)) == KSTAGE_OK) {
    const DLTensor* t = &rg.data.tensors[0];
    const float* rows = (const float*)tensor_data(t);
    storage = rows;
    for (i = 0; i < rg.prim_count; ++i) {
      const uint64_t row = rg.data.index_map ? rg.data.index_map[i] : i;
      int lane;
      if (rg.prims[i] != paths[i]) {
        fprintf(stderr, "map_fill: points: prim %llu out of order\n", (unsigned long long)i);
        return 1;
      }
      for (lane = 0; lane < 3; ++lane) {
        if (rows[row * 3 + lane] != point_value(i, lane)) {
          fprintf(stderr, "map_fill: points: prim %llu lane %d is %g, expected %g\n",
                  (unsigned long long)i, lane, rows[row * 3 + lane], point_value(i, lane));
          return 1;
        }
      }
      ++checked;
    }
    CHECK(kstage_release_group(stage, rg.handle));
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  CHECK(kstage_release_read(stage, read));
  if (checked != N) {
    fprintf(stderr, "map_fill: points: read %llu prims, expected %d\n", (unsigned long long)checked,
            N);
    return 1;
  }
  /* The proof of "no copy": the storage the reader sees is the very buffer
   * the map handed out. */
  printf("points: %llu values checked; storage %p, map buffer %p: %s\n",
         (unsigned long long)checked, storage, map_buffer,
         storage == map_buffer ? "the same memory (no copy)" : "DIFFERENT");
  if (storage != map_buffer) {
    fprintf(stderr, "map_fill: the sealed column is not the mapped buffer (a copy was made)\n");
    return 1;
  }

  /* ===================================================================== */
  /* 2. An array attribute: per-prim lengths, several groups.              */
  /* ===================================================================== */

  /* Array maps take one element count per prim of the query (n = N): the
   * prim's new length. Storage for exactly that is allocated. Here samples
   * are float32 scalars (lanes 1), prims 0, 5, 10, ... get an empty row. */
  for (i = 0; i < N; ++i) counts[i] = sample_count(i);
  desc = kstage_map_desc_init();
  desc.attribute = samples;
  desc.dtype.code = kDLFloat;
  desc.dtype.bits = 32;
  desc.dtype.lanes = 1;
  desc.semantic = KSTAGE_SEMANTIC_NONE;
  desc.is_array = true;
  desc.prim_mode = KSTAGE_PRIM_MODE_UPSERT;
  desc.max_group_prims = SAMPLES_PER_GROUP; /* groups of at most 256 prims */
  CHECK(kstage_map_attribute(stage, query, &desc, 2, counts, N, &map));

  /* Iterate the groups until KSTAGE_END_OF_ITERATION. An array group has one
   * tensor per prim (tensor k is the group's prim k), shape [its count]. The
   * groups split the query in order, so a running index tracks the prim. */
  {
    uint64_t k = 0; /* query index of the group's first prim */
    while ((st = kstage_fetch_map_next(stage, map, 0, &group)) == KSTAGE_OK) {
      uint64_t j, e;
      for (j = 0; j < group.prim_count; ++j, ++k) {
        const DLTensor* t = &group.data.tensors[j];
        float* row = (float*)tensor_data(t);
        if (group.prims[j] != paths[k] || (uint64_t)t->shape[0] != counts[k]) {
          fprintf(stderr, "map_fill: samples: group row %llu does not match prim %llu\n",
                  (unsigned long long)j, (unsigned long long)k);
          return 1;
        }
        for (e = 0; e < counts[k]; ++e) row[e] = sample_value(k, e);
      }
      /* Commit this group now, at the map's ordinal 2, while later groups
       * are still being filled (a producer could hand them to other threads). */
      CHECK(kstage_unmap_group(stage, map, group.handle, no_sync, &op));
      CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
      CHECK(kstage_release_op(stage, op));
      ++groups;
    }
    if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  }
  /* Every group is committed; releasing the map frees what is left of it.
   * (kstage_unmap_attribute would do too: it commits nothing more and ends it.) */
  CHECK(kstage_release_map(stage, map));
  CHECK(kstage_advance_write_floor(stage, 2, NULL, 0));

  /* Read back: one tensor per prim, each exactly as long as its count. */
  checked = 0;
  CHECK(kstage_read_attributes(stage, query, &samples, 1, NULL, &read));
  while ((st = kstage_fetch_read_next(stage, read, 0, &rg)) == KSTAGE_OK) {
    for (i = 0; i < rg.prim_count; ++i) {
      const uint64_t row = rg.data.index_map ? rg.data.index_map[i] : i;
      const DLTensor* t = &rg.data.tensors[row];
      const float* v = (const float*)tensor_data(t);
      uint64_t e;
      if (rg.prims[i] != paths[i] || (uint64_t)t->shape[0] != counts[i]) {
        fprintf(stderr, "map_fill: samples: prim %llu has %lld elements, expected %llu\n",
                (unsigned long long)i, (long long)t->shape[0], (unsigned long long)counts[i]);
        return 1;
      }
      for (e = 0; e < counts[i]; ++e) {
        if (v[e] != sample_value(i, e)) {
          fprintf(stderr, "map_fill: samples: prim %llu element %llu is %g, expected %g\n",
                  (unsigned long long)i, (unsigned long long)e, v[e], sample_value(i, e));
          return 1;
        }
      }
      elements += counts[i];
      if (counts[i] == 0) ++empty_rows;
      ++checked;
    }
    CHECK(kstage_release_group(stage, rg.handle));
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  CHECK(kstage_release_read(stage, read));
  if (checked != N) {
    fprintf(stderr, "map_fill: samples: read %llu prims, expected %d\n",
            (unsigned long long)checked, N);
    return 1;
  }
  printf("samples: %llu prims in %llu groups, %llu elements (%llu empty rows) checked\n",
         (unsigned long long)checked, (unsigned long long)groups, (unsigned long long)elements,
         (unsigned long long)empty_rows);

  CHECK(kstage_query_release(stage, query));
  CHECK(kstage_destroy(stage));
  printf("map_fill: OK\n");
  return 0;
}
