// SPDX-License-Identifier: Apache-2.0
// The C++ API in a build without exceptions (-fno-exceptions): only the
// overloads that take a kstage::Status exist, and they report failures there.
// A plain program (Catch2 needs exceptions): any failed check exits non-zero.
#include <kstage/kstage.hpp>

#include <cstdio>
#include <cstdlib>

static_assert(KSTAGE_CPP_EXCEPTIONS == 0, "this program is compiled with -fno-exceptions");

namespace {

int failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

#define CHECK_OK(st)                                                                     \
  do {                                                                                   \
    if (!(st).ok()) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, (st).to_string().c_str()); \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

}  // namespace

int main() {
  kstage::Status st;
  kstage::Stage stage = kstage::Stage::create(kstage_config_init(), st);
  CHECK_OK(st);
  if (!stage) return 1;
  const kstage_token_t pos = stage.token("position", st);
  const kstage_path_t a = stage.path("/p/a", st), b = stage.path("/p/b", st);
  CHECK_OK(st);
  const kstage_path_t paths[] = {a, b};
  kstage::Query q = stage.query({paths, 2}, st);
  CHECK_OK(st);

  Kokkos::View<float* [3], Kokkos::HostSpace> v("v", 2);
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c) v(i, c) = float(10 * i + c);
  kstage::WriteOptions o;
  o.semantic = KSTAGE_SEMANTIC_POINT;
  kstage::Op op = stage.write(pos, q, v, 1, o, st);
  CHECK_OK(st);
  CHECK(op.wait(st));
  op.sync({0, 0}, st);  // kstage_op_sync: a host op takes {0, 0}
  CHECK_OK(st);
  stage.seal(1, st);
  CHECK_OK(st);

  // World transforms: an op, and a failure in the Status (no local matrices here).
  kstage::Op none_computed = stage.compute_world_transforms(2, kstage::TransformOptions(), st);
  CHECK(!none_computed);
  CHECK(st.code() == KSTAGE_NOT_FOUND);

  // A failure: the Status holds the code and the message; the object is empty.
  kstage::Status refused;
  kstage::Op none = stage.write(pos, q, v, 1, o, refused);
  CHECK(!none);
  CHECK(refused.code() == KSTAGE_WRITE_FLOOR_VIOLATION);
  CHECK(!refused.message().empty());

  // Reads through next(); a View that fits and one that does not.
  kstage::Read r = stage.read(q, {pos}, kstage::ReadOptions(), st);
  CHECK_OK(st);
  kstage::ReadGroup g;
  int groups = 0;
  while (r.next(g, st)) {
    ++groups;
    auto view = g.view<const float* [3]>(0, st);
    CHECK_OK(st);
    CHECK(view.extent(0) == 2);
    for (size_t i = 0; i < 2; ++i)
      CHECK(view(g.index_map().empty() ? i : g.index_map()[i], 2) == float(10 * i + 2));
    kstage::Status wrong;
    auto bad = g.view<const double* [3]>(0, wrong);
    CHECK(wrong.code() == KSTAGE_INVALID_ARGUMENT);
    CHECK(bad.data() == nullptr);
  }
  CHECK_OK(st);
  CHECK(groups == 1);

  // A map, committed.
  kstage::MapOptions mo;
  mo.semantic = KSTAGE_SEMANTIC_NORMAL;  // not the column's: refused, and nothing changes
  kstage::Map refused_map = stage.map(q, pos, 2, kstage::dtype_of<float[3]>(), mo, st);
  CHECK(!refused_map);
  CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);
  mo.semantic = KSTAGE_SEMANTIC_POINT;
  kstage::Map m = stage.map(q, pos, 2, kstage::dtype_of<float[3]>(), mo, st);
  CHECK_OK(st);
  kstage::MapGroup mg;
  while (m.next(mg, st)) {
    auto view = mg.view<float* [3]>(0, st);
    CHECK_OK(st);
    for (size_t i = 0; i < view.extent(0); ++i)
      for (int c = 0; c < 3; ++c) view(i, c) = -1.f;
  }
  CHECK_OK(st);
  kstage::Op committed = m.commit(st);
  CHECK_OK(st);
  CHECK(committed.wait(st));
  stage.seal(2, st);
  CHECK_OK(st);
  CHECK(stage.write_floor(pos, st) == 2);

  // The scene: a hierarchy answer and a relational filter, through Status.
  const kstage_path_t parent = stage.path("/p", st);
  const kstage_path_t parents[] = {parent};
  kstage::Query pq = stage.query({parents, 1}, st);
  CHECK_OK(st);
  kstage::Hierarchy none_yet = stage.hierarchy(pq, KSTAGE_RELATION_CHILDREN, st);
  CHECK_OK(st);
  CHECK(none_yet.items().size() == 1);
  CHECK(none_yet.items()[0].status == KSTAGE_NOT_FOUND);  // "/p" holds nothing
  kstage::Hierarchy siblings = stage.hierarchy(q, KSTAGE_RELATION_SIBLINGS, st);
  CHECK_OK(st);
  CHECK(siblings.paths(0).size() == 1 && siblings.paths(0)[0] == b);
  kstage::Hierarchy bad = stage.hierarchy(q, 7, st);
  CHECK(!bad);
  CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);
  kstage::FilterEx f;
  f.prefix(stage.token(KSTAGE_PATH_ATTRIBUTE, st), parent).has(pos);
  kstage::Query selected = stage.query(f, st);
  CHECK_OK(st);
  CHECK(selected.count(st) == 2);
  kstage::FilterEx unsupported;
  unsupported.add(KSTAGE_FILTER_LT, pos, {1});
  kstage::Query refused_query = stage.query(unsupported, st);
  CHECK(!refused_query);
  CHECK(st.code() == KSTAGE_NOT_SUPPORTED);

  // Clone: /p/a (-1 since the map) to /copy at 3, through the Status; a second clone to the
  // same target is refused at the call, and so is a source that holds nothing (/p).
  const kstage_path_t copy = stage.path("/copy", st);
  CHECK_OK(st);
  const kstage_path_t copies[] = {copy};
  kstage::Op cloned = stage.clone(a, {copies, 1}, 3, st);
  CHECK_OK(st);
  CHECK(cloned.wait(st));
  stage.seal(3, st);
  CHECK_OK(st);
  kstage::Query copy_query = stage.query({copies, 1}, st);
  kstage::Read rc = stage.read(copy_query, {pos}, kstage::ReadOptions(), st);
  CHECK_OK(st);
  int copied_prims = 0;
  while (rc.next(g, st)) {
    auto view = g.view<const float* [3]>(0, st);
    CHECK_OK(st);
    for (size_t i = 0; i < g.prims().size(); ++i, ++copied_prims) {
      const size_t row = g.index_map().empty() ? i : g.index_map()[i];
      CHECK(view(row, 0) == -1.f && view(row, 1) == -1.f && view(row, 2) == -1.f);
    }
  }
  CHECK_OK(st);
  CHECK(copied_prims == 1);
  kstage::Op again = stage.clone(a, {copies, 1}, 4, st);
  CHECK(!again);
  CHECK(st.code() == KSTAGE_ALREADY_EXISTS);
  const kstage_path_t elsewhere[] = {stage.path("/elsewhere", st)};
  kstage::Op nothing = stage.clone(parent, {elsewhere, 1}, 4, st);
  CHECK(!nothing);
  CHECK(st.code() == KSTAGE_NOT_FOUND);
  kstage::Op no_range = stage.clone_range(a, copy, 0, 1, 4, st);
  CHECK(!no_range);
  CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);  // /copy is no range's first id

  // The log: a callable, a refused filter, flush, removal.
  int logged = 0;
  kstage::set_log_callback([&](kstage_log_severity_t, std::string_view channel,
                               std::string_view) { logged += channel == "api" ? 1 : 100; },
                           KSTAGE_LOG_INFO, "stage=off", st);
  CHECK_OK(st);
  kstage::set_log_callback([](kstage_log_severity_t, std::string_view, std::string_view) {},
                           KSTAGE_LOG_INFO, "stage=never", st);
  CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);
  kstage::log_message(KSTAGE_LOG_INFO, "api", "one", st);
  CHECK_OK(st);
  kstage::log_message(KSTAGE_LOG_INFO, "stage", "filtered out", st);
  kstage::flush_log(st);
  CHECK_OK(st);
  CHECK(logged == 1);
  kstage::set_log_callback(nullptr, KSTAGE_LOG_OFF, st);
  CHECK_OK(st);

  if (failures != 0) {
    std::fprintf(stderr, "cpp_api_no_exceptions: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("cpp_api_no_exceptions: OK\n");
  return 0;
}
