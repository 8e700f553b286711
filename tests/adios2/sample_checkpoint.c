/* SPDX-License-Identifier: Apache-2.0 */
/* Writes the kstage checkpoint that read_with_adios2.py reads without kstage: N particles
 * "/world/particles/p<i>" (a path range) with position (i, 2i, -i) / 4 (float32 x 3, POINT) and
 * a mass i (float64), and one explicit prim "/world/origin" at (0, 0, 0) with no mass.
 *   kstage_test_adios2_sample <file.bp> [N] */
#include <kstage/kstage_adios2.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                             \
  do {                                                                                          \
    kstage_status_t st_ = (call);                                                               \
    if (st_ != KSTAGE_OK) {                                                                     \
      fprintf(stderr, "%s: %s: %s %s\n", #call, kstage_status_string(st_), kstage_last_error(), \
              kstage_adios2_last_error());                                                      \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

static int write(kstage_stage_t s, kstage_query_t q, kstage_token_t t, void* data, DLDataType dtype,
                 int64_t rows, kstage_semantic_t semantic) {
  int64_t shape[1];
  DLTensor tensor = {0};
  kstage_write_data_t w = kstage_write_data_init();
  kstage_op_t op = 0;
  shape[0] = rows;
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 1;
  tensor.dtype = dtype;
  tensor.shape = shape;
  w.tensors = &tensor;
  w.tensor_count = 1;
  w.semantic = semantic;
  CHECK(kstage_write_attribute(s, q, t, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(s, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(s, op));
  return 0;
}

int main(int argc, char** argv) {
  const int64_t n = argc > 2 ? atoll(argv[2]) : 1000;
  kstage_stage_t s = 0;
  kstage_token_t pos = 0, mass = 0;
  kstage_path_t first = 0, origin = 0;
  kstage_query_t particles = 0, at_origin = 0;
  float* p = calloc((size_t)n * 3, sizeof(float));
  double* m = calloc((size_t)n, sizeof(double));
  float zero[3] = {0, 0, 0};
  DLDataType f3 = {kDLFloat, 32, 3}, f64 = {kDLFloat, 64, 1};
  int64_t i;
  if (argc < 2 || !p || !m) return 2;
  for (i = 0; i < n; ++i) {
    p[3 * i] = (float)i / 4;
    p[3 * i + 1] = (float)(2 * i) / 4;
    p[3 * i + 2] = -(float)i / 4;
    m[i] = (double)i;
  }
  CHECK(kstage_create(NULL, &s));
  CHECK(kstage_intern_token(s, "position", KSTAGE_NUL_TERMINATED, &pos));
  CHECK(kstage_intern_token(s, "mass", KSTAGE_NUL_TERMINATED, &mass));
  CHECK(kstage_intern_path_range(s, "/world/particles", KSTAGE_NUL_TERMINATED, "p",
                                 KSTAGE_NUL_TERMINATED, 0, (uint64_t)n, &first));
  CHECK(kstage_intern_path(s, "/world/origin", KSTAGE_NUL_TERMINATED, &origin));
  CHECK(kstage_query_range(s, first, 0, 0, 0, &particles));
  CHECK(kstage_query_paths(s, &origin, 1, &at_origin));
  if (write(s, particles, pos, p, f3, n, KSTAGE_SEMANTIC_POINT) ||
      write(s, at_origin, pos, zero, f3, 1, KSTAGE_SEMANTIC_POINT) ||
      write(s, particles, mass, m, f64, n, KSTAGE_SEMANTIC_NONE))
    return 1;
  CHECK(kstage_advance_write_floor(s, 1, NULL, 0));
  CHECK(kstage_adios2_checkpoint(s, argv[1]));
  CHECK(kstage_destroy(s));
  free(p);
  free(m);
  printf("wrote %s: %lld particles and /world/origin\n", argv[1], (long long)n);
  return 0;
}
