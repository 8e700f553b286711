/* Downstream use of an installed kstage's ADIOS2 bridge (find_package(kstage COMPONENTS adios2)):
 * a checkpoint of a small stage and a restart of it into another, in plain C. */
#include <kstage/kstage_adios2.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                \
  do {                                                                             \
    kstage_status_t st_ = (call);                                                  \
    if (st_ != KSTAGE_OK) {                                                        \
      fprintf(stderr, "FAIL: %s: %s: %s | %s\n", #call, kstage_status_string(st_), \
              kstage_last_error(), kstage_adios2_last_error());                    \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "downstream-checkpoint.bp";
  kstage_stage_t a = 0, b = 0;
  kstage_token_t t = 0;
  kstage_path_t first = 0;
  kstage_query_t q = 0;
  kstage_op_t op = 0;
  float values[4] = {1.f, 2.f, 3.f, 4.f};
  int64_t shape[1] = {4};
  DLTensor tensor = {0};
  kstage_write_data_t w = kstage_write_data_init();
  kstage_attribute_info_t info = kstage_attribute_info_init();
  uint64_t ordinal = 0;
  CHECK(kstage_create(NULL, &a));
  CHECK(kstage_intern_token(a, "mass", KSTAGE_NUL_TERMINATED, &t));
  CHECK(kstage_intern_path_range(a, "/d", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, 4,
                                 &first));
  CHECK(kstage_query_range(a, first, 0, 0, 0, &q));
  tensor.data = values;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 1;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  w.tensors = &tensor;
  w.tensor_count = 1;
  CHECK(kstage_write_attribute(a, q, t, 5, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(a, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(a, op));
  CHECK(kstage_advance_write_floor(a, 5, NULL, 0));
  CHECK(kstage_adios2_checkpoint(a, path));
  CHECK(kstage_create(NULL, &b));
  CHECK(kstage_adios2_restart(b, path, &ordinal));
  CHECK(kstage_intern_token(b, "mass", KSTAGE_NUL_TERMINATED, &t));
  CHECK(kstage_attribute_info(b, t, &info));
  if (ordinal != 5 || info.prim_count != 4 || info.write_floor != 5) {
    fprintf(stderr, "FAIL: restart gave ordinal %llu, %llu prims, floor %llu\n",
            (unsigned long long)ordinal, (unsigned long long)info.prim_count,
            (unsigned long long)info.write_floor);
    return 1;
  }
  CHECK(kstage_destroy(a));
  CHECK(kstage_destroy(b));
  printf("kstage downstream (ADIOS2): checkpoint and restart: OK\n");
  return 0;
}
