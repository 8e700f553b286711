/* Downstream use of an installed kstage's ADIOS2 bridge on MPI ranks (find_package(kstage
 * COMPONENTS adios2_mpi)): each rank checkpoints its own prims, every rank restarts its share,
 * in plain C; run by mpiexec on 2 ranks. */
#include <kstage/kstage_adios2_mpi.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                \
  do {                                                                             \
    kstage_status_t st_ = (call);                                                  \
    if (st_ != KSTAGE_OK) {                                                        \
      fprintf(stderr, "FAIL: %s: %s: %s | %s\n", #call, kstage_status_string(st_), \
              kstage_last_error(), kstage_adios2_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
    }                                                                              \
  } while (0)

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "downstream-mpi-checkpoint.bp";
  int rank = 0, size = 1;
  kstage_stage_t a = 0, b = 0;
  kstage_token_t t = 0;
  kstage_path_t first = 0;
  kstage_query_t q = 0;
  kstage_op_t op = 0;
  float values[4];
  int64_t shape[1] = {4};
  DLTensor tensor = {0};
  kstage_write_data_t w = kstage_write_data_init();
  kstage_attribute_info_t info = kstage_attribute_info_init();
  uint64_t ordinal = 0, mine = 0, all = 0;
  int i;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (i = 0; i < 4; ++i) values[i] = (float)(4 * rank + i);
  CHECK(kstage_create(NULL, &a));
  CHECK(kstage_intern_token(a, "mass", KSTAGE_NUL_TERMINATED, &t));
  CHECK(kstage_intern_path_range(a, "/d", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED,
                                 (uint64_t)(4 * rank), 4, &first));
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
  CHECK(kstage_adios2_checkpoint_mpi(a, path, MPI_COMM_WORLD));
  CHECK(kstage_create(NULL, &b));
  CHECK(kstage_adios2_restart_mpi(b, path, MPI_COMM_WORLD, &ordinal));
  CHECK(kstage_intern_token(b, "mass", KSTAGE_NUL_TERMINATED, &t));
  CHECK(kstage_attribute_info(b, t, &info));
  mine = info.prim_count;
  MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (ordinal != 5 || info.write_floor != 5 || mine != 4 || all != 4 * (uint64_t)size) {
    fprintf(stderr, "FAIL: rank %d: restart gave ordinal %llu, %llu of %llu prims, floor %llu\n",
            rank, (unsigned long long)ordinal, (unsigned long long)mine, (unsigned long long)all,
            (unsigned long long)info.write_floor);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CHECK(kstage_destroy(a));
  CHECK(kstage_destroy(b));
  if (rank == 0)
    printf("kstage downstream (ADIOS2 on %d MPI ranks): checkpoint and restart: OK\n", size);
  MPI_Finalize();
  return 0;
}
