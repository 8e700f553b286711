/* SPDX-License-Identifier: Apache-2.0 */
/* kstage.h and kstage_arrow.h are C headers: this file includes them as C99 and runs a
 * write/seal/read, and an Arrow record batch of it. */
#include <kstage/kstage.h>
#include <kstage/kstage_arrow.h>

#include <stdio.h>
#include <string.h>

#define CHECK(expr)                                                                             \
  do {                                                                                          \
    kstage_status_t st_ = (expr);                                                               \
    if (st_ != KSTAGE_OK) {                                                                     \
      fprintf(stderr, "%s -> %s: %s\n", #expr, kstage_status_string(st_), kstage_last_error()); \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

int main(void) {
  kstage_stage_t stage = 0;
  kstage_token_t attr = 0;
  kstage_path_t paths[2];
  kstage_query_t query = 0;
  kstage_op_t op = 0;
  kstage_read_t read = 0;
  kstage_read_group_t group;
  float values[2] = {1.5f, 2.5f};
  int64_t shape[1] = {2};
  DLTensor t;
  kstage_write_data_t w;
  const float* out;

  CHECK(kstage_create(NULL, &stage));
  CHECK(kstage_intern_token(stage, "mass", KSTAGE_NUL_TERMINATED, &attr));
  CHECK(kstage_intern_path(stage, "/a", KSTAGE_NUL_TERMINATED, &paths[0]));
  CHECK(kstage_intern_path(stage, "/b", KSTAGE_NUL_TERMINATED, &paths[1]));
  CHECK(kstage_query_paths(stage, paths, 2, &query));

  memset(&t, 0, sizeof t);
  t.data = values;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  w = kstage_write_data_init();
  w.tensors = &t;
  w.tensor_count = 1;
  CHECK(kstage_write_attribute(stage, query, attr, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(stage, op));
  CHECK(kstage_advance_write_floor(stage, 1, NULL, 0));

  CHECK(kstage_read_attributes(stage, query, &attr, 1, NULL, &read));
  CHECK(kstage_fetch_read_next(stage, read, 0, &group));
  out = (const float*)group.data.tensors[0].data;
  if (group.prim_count != 2 || out[group.data.index_map ? group.data.index_map[1] : 1] != 2.5f) {
    fprintf(stderr, "unexpected read result\n");
    return 1;
  }
  CHECK(kstage_release_group(stage, group.handle));
  if (kstage_fetch_read_next(stage, read, 0, &group) != KSTAGE_END_OF_ITERATION) return 1;
  CHECK(kstage_release_read(stage, read));
  {
    struct ArrowSchema schema;
    struct ArrowDeviceArray batch;
    const float* mass;
    CHECK(kstage_read_export_arrow(stage, query, &attr, 1, NULL, KSTAGE_ARROW_PATH_IDS, &schema,
                                   &batch));
    mass = (const float*)batch.array.children[1]->buffers[1];
    if (strcmp(schema.format, "+s") != 0 || batch.array.length != 2 ||
        batch.device_type != ARROW_DEVICE_CPU || mass[1] != 2.5f) {
      fprintf(stderr, "unexpected Arrow record batch\n");
      return 1;
    }
    batch.array.release(&batch.array);
    schema.release(&schema);
  }
  {
    /* The scene: kstage_filter_ex_init() and a hierarchy answer, in C99. */
    kstage_filter_ex_t filter = kstage_filter_ex_init();
    kstage_predicate_t has;
    kstage_query_t children_of = 0;
    kstage_hierarchy_t h = 0;
    const kstage_hierarchy_item_t* items = NULL;
    const kstage_path_span_t* spans = NULL;
    uint64_t n_items = 0, n_spans = 0;
    memset(&has, 0, sizeof has);
    has.op = KSTAGE_FILTER_HAS;
    has.attribute = attr;
    filter.predicates = &has;
    filter.predicate_count = 1;
    CHECK(kstage_query_filter_ex(stage, &filter, &children_of));
    CHECK(kstage_query_hierarchy(stage, children_of, KSTAGE_RELATION_SIBLINGS, &h));
    CHECK(kstage_hierarchy_get(stage, h, &items, &n_items, &spans, &n_spans));
    /* "/a" and "/b" are roots: each the other's sibling. */
    if (n_items != 2 || n_spans != 2 || items[0].path_count != 1 || spans[0].first != paths[1]) {
      fprintf(stderr, "unexpected hierarchy answer\n");
      return 1;
    }
    CHECK(kstage_hierarchy_release(stage, h));
    CHECK(kstage_query_release(stage, children_of));
  }
  {
    /* Clone, in C99: /b (mass 2.5) copied to /c and /d at ordinal 2. */
    kstage_path_t copies[2];
    kstage_query_t copied = 0;
    kstage_read_group_t g;
    CHECK(kstage_intern_path(stage, "/c", KSTAGE_NUL_TERMINATED, &copies[0]));
    CHECK(kstage_intern_path(stage, "/d", KSTAGE_NUL_TERMINATED, &copies[1]));
    CHECK(kstage_clone(stage, paths[1], copies, 2, 2, &op));
    CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
    CHECK(kstage_release_op(stage, op));
    CHECK(kstage_advance_write_floor(stage, 2, NULL, 0));
    CHECK(kstage_query_paths(stage, copies, 2, &copied));
    CHECK(kstage_read_attributes(stage, copied, &attr, 1, NULL, &read));
    CHECK(kstage_fetch_read_next(stage, read, 0, &g));
    out = (const float*)g.data.tensors[0].data;
    if (g.prim_count != 2 || out[g.data.index_map ? g.data.index_map[1] : 1] != 2.5f) {
      fprintf(stderr, "unexpected clone result\n");
      return 1;
    }
    CHECK(kstage_release_group(stage, g.handle));
    CHECK(kstage_release_read(stage, read));
    CHECK(kstage_query_release(stage, copied));
  }
  CHECK(kstage_destroy(stage));
  printf("kstage %u from C: ok\n", kstage_version());
  return 0;
}
