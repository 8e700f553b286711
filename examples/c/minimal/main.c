/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kstage C quick start: create a stage, write a float3 "points" attribute for
 * three prims from a DLPack tensor, seal it, read it back and print it.
 *
 * Build (from an installed kstage):
 *   find_package(kstage REQUIRED)
 *   target_link_libraries(app PRIVATE kstage::kstage)
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

int main(void) {
  const char* names[3] = {"/world/a", "/world/b", "/world/c"};
  /* Three points, one (x, y, z) row per prim. */
  float points[3][3] = {{0.f, 0.f, 0.f}, {1.f, 2.f, 3.f}, {-1.5f, 0.25f, 8.f}};

  kstage_stage_t stage = 0;
  kstage_token_t attr = 0;
  kstage_path_t paths[3];
  kstage_query_t query = 0;
  kstage_op_t op = 0;
  kstage_read_t read = 0;
  kstage_read_group_t group;
  kstage_status_t st;
  int64_t shape[1] = {3};
  DLTensor tensor;
  kstage_write_data_t data;
  uint64_t checked = 0;
  int i;

  /* 1. A stage (NULL config: defaults). It initialises Kokkos if needed. */
  CHECK(kstage_create(NULL, &stage));

  /* 2. Intern the attribute name (a token) and the prim paths to ids. */
  CHECK(kstage_intern_token(stage, "points", KSTAGE_NUL_TERMINATED, &attr));
  for (i = 0; i < 3; ++i)
    CHECK(kstage_intern_path(stage, names[i], KSTAGE_NUL_TERMINATED, &paths[i]));

  /* 3. A query fixes the prims a write or read addresses, in this order. The
   *    prims need not exist yet: the write below creates them. */
  CHECK(kstage_query_paths(stage, paths, 3, &query));

  /* 4. The data as a DLPack tensor in the canonical layout of a fixed-size
   *    attribute: ndim 1, shape [rows], and the tuple width in dtype.lanes
   *    (float3 = {kDLFloat, 32, 3}). A (3, 3) tensor with lanes 1 works too. */
  memset(&tensor, 0, sizeof tensor);
  tensor.data = points;
  tensor.device.device_type = kDLCPU;
  tensor.device.device_id = 0;
  tensor.ndim = 1;
  tensor.shape = shape;
  tensor.strides = NULL; /* compact */
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 3;

  data = kstage_write_data_init();
  data.tensors = &tensor;
  data.tensor_count = 1;
  data.is_array = false;                 /* one tuple per prim */
  data.semantic = KSTAGE_SEMANTIC_POINT; /* what the numbers mean */
  /* count = 0: all prims of the query; no index_map, no mask: row i -> prim i. */

  /* 5. Write at ordinal 1. The tensor must stay valid until the op completes. */
  CHECK(kstage_write_attribute(stage, query, attr, 1, &data, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(stage, op));

  /* 6. Seal: advance the write floor to 1 (n = 0: every attribute). Until
   *    now the write was invisible to readers. */
  CHECK(kstage_advance_write_floor(stage, 1, NULL, 0));

  /* 7. Read the latest sealed values. A read yields groups until
   *    KSTAGE_END_OF_ITERATION; each group stays valid until released. */
  CHECK(kstage_read_attributes(stage, query, &attr, 1, NULL, &read));
  while ((st = kstage_fetch_read_next(stage, read, 0, &group)) == KSTAGE_OK) {
    const DLTensor* t = &group.data.tensors[0];
    const float* base = (const float*)((const char*)t->data + t->byte_offset);
    uint64_t p;
    printf("attribute points: %llu prims, ordinal %llu, float32 x %u\n",
           (unsigned long long)group.prim_count, (unsigned long long)group.ordinal,
           (unsigned)group.dtype.lanes);
    for (p = 0; p < group.prim_count; ++p) {
      /* Without compact, the tensor may be the column's own storage: prim p
       * is row index_map[p] (or row p when index_map is NULL). */
      const uint64_t row = group.data.index_map ? group.data.index_map[p] : p;
      const float* v = base + row * 3;
      const char* name = NULL;
      CHECK(kstage_path_string(stage, group.prims[p], &name, NULL));
      printf("  %-10s (%g, %g, %g)\n", name, v[0], v[1], v[2]);
      /* Check against what was written (prims come in query order). */
      if (p >= 3 || group.prims[p] != paths[p] || v[0] != points[p][0] || v[1] != points[p][1] ||
          v[2] != points[p][2]) {
        fprintf(stderr, "minimal: prim %llu does not hold what was written\n",
                (unsigned long long)p);
        return 1;
      }
      ++checked;
    }
    CHECK(kstage_release_group(stage, group.handle));
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  if (checked != 3) {
    fprintf(stderr, "minimal: read %llu prims, expected 3\n", (unsigned long long)checked);
    return 1;
  }

  /* 8. Release what we hold; destroying the stage would also free it all. */
  CHECK(kstage_release_read(stage, read));
  CHECK(kstage_query_release(stage, query));
  CHECK(kstage_destroy(stage));
  printf("minimal: OK\n");
  return 0;
}
