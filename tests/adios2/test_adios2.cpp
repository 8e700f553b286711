// SPDX-License-Identifier: Apache-2.0
// The ADIOS2 bridge (include/kstage/kstage_adios2.h): checkpoints and restarts of every kind of
// column and path, incremental steps with deletions, the Inline engine, and every error a step
// or a stream can meet -- each leaving the stage exactly as it was.
#include <kstage/kstage_adios2.h>

#include "adios2_support.hpp"
#include "log_support.hpp"
#include "stage_state.hpp"
#include "support.hpp"

#include <adios2.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include <unistd.h>

using namespace kstage_test;

// LeakSanitizer's suppressions for this program (the asan preset), as lsan-adios2.supp says for
// the others: allocations ADIOS2's own libraries make and never free. A leak with a frame of
// kstage's code and none of ADIOS2's is still reported.
extern "C" const char* __lsan_default_suppressions() { return "leak:libadios2_\n"; }

namespace {

std::string scratch(const std::string& name) {
  return kstage_adios2_test::scratch_path("kstage-adios2-tests-", name);
}

using Snapshot = kstage_adios2_test::StageState;
inline Snapshot snapshot(kstage_stage_t stage) { return kstage_adios2_test::stage_state(stage); }

// A stage with every kind of thing a checkpoint must keep: a range and explicit paths, a
// float32 x 3 POINT column, an int64 column, a ragged int32 column with an empty row, a
// deleted prim, an attribute deleted from some prims, per-attribute floors.
struct Filled {
  Stage s{host_execution()};
  kstage_token_t pos = s.token("position"), id = s.token("id"), nbrs = s.token("neighbours");
  kstage_path_t first = s.range("/world/particles", "p", 0, 6);
  kstage_path_t a = s.path("/world/walls/a"), b = s.path("/world/walls/b");
  Filled() {
    std::vector<kstage_path_t> prims;
    for (int i = 0; i < 6; ++i) prims.push_back(first + i);
    prims.push_back(a);
    prims.push_back(b);
    kstage_query_t q = s.query(prims);
    std::vector<float> p(8 * 3);
    for (size_t i = 0; i < p.size(); ++i) p[i] = float(i) * 0.5f;
    int64_t shape[1] = {8};
    DLTensor t = tensor(p.data(), f32(3), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_POINT;
    KS_OK(s.write(q, pos, 1, w));
    std::vector<int64_t> ids = {10, 11, 12, 13, 14, 15, 16, 17};
    DLTensor ti = tensor(ids.data(), DLDataType{kDLInt, 64, 1}, 1, shape);
    KS_OK(s.write(q, id, 1, write_data(&ti)));
    std::vector<std::vector<int32_t>> rows = {{1, 2}, {}, {3, 4, 5}};
    std::vector<int64_t> shapes = {2, 0, 3};
    std::vector<DLTensor> rt;
    for (size_t i = 0; i < rows.size(); ++i)
      rt.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), DLDataType{kDLInt, 32, 1}, 1,
                          &shapes[i]));
    KS_OK(s.write(s.query({first + 1, first + 2, a}), nbrs, 1,
                  write_data(rt.data(), rt.size(), true)));
    s.seal(1);
    KS_OK(s.remove(s.query({first + 3}), {}, 2));  // a prim deleted
    KS_OK(s.remove(s.query({b}), {pos}, 2));       // an attribute deleted from one prim
    s.seal(2, {pos});
    s.seal(3, {id});  // floors differ: position 2, id 3, neighbours 1 (and the global floor)
  }
};

// A copy of kstage file `path` (its one step) at `bad`, with the int32 attributes named in
// `attributes` replaced and `change` applied to every uint64 array variable (name, data): a file
// damaged in one place, for the reader's checks.
void rewrite(const std::string& path, const std::string& bad,
             const std::map<std::string, std::vector<int32_t>>& attributes,
             const std::function<void(const std::string&, std::vector<uint64_t>&)>& change = {}) {
  adios2::ADIOS adios;
  adios2::IO in = adios.DeclareIO("in");
  adios2::Engine r = in.Open(path, adios2::Mode::Read);
  adios2::IO out = adios.DeclareIO("out");
  adios2::Engine w = out.Open(bad, adios2::Mode::Write);
  r.BeginStep();
  for (const auto& [name, info] : in.AvailableAttributes()) {
    const std::string type = info.at("Type");
    if (attributes.count(name)) {
      const std::vector<int32_t>& d = attributes.at(name);
      out.DefineAttribute<int32_t>(name, d.data(), d.size());
    } else if (type == "string") {
      out.DefineAttribute<std::string>(name, in.InquireAttribute<std::string>(name).Data().front());
    } else if (type == "int32_t") {
      const auto d = in.InquireAttribute<int32_t>(name).Data();
      out.DefineAttribute<int32_t>(name, d.data(), d.size());
    } else if (type == "uint32_t") {
      out.DefineAttribute<uint32_t>(name, in.InquireAttribute<uint32_t>(name).Data().front());
    }
  }
  w.BeginStep();
  for (const auto& [name, info] : in.AvailableVariables()) {
    const std::string type = info.at("Type");
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      adios2::Variable<T> v = in.InquireVariable<T>(name);
      std::vector<T> data;
      r.Get(v, data, adios2::Mode::Sync);
      if constexpr (std::is_same_v<T, uint64_t>)
        if (change && !v.Shape().empty()) change(name, data);
      if (v.Shape().empty()) {
        w.Put(out.DefineVariable<T>(name), data.front(), adios2::Mode::Sync);
      } else {
        adios2::Variable<T> o =
            out.DefineVariable<T>(name, v.Shape(), adios2::Dims(v.Shape().size(), 0), v.Shape());
        w.Put(o, data.data(), adios2::Mode::Sync);
      }
    };
    if (type == "uint64_t") copy(uint64_t{});
    else if (type == "uint8_t") copy(uint8_t{});
    else if (type == "int64_t") copy(int64_t{});
    else if (type == "int32_t") copy(int32_t{});
    else if (type == "float") copy(float{});
  }
  w.EndStep();
  r.EndStep();
  w.Close();
  r.Close();
}

}  // namespace

TEST_CASE("a checkpoint restarts into a fresh stage equal to the original", "[adios2]") {
  Filled f;
  const std::string path = scratch("checkpoint.bp");
  A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), &ordinal));
  CHECK(ordinal == 3);
  const Snapshot original = snapshot(f.s.stage), restored = snapshot(fresh.stage);
  REQUIRE(original.columns.size() == 3);
  CHECK(original.columns.at("position").values.count("/world/particles/p3") == 0);  // deleted
  CHECK(original.columns.at("position").values.count("/world/walls/b") == 0);
  CHECK(restored == original);
  // The range is a range again, with the same members.
  kstage_path_t first = 0;
  uint64_t count = 0, index = 0;
  KS_OK(kstage_path_range_info(fresh.stage, fresh.path("/world/particles/p4"), &first, &count,
                               &index));
  CHECK(count == 6);
  CHECK(index == 4);
}

TEST_CASE("a checkpoint of cloned prims restarts like written ones", "[adios2][clone]") {
  Filled f;
  // /world/walls/a (position, id, a ragged neighbours row) cloned to a sibling and to a path
  // below a parent that did not exist.
  const kstage_path_t targets[2] = {f.s.path("/world/walls/c"), f.s.path("/other/d")};
  kstage_op_t op = 0;
  KS_OK(kstage_clone(f.s.stage, f.a, targets, 2, 4, &op));
  finish(f.s, op);
  f.s.seal(4);
  const std::string path = scratch("cloned.bp");
  A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), &ordinal));
  CHECK(ordinal == 4);
  const Snapshot original = snapshot(f.s.stage), restored = snapshot(fresh.stage);
  // The copies hold a's values: position, id and its ragged neighbours.
  for (const char* copy : {"/world/walls/c", "/other/d"}) {
    for (const char* column : {"position", "id", "neighbours"}) {
      const auto& values = original.columns.at(column).values;
      REQUIRE(values.count(copy) == 1);
      CHECK(values.at(copy) == values.at("/world/walls/a"));
    }
  }
  CHECK(restored == original);
}

TEST_CASE("a checkpoint of every layout-fixing semantic restarts equal", "[adios2][semantic]") {
  Stage s(host_execution());
  kstage_path_t a = s.path("/a"), b = s.path("/b");
  kstage_query_t q = s.query({a, b});
  struct Column {
    const char* name;
    kstage_semantic_t semantic;
    DLDataType dtype;
    bool is_array;
  };
  const Column columns[] = {
      {"asset", KSTAGE_SEMANTIC_ASSET_PATH_ID, u64(2), false},
      {"assets", KSTAGE_SEMANTIC_ASSET_PATH_ID, u64(2), true},
      {"expr", KSTAGE_SEMANTIC_PATH_EXPRESSION_ID, u64(1), false},
      {"rel", KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID, u64(1), false},
      {"rels", KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID, u64(1), true},
      {"conn", KSTAGE_SEMANTIC_CONNECTION_PATH_ID, u64(2), true},
      {"time", KSTAGE_SEMANTIC_TIME_CODE, f64(1), false},
      {"frame", KSTAGE_SEMANTIC_FRAME, f64(16), true},
  };
  // Words: small ids (1, 2, ...), as uint64 or as float64 bit patterns of 1.0, 2.0, ...
  std::vector<uint64_t> words(64);
  for (const Column& c : columns) {
    for (size_t i = 0; i < words.size(); ++i) {
      if (c.dtype.code == kDLFloat) {
        const double d = double(i + 1);
        std::memcpy(&words[i], &d, 8);
      } else {
        words[i] = a + i % 2;  // path ids of the stage (raw words either way)
      }
    }
    int64_t shapes[2] = {2, 1};
    const size_t tuple = size_t(c.dtype.lanes);  // uint64 / float64 words per element
    DLTensor t[2] = {tensor(words.data(), c.dtype, 1, &shapes[0]),
                     tensor(words.data() + 2 * tuple, c.dtype, 1, &shapes[1])};
    kstage_write_data_t w = c.is_array ? write_data(t, 2, true) : write_data(t);
    w.semantic = c.semantic;
    KS_OK(s.write(q, s.token(c.name), 1, w));
  }
  s.seal(1);
  const std::string path = scratch("semantics.bp");
  A2_OK(kstage_adios2_checkpoint(s.stage, path.c_str()));
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), &ordinal));
  CHECK(ordinal == 1);
  const Snapshot original = snapshot(s.stage), restored = snapshot(fresh.stage);
  REQUIRE(original.columns.size() == std::size(columns));
  for (const Column& c : columns) {
    INFO(c.name);
    CHECK(restored.columns.at(c.name).semantic == c.semantic);
    CHECK(restored.columns.at(c.name).is_array == c.is_array);
  }
  CHECK(restored == original);
}

// Copies kstage made between host and device memory (kstage_transfer_counts), for the tests of
// where a device column's values travel. (ADIOS2's own copies are not counted.)
struct Transfers {
  uint64_t up = 0, down = 0;
  static Transfers now() {
    Transfers t;
    KS_OK(kstage_transfer_counts(&t.up, &t.down, nullptr));
    return t;
  }
  Transfers since(const Transfers& before) const {
    return Transfers{up - before.up, down - before.down};
  }
};

#if defined(KSTAGE_TEST_EMULATED_DEVICE) || defined(KSTAGE_TEST_ON_CUDA_DEVICE)
// Where a device column's values travel: an ADIOS2 with GPU support for the device (a CUDA
// ADIOS2 and CUDA columns) puts them from device memory and gets them into device memory -- no
// copy of kstage's between host and device; any other (PyPI's ADIOS2; the emulated device)
// through a host read and a write to the device.
TEST_CASE(
    "columns on a device are checkpointed from device memory where ADIOS2 takes it, else through a "
    "host read",
    "[adios2]") {
#if defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  const DLDevice device{kDLCUDA, 0};
#if defined(ADIOS2_HAVE_CUDA) || defined(ADIOS2_HAVE_KOKKOS_CUDA)
  const bool direct = true;
#else
  const bool direct = false;
#endif
#else
  // The emulated device (backends/emulated): the ordinal under test, or 1 in the host program.
  const DLDevice device = kOnDevice ? kResidency : DLDevice{kDLExtDev, 1};
  const bool direct = false;
#endif
  Stage s(host_execution(), &device);
  const kstage_token_t x = s.token("x"), n = s.token("n");
  kstage_query_t q = s.query(s.paths("/dev", 64));
  std::vector<float> v(64 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  s.write_f32(q, x, 1, v, 3);
  std::vector<std::vector<int32_t>> rows(64);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].assign(i % 4, int32_t(i));
  std::vector<int64_t> shapes(64);
  std::vector<DLTensor> rt;
  for (size_t i = 0; i < rows.size(); ++i) {
    shapes[i] = int64_t(rows[i].size());
    rt.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), DLDataType{kDLInt, 32, 1}, 1,
                        &shapes[i]));
  }
  KS_OK(s.write(q, n, 1,
                write_data(rt.data(), rt.size(), true)));  // an array column: always a host read
  s.seal(1);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(s.stage, x, &info));
  REQUIRE(info.residency.device_type == device.device_type);
  // Where the fixed-size column's values travel (kstage_transfer_counts counts copies): a step
  // of it alone, written and read back.
  {
    const std::string alone = scratch("device-x.bp");
    kstage_adios2_stream_t w = 0;
    A2_OK(kstage_adios2_open(alone.c_str(), nullptr, &w));
    const Transfers before_put = Transfers::now();
    A2_OK(kstage_adios2_write_step(w, s.stage, q, &x, 1, nullptr));
    const Transfers put = Transfers::now().since(before_put);
    A2_OK(kstage_adios2_close(w));
    CHECK(put.up == 0);
    CHECK(put.down == (direct ? 0 : 1));  // ADIOS2's own copy, or kstage's host read
    Stage dev(host_execution(), &device);
    const Transfers before_get = Transfers::now();
    A2_OK(kstage_adios2_restart(dev.stage, alone.c_str(), nullptr));
    const Transfers got = Transfers::now().since(before_get);
    CHECK(got.down == 0);
    CHECK(got.up ==
          (direct ? 0 : 1));  // ADIOS2's get into a map's device buffer, or kstage's write up
    kstage_attribute_info_t xi = kstage_attribute_info_init();
    KS_OK(kstage_attribute_info(dev.stage, x, &xi));
    CHECK(xi.residency.device_type == device.device_type);
    CHECK(snapshot(dev.stage).columns.at("x") == snapshot(s.stage).columns.at("x"));
  }
  // Every column, through a stage on the host and back onto the device.
  const std::string path = scratch("device.bp");
  A2_OK(kstage_adios2_checkpoint(s.stage, path.c_str()));
  const DLDevice cpu{kDLCPU, 0};
  Stage host(host_execution(), &cpu);
  A2_OK(kstage_adios2_restart(host.stage, path.c_str(), nullptr));
  CHECK(snapshot(host.stage) == snapshot(s.stage));
  Stage again(host_execution(), &device);
  A2_OK(kstage_adios2_restart(again.stage, path.c_str(), nullptr));
  info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(again.stage, x, &info));
  CHECK(info.residency.device_type == device.device_type);
  CHECK(info.residency.device_id == device.device_id);
  CHECK(snapshot(again.stage) == snapshot(s.stage));
  // An incremental step into the device columns: a subset of their rows (the map's rows are
  // scattered at the seal), one deleted.
  const std::string inc = scratch("device-increment.bp");
  for (size_t i = 0; i < 3 * 8; ++i) v[i] = -float(i);
  s.write_f32(s.query(s.paths("/dev", 8)), x, 2, std::vector<float>(v.begin(), v.begin() + 24), 3);
  KS_OK(s.remove(s.query({s.path("/dev_9")}), {x}, 2));
  s.seal(2);
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(inc.c_str(), nullptr, &w));
  kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
  d.change_range = true;
  d.range_begin = 2;
  d.range_end = 2;
  kstage_filter_t all{};
  kstage_query_t every = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &every));
  const Transfers before_increment = Transfers::now();
  A2_OK(kstage_adios2_write_step(w, s.stage, every, nullptr, 0, &d));
  const Transfers increment = Transfers::now().since(before_increment);
  CHECK(increment.down == (direct ? 0 : 1));  // the changed rows of x (n did not change)
  KS_OK(kstage_query_release(s.stage, every));
  A2_OK(kstage_adios2_close(w));
  kstage_adios2_open_desc_t rd = kstage_adios2_open_desc_init();
  rd.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  A2_OK(kstage_adios2_open(inc.c_str(), &rd, &r));
  uint64_t ordinal = 0;
  const Transfers before_apply = Transfers::now();
  A2_OK(kstage_adios2_read_step(r, again.stage, KSTAGE_TIMEOUT_INFINITE, &ordinal));
  const Transfers applied = Transfers::now().since(before_apply);
  CHECK(applied.up == (direct ? 0 : 1));  // 8 rows of x into the existing device column
  A2_OK(kstage_adios2_close(r));
  CHECK(ordinal == 2);
  CHECK(snapshot(again.stage) == snapshot(s.stage));
}

// The device path not taken is said on the log ("adios2" channel, INFO), per attribute and step.
TEST_CASE("a device column a step takes through host memory is an INFO on the adios2 channel",
          "[adios2][log]") {
#if defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  const DLDevice device{kDLCUDA, 0};
#if defined(ADIOS2_HAVE_CUDA) || defined(ADIOS2_HAVE_KOKKOS_CUDA)
  const bool direct = true;
#else
  const bool direct = false;
#endif
#else
  const DLDevice device = kOnDevice ? kResidency : DLDevice{kDLExtDev, 1};
  const bool direct = false;
#endif
  Stage s(host_execution(), &device);
  const kstage_token_t x = s.token("velocity");
  kstage_query_t q = s.query(s.paths("/dev", 8));
  s.write_f32(q, x, 1, std::vector<float>(8, 1.f), 1);
  s.seal(1);
  LogRecorder r;
  const std::string path = scratch("device-log.bp");
  {
    Recording on(r, KSTAGE_LOG_OFF, "adios2=info");
    KS_OK(on.status);
    kstage_adios2_stream_t w = 0;
    A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
    A2_OK(kstage_adios2_write_step(w, s.stage, q, &x, 1, nullptr));
    s.write_f32(q, x, 2, std::vector<float>(8, 2.f), 1);
    s.seal(2);
    A2_OK(kstage_adios2_write_step(w, s.stage, q, &x, 1, nullptr));
    A2_OK(kstage_adios2_close(w));
    // Read back onto the device: step 1 makes the column there, step 2 reads into it.
    Stage back(host_execution(), &device);
    A2_OK(kstage_adios2_restart(back.stage, path.c_str(), nullptr));
    KS_OK(kstage_flush_log());
  }
  const std::vector<LogEntry> put = r.find("adios2", "write_step: attribute 'velocity' on ");
  REQUIRE(put.size() == (direct ? 0 : 2));  // once per step
  const std::vector<LogEntry> got = r.find("adios2", "read_step: attribute 'velocity' on ");
  REQUIRE(got.size() == (direct ? 0 : 1));
  if (!direct) {
    REQUIRE(put[0].severity == KSTAGE_LOG_INFO);
    REQUIRE(put[0].message.find(" device " + std::to_string(device.device_id) +
                                " goes through host memory") != std::string::npos);
    REQUIRE(got[0].severity == KSTAGE_LOG_INFO);
    REQUIRE(got[0].message.find(" device " + std::to_string(device.device_id) +
                                " comes through host memory") != std::string::npos);
  }
}
#endif

TEST_CASE("a column no prim holds any more comes back with its schema and floor", "[adios2]") {
  // Columns outlive their prims (a schema is fixed from the first write): a restart that did not
  // make them would refuse, or change, what the stage accepts next.
  Stage s(host_execution());
  const kstage_token_t gone = s.token("gone"), ragged = s.token("ragged"), kept = s.token("kept");
  const kstage_path_t p = s.path("/p"), q = s.path("/q");
  std::vector<float> v = {1, 2, 3};
  int64_t one[1] = {1};
  DLTensor t = tensor(v.data(), f32(3), 1, one);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_VECTOR;
  KS_OK(s.write(s.query({p}), gone, 1, w));
  std::vector<int32_t> row = {4, 5};
  int64_t two[1] = {2};
  DLTensor r = tensor(row.data(), DLDataType{kDLInt, 32, 1}, 1, two);
  KS_OK(s.write(s.query({p}), ragged, 1, write_data(&r, 1, true)));
  s.write_f32(s.query({q}), kept, 1, {7});
  s.seal(1);
  KS_OK(s.remove(s.query({p}), {}, 3));  // /p gone: 'gone' and 'ragged' are held by no prim
  s.seal(3);
  const Snapshot original = snapshot(s.stage);
  REQUIRE(original.columns.size() == 3);
  REQUIRE(original.columns.at("gone").values.empty());
  REQUIRE(original.columns.at("ragged").values.empty());
  const std::string path = scratch("empty-columns.bp");
  A2_OK(kstage_adios2_checkpoint(s.stage, path.c_str()));
  Stage fresh(host_execution());
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), nullptr));
  CHECK(snapshot(fresh.stage) == original);
  // The schema is kept as in the original: a write with no semantic takes the column's VECTOR;
  // another dtype is another schema, in a column of its own.
  KS_OK(fresh.write(fresh.query({fresh.path("/p")}), fresh.token("gone"), 4, write_data(&t)));
  std::vector<float> x = {1};
  DLTensor tx = tensor(x.data(), f32(1), 1, one);
  KS_OK(fresh.write(fresh.query({fresh.path("/q")}), fresh.token("gone"), 4, write_data(&tx)));
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_schema(fresh.stage, fresh.token("gone"), 0, &info));
  CHECK(info.semantic == KSTAGE_SEMANTIC_VECTOR);
  CHECK(info.schema_count == 2);
}

TEST_CASE("a further schema's step name taken by another attribute is refused, naming both",
          "[adios2][errors][schemas]") {
  Stage s(host_execution());
  // 'm' as float64 (its step name 'm') and float32 ('m#fixed.2.32x1.0'), and an attribute
  // whose own name is that.
  std::vector<double> d = {1};
  int64_t one[1] = {1};
  DLTensor t = tensor(d.data(), f64(), 1, one);
  KS_OK(s.write(s.query({s.path("/a")}), s.token("m"), 1, write_data(&t)));
  s.write_f32(s.query({s.path("/b")}), s.token("m"), 1, {2});
  s.write_f32(s.query({s.path("/c")}), s.token("m#fixed.2.32x1.0"), 1, {3});
  s.seal(1);
  A2_FAILS(kstage_adios2_checkpoint(s.stage, scratch("keys.bp").c_str()), KSTAGE_NOT_SUPPORTED,
           "take the same name 'm#fixed.2.32x1.0' in the step");
}

TEST_CASE("an attribute held in several schemas round-trips, a column each, FORCE moves too",
          "[adios2][schemas]") {
  Stage s(host_execution());
  const kstage_token_t m = s.token("m");
  const kstage_path_t a = s.path("/a"), b = s.path("/b"), c = s.path("/c");
  s.write_f32(s.query({a, b}), m, 1, {1, 2});
  std::vector<double> d = {3};
  int64_t one[1] = {1};
  DLTensor t = tensor(d.data(), f64(), 1, one);
  KS_OK(s.write(s.query({c}), m, 1, write_data(&t)));
  s.seal(1);
  const std::string path = scratch("schemas.bp");
  A2_OK(kstage_adios2_checkpoint(s.stage, path.c_str()));
  const Snapshot original = snapshot(s.stage);
  REQUIRE(original.columns.size() == 2);  // one per schema
  Stage fresh(host_execution());
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), nullptr));
  CHECK(snapshot(fresh.stage) == original);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(fresh.stage, fresh.token("m"), &info));
  CHECK(info.schema_count == 2);
  CHECK(info.prim_count == 3);

  // A stream of incremental steps: /a moved to float64 with FORCE at 2 (a deletion in the float32
  // column and a value in the float64 one at the same ordinal), then /c back to float32 at 3.
  const std::string stream_path = scratch("schemas-stream.bp");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(stream_path.c_str(), nullptr, &w));
  kstage_query_t all = s.query({a, b, c});
  A2_OK(kstage_adios2_write_step(w, s.stage, all, nullptr, 0, nullptr));
  std::vector<double> ten = {10};
  DLTensor t10 = tensor(ten.data(), f64(), 1, one);
  kstage_write_data_t force = write_data(&t10);
  force.attribute_mode = KSTAGE_ATTRIBUTE_MODE_FORCE;
  KS_OK(s.write(s.query({a}), m, 2, force));
  s.seal(2);
  kstage_adios2_step_desc_t inc = kstage_adios2_step_desc_init();
  inc.change_range = true;
  inc.range_begin = 2;
  inc.range_end = 2;
  A2_OK(kstage_adios2_write_step(w, s.stage, all, nullptr, 0, &inc));
  std::vector<float> back = {30};
  DLTensor t30 = tensor(back.data(), f32(), 1, one);
  kstage_write_data_t force_back = write_data(&t30);
  force_back.attribute_mode = KSTAGE_ATTRIBUTE_MODE_FORCE;
  KS_OK(s.write(s.query({c}), m, 3, force_back));
  s.seal(3);
  inc.range_begin = inc.range_end = 3;
  A2_OK(kstage_adios2_write_step(w, s.stage, all, nullptr, 0, &inc));
  A2_OK(kstage_adios2_close(w));

  Stage replay(host_execution());
  kstage_adios2_stream_t r = 0;
  kstage_adios2_open_desc_t od = kstage_adios2_open_desc_init();
  od.mode = KSTAGE_ADIOS2_READ;
  A2_OK(kstage_adios2_open(stream_path.c_str(), &od, &r));
  uint64_t ordinal = 0;
  for (int i = 0; i < 3; ++i)
    A2_OK(kstage_adios2_read_step(r, replay.stage, KSTAGE_TIMEOUT_INFINITE, &ordinal));
  A2_OK(kstage_adios2_close(r));
  CHECK(ordinal == 3);
  CHECK(snapshot(replay.stage) == snapshot(s.stage));
}

TEST_CASE("a stage of one range's members round-trips as a range, with no list of ids",
          "[adios2]") {
  // The common checkpoint (a simulation's particles): every prim a member of one range, every
  // one holding each attribute. The step's paths are one run; the restart queries the range.
  Stage s(host_execution());
  const kstage_token_t x = s.token("x"), m = s.token("mass");
  const uint64_t n = 2 * 65536 + 5;  // whole pages of the prim table and a part of one
  const kstage_path_t first = s.range("/sim", "p", 7, n);
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  std::vector<float> v(n * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 1000) * 0.25f;
  s.write_f32(all, x, 1, v, 3);
  std::vector<double> mass(n);
  for (size_t i = 0; i < n; ++i) mass[i] = 1.0 + double(i);
  int64_t shape[1] = {int64_t(n)};
  DLTensor t = tensor(mass.data(), DLDataType{kDLFloat, 64, 1}, 1, shape);
  KS_OK(s.write(all, m, 1, write_data(&t)));
  s.seal(1);
  KS_OK(kstage_query_release(s.stage, all));
  const std::string path = scratch("range.bp");
  A2_OK(kstage_adios2_checkpoint(s.stage, path.c_str()));
  {  // the file: one run of range 0, no explicit strings, no positions ("all, in order")
    adios2::ADIOS ad;
    adios2::IO io = ad.DeclareIO("check");
    adios2::Engine r = io.Open(path, adios2::Mode::Read);
    const bool began =
        r.BeginStep() == adios2::StepStatus::OK;  // (Catch2 cannot print a StepStatus)
    REQUIRE(began);
    std::vector<uint64_t> segments;
    r.Get(io.InquireVariable<uint64_t>("kstage/paths/segments"), segments, adios2::Mode::Sync);
    CHECK(segments == std::vector<uint64_t>{1, 0, 0, n});
    CHECK(!io.InquireVariable<uint64_t>("kstage/attr/x/prims"));
    CHECK(!io.InquireVariable<uint64_t>("kstage/attr/mass/prims"));
    r.EndStep();
    r.Close();
  }
  Stage fresh(host_execution());
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), nullptr));
  CHECK(snapshot(fresh.stage) == snapshot(s.stage));
  kstage_path_t f = 0;
  uint64_t count = 0, index = 0;
  KS_OK(kstage_path_range_info(fresh.stage, fresh.path("/sim/p9"), &f, &count, &index));
  CHECK(count == n);
  CHECK(index == 2);
}

TEST_CASE("incremental steps carry what changed, deletions included", "[adios2]") {
  Stage s(host_execution());
  const kstage_token_t x = s.token("x");
  const kstage_path_t first = s.range("/", "c", 0, 100);
  kstage_query_t all = s.range_query(first);
  std::vector<float> v(100);
  for (int i = 0; i < 100; ++i) v[i] = float(i);
  s.write_f32(all, x, 1, v);
  s.seal(1);
  const std::string path = scratch("ticks.bp");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
  A2_OK(kstage_adios2_write_step(w, s.stage, all, &x, 1, nullptr));
  Stage reader(host_execution());
  for (uint64_t tick = 2; tick <= 4; ++tick) {
    s.write_f32(s.query({first + tick, first + 50}), x, tick,
                {float(tick) * 100, float(tick) * 1000});
    KS_OK(s.remove(s.query({first + 90 + tick}), {}, tick));
    s.seal(tick);
    kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
    d.change_range = true;
    d.range_begin = d.range_end = tick;
    A2_OK(kstage_adios2_write_step(w, s.stage, all, &x, 1, &d));
  }
  A2_OK(kstage_adios2_close(w));
  // The file holds 4 steps; an incremental one lists only the changed and deleted prims.
  {
    adios2::ADIOS adios;
    adios2::IO io = adios.DeclareIO("check");
    adios2::Engine e = io.Open(path, adios2::Mode::Read);
    int steps = 0;
    while (e.BeginStep() == adios2::StepStatus::OK) {
      uint64_t count = 0;
      e.Get(io.InquireVariable<uint64_t>("kstage/paths/count"), count, adios2::Mode::Sync);
      CHECK(count == (steps == 0 ? 100u : 3u));
      e.EndStep();
      ++steps;
    }
    e.Close();
    CHECK(steps == 4);
  }
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  A2_OK(kstage_adios2_open(path.c_str(), &d, &r));
  uint64_t ordinal = 0;
  for (uint64_t expect = 1; expect <= 4; ++expect) {
    A2_OK(kstage_adios2_read_step(r, reader.stage, KSTAGE_TIMEOUT_INFINITE, &ordinal));
    CHECK(ordinal == expect);
  }
  A2_FAILS(kstage_adios2_read_step(r, reader.stage, KSTAGE_TIMEOUT_INFINITE, &ordinal),
           KSTAGE_END_OF_ITERATION, "no more steps");
  A2_OK(kstage_adios2_close(r));
  CHECK(snapshot(reader.stage) == snapshot(s.stage));
  kstage_filter_t none{};
  CHECK(reader.filtered(none).size() == 97);  // three prims deleted
}

TEST_CASE("the Inline engine couples a writer and a reader in one process", "[adios2]") {
  Filled f;
  const char* params[] = {nullptr};
  kstage_adios2_open_desc_t wd = kstage_adios2_open_desc_init();
  wd.engine = "Inline";
  wd.parameters = params;
  kstage_adios2_stream_t w = 0, r = 0;
  A2_OK(kstage_adios2_open("inline-coupling", &wd, &w));
  kstage_adios2_open_desc_t rd = wd;
  rd.mode = KSTAGE_ADIOS2_READ;
  rd.inline_writer = w;
  A2_OK(kstage_adios2_open("inline-coupling-reader", &rd, &r));  // Inline: a name of its own
  kstage_filter_t all{};
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(f.s.stage, &all, &q));
  Stage other(host_execution());
  A2_OK(kstage_adios2_write_step(w, f.s.stage, q, nullptr, 0, nullptr));
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_read_step(r, other.stage, KSTAGE_TIMEOUT_INFINITE, &ordinal));
  CHECK(snapshot(other.stage) == snapshot(f.s.stage));
  A2_OK(kstage_adios2_close(r));
  A2_OK(kstage_adios2_close(w));
  KS_OK(kstage_query_release(f.s.stage, q));
}

TEST_CASE("steps that do not fit are refused and leave the stage as it was", "[adios2][errors]") {
  Filled f;
  const std::string path = scratch("fit.bp");
  A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));

  SECTION("another kind or dtype for prims that hold the attribute") {
    // A step at ordinal 3 whose 'position' (float32 x 3) is on /world/walls/a, which the stage
    // holds as float64 x 3: refused before anything is written (one value per prim and name).
    Stage src(host_execution());
    const kstage_token_t spos = src.token("position"), sid = src.token("id");
    kstage_query_t sq = src.query({src.path("/world/walls/a"), src.path("/elsewhere")});
    src.write_f32(sq, sid, 3, {1, 2});
    std::vector<float> p3 = {1, 2, 3};
    int64_t one[1] = {1};
    DLTensor tp = tensor(p3.data(), f32(3), 1, one);
    KS_OK(src.write(src.query({src.path("/world/walls/a")}), spos, 3, write_data(&tp)));
    src.seal(3);
    const std::string moved = scratch("fit-schemas.bp");
    A2_OK(kstage_adios2_checkpoint(src.stage, moved.c_str()));

    Stage s(host_execution());
    const kstage_token_t pos = s.token("position");
    std::vector<double> v = {1, 2, 3};
    DLTensor t = tensor(v.data(), DLDataType{kDLFloat, 64, 3}, 1, one);
    KS_OK(s.write(s.query({s.path("/world/walls/a")}), pos, 1, write_data(&t)));
    s.seal(1);
    const Snapshot before = snapshot(s.stage);
    A2_FAILS(kstage_adios2_restart(s.stage, moved.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
             "attribute 'position' of the step is fixed float32 x 3 (semantic 0), but prim "
             "'/world/walls/a' holds it as fixed float64 x 3 (semantic 0), which the step does "
             "not delete");
    CHECK(snapshot(s.stage) == before);  // 'id' of the step not written either
    kstage_filter_t all{};
    CHECK(s.filtered(all).size() == 1);  // no path of the step became a prim

    // Prims the stage does not hold it on take the step's schema in a column of its own.
    Stage other(host_execution());
    KS_OK(other.write(other.query({other.path("/other")}), other.token("position"), 1,
                      write_data(&t)));
    other.seal(1);
    A2_OK(kstage_adios2_restart(other.stage, moved.c_str(), nullptr));
    kstage_attribute_info_t info = kstage_attribute_info_init();
    KS_OK(kstage_attribute_info(other.stage, other.token("position"), &info));
    CHECK(info.schema_count == 2);
  }
  SECTION("a step at or below the stage's write floor (a restart into the same stage)") {
    const Snapshot before = snapshot(f.s.stage);
    A2_FAILS(kstage_adios2_restart(f.s.stage, path.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
             "not above the stage's write floor");
    CHECK(snapshot(f.s.stage) == before);
  }
}

TEST_CASE("files that are not kstage steps, unknown dtypes and truncated files",
          "[adios2][errors]") {
  Stage s(host_execution());
  s.write_f32(s.query({s.path("/keep")}), s.token("k"), 1, {7.f});
  s.seal(1);
  const Snapshot before = snapshot(s.stage);

  SECTION("a BP5 file of another schema") {
    const std::string path = scratch("foreign.bp");
    {
      adios2::ADIOS adios;
      adios2::IO io = adios.DeclareIO("foreign");
      adios2::Engine e = io.Open(path, adios2::Mode::Write);
      std::vector<float> v(6, 1.f);
      e.BeginStep();
      e.Put(io.DefineVariable<float>("pos", {2, 3}, {0, 0}, {2, 3}), v.data());
      e.EndStep();
      e.Close();
    }
    A2_FAILS(kstage_adios2_restart(s.stage, path.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
             "not a kstage step");
  }
  SECTION("an unknown dtype") {
    const std::string path = scratch("dtype.bp");
    Filled f;
    A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
    // The file again, with the schema of 'id' naming a dtype code DLPack does not have.
    const std::string bad = scratch("dtype-bad.bp");
    rewrite(path, bad, {{"kstage/attr/id/dtype", {99, 64, 1}}});
    A2_FAILS(
        kstage_adios2_restart(s.stage, bad.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
        "attribute 'id': dtype {code 99, 64 bits} x 1 (code 99) is not one kstage_adios2 knows");
  }
  SECTION("values of another type than the schema says") {
    const std::string path = scratch("values-type.bp"), bad = scratch("values-type-bad.bp");
    Filled f;
    A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
    rewrite(path, bad, {{"kstage/attr/id/dtype", {kDLFloat, 64, 1}}});
    A2_FAILS(kstage_adios2_restart(s.stage, bad.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
             "attribute 'id': its values are int64_t, its schema says float64 x 1");
  }
  SECTION("tables damaged in one place") {
    const std::string path = scratch("tables.bp"), bad = scratch("tables-bad.bp");
    Filled f;  // neighbours on 3 of its 8 prims: positions and offsets of its own
    A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
    struct Damage {
      const char* variable;
      std::function<void(std::vector<uint64_t>&)> change;
      const char* message;
    };
    const std::vector<Damage> damages = {
        {"kstage/blocks", [](std::vector<uint64_t>& d) { d[0] = 1; },
         "block table 'kstage/blocks' does not start at 0"},
        {"kstage/attr/neighbours/blocks", [](std::vector<uint64_t>& d) { d[3] = 7; },
         "its counts and its block table differ"},
        {"kstage/attr/neighbours/prims", [](std::vector<uint64_t>& d) { d[1] = 99; },
         "attribute 'neighbours': a position 99 is not among its blocks' paths [0, 7)"},
        {"kstage/attr/neighbours/offsets",
         [](std::vector<uint64_t>& d) { d[2] = 1; },  // {0, 2, 1, 5}
         "attribute 'neighbours': offsets[2] is below offsets[1]"},
        {"kstage/attr/neighbours/offsets", [](std::vector<uint64_t>& d) { d.back() += 1; },
         "attribute 'neighbours': its offsets do not span its blocks' 5 elements"},
        {"kstage/paths/segments", [](std::vector<uint64_t>& d) { d[2] += 50; },
         "path run 0 of the step is out of its tables' bounds"},
        {"kstage/paths/strings/offsets", [](std::vector<uint64_t>& d) { d.back() += 1; },
         "string table 'kstage/paths/strings': its offsets do not span its blocks'"},
    };
    for (const Damage& damage : damages) {
      INFO(damage.variable << ": " << damage.message);
      rewrite(path, bad, {}, [&](const std::string& name, std::vector<uint64_t>& data) {
        if (name == damage.variable) damage.change(data);
      });
      A2_FAILS(kstage_adios2_restart(s.stage, bad.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
               damage.message);
      CHECK(snapshot(s.stage) == before);
    }
  }
  SECTION("a truncated file") {
    const std::string path = scratch("truncated.bp");
    Filled f;
    A2_OK(kstage_adios2_checkpoint(f.s.stage, path.c_str()));
    // Its index cut after the header, as a crash while writing the first step leaves it. (BP5
    // waits, tens of seconds, for a writer to complete a file whose metadata or data is cut
    // inside a step it indexes: the test does not make ADIOS2 wait.)
    std::filesystem::resize_file(std::filesystem::path(path) / "md.idx", 64);
    // Its manifest refuses it before ADIOS2 opens it, naming the file and its sizes ...
    A2_FAILS(kstage_adios2_restart(s.stage, path.c_str(), nullptr), KSTAGE_OP_FAILED,
             "md.idx' is 64 bytes, its manifest says");
    // ... and without the manifest (a file written before manifests), ADIOS2 finds no step.
    std::filesystem::remove(std::filesystem::path(path) / "kstage.manifest");
    A2_FAILS(kstage_adios2_restart(s.stage, path.c_str(), nullptr), KSTAGE_INVALID_ARGUMENT,
             "has no steps");
  }
  CHECK(snapshot(s.stage) == before);
}

TEST_CASE("streams: engines, handles and modes", "[adios2][errors]") {
  Stage s(host_execution());
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.engine = "NoSuchEngine";
  kstage_adios2_stream_t h = 0;
  A2_FAILS(kstage_adios2_open(scratch("none.bp").c_str(), &d, &h), KSTAGE_NOT_SUPPORTED,
           "NoSuchEngine");
  CHECK(h == 0);
  A2_FAILS(kstage_adios2_open(nullptr, nullptr, &h), KSTAGE_INVALID_ARGUMENT, "name is NULL");
  A2_FAILS(kstage_adios2_open("x.bp", nullptr, nullptr), KSTAGE_INVALID_ARGUMENT, "stream is NULL");
  d = kstage_adios2_open_desc_init();
  d.struct_size = 8;
  A2_FAILS(kstage_adios2_open("x.bp", &d, &h), KSTAGE_INVALID_ARGUMENT, "struct_size is 8");
  d = kstage_adios2_open_desc_init();
  d.mode = 7;
  A2_FAILS(kstage_adios2_open("x.bp", &d, &h), KSTAGE_INVALID_ARGUMENT, "desc.mode is 7");
  const char* odd[] = {"Threads", nullptr};
  d = kstage_adios2_open_desc_init();
  d.parameters = odd;
  A2_FAILS(kstage_adios2_open(scratch("odd.bp").c_str(), &d, &h), KSTAGE_INVALID_ARGUMENT,
           "'Threads' has no value");

  const std::string path = scratch("modes.bp");
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &h));
  uint64_t ordinal = 0;
  A2_FAILS(kstage_adios2_read_step(h, s.stage, 0, &ordinal), KSTAGE_INVALID_ARGUMENT,
           "is a writer");
  kstage_adios2_step_desc_t sd = kstage_adios2_step_desc_init();
  sd.change_range = true;
  sd.range_begin = 5;
  sd.range_end = 4;
  kstage_filter_t all{};
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &q));
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, nullptr, 0, &sd), KSTAGE_INVALID_ARGUMENT,
           "range_end 4 is below");
  kstage_token_t ghost = s.token("ghost");
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, &ghost, 1, nullptr), KSTAGE_NOT_FOUND,
           "'ghost' has no column");
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, nullptr, 2, nullptr), KSTAGE_INVALID_ARGUMENT,
           "attributes is NULL but n is 2");
  sd = kstage_adios2_step_desc_init();
  sd.struct_size = 4;
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, nullptr, 0, &sd), KSTAGE_INVALID_ARGUMENT,
           "start from kstage_adios2_step_desc_init()");
  sd = kstage_adios2_step_desc_init();
  sd.reserved[1] = 1;
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, nullptr, 0, &sd), KSTAGE_INVALID_ARGUMENT,
           "reserved must be zero");
  A2_OK(kstage_adios2_close(h));
  A2_FAILS(kstage_adios2_close(h), KSTAGE_INVALID_HANDLE, "closed twice");
  // A reader of the file just written: it reads, and writes nothing.
  kstage_adios2_open_desc_t rd = kstage_adios2_open_desc_init();
  rd.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t reader = 0;
  A2_OK(kstage_adios2_open(path.c_str(), &rd, &reader));
  A2_FAILS(kstage_adios2_write_step(reader, s.stage, q, nullptr, 0, nullptr),
           KSTAGE_INVALID_ARGUMENT, "is a reader");
  A2_FAILS(kstage_adios2_read_step(reader, s.stage, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "ordinal is NULL");
  A2_OK(kstage_adios2_close(reader));
  A2_FAILS(kstage_adios2_write_step(h, s.stage, q, nullptr, 0, nullptr), KSTAGE_INVALID_HANDLE,
           "not an open");
  A2_FAILS(kstage_adios2_checkpoint(s.stage, nullptr), KSTAGE_INVALID_ARGUMENT, "path is NULL");
  A2_FAILS(kstage_adios2_restart(s.stage, "", nullptr), KSTAGE_INVALID_ARGUMENT,
           "path is NULL or empty");
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("a stream keeps each attribute's schema: a step of another schema is refused",
          "[adios2][errors]") {
  Stage a(host_execution()), b(host_execution());
  a.write_f32(a.query({a.path("/x")}), a.token("mass"), 1, {1.f});
  a.seal(1);
  std::vector<int32_t> v = {7};
  int64_t shape[1] = {1};
  DLTensor t = tensor(v.data(), DLDataType{kDLInt, 32, 1}, 1, shape);
  KS_OK(b.write(b.query({b.path("/x")}), b.token("mass"), 2, write_data(&t)));
  b.seal(2);
  const std::string path = scratch("schema-change.bp");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
  kstage_filter_t all{};
  kstage_query_t qa = 0, qb = 0;
  KS_OK(kstage_query_filter(a.stage, &all, &qa));
  KS_OK(kstage_query_filter(b.stage, &all, &qb));
  A2_OK(kstage_adios2_write_step(w, a.stage, qa, nullptr, 0, nullptr));
  A2_FAILS(kstage_adios2_write_step(w, b.stage, qb, nullptr, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "attribute 'mass' is fixed int32 x 1 (semantic 0), but this stream's earlier steps "
           "recorded it as fixed float32 x 1");
  A2_OK(kstage_adios2_write_step(w, a.stage, qa, nullptr, 0, nullptr));  // the stream goes on
  A2_OK(kstage_adios2_close(w));
  KS_OK(kstage_query_release(a.stage, qa));
  KS_OK(kstage_query_release(b.stage, qb));
  // The file holds the two steps written (the refused one left none behind), the first of
  // which reads back as stage a.
  {
    adios2::ADIOS ad;
    adios2::IO io = ad.DeclareIO("count");
    adios2::Engine e = io.Open(path, adios2::Mode::Read);
    int steps = 0;
    while (e.BeginStep() == adios2::StepStatus::OK) {
      ++steps;
      e.EndStep();
    }
    e.Close();
    CHECK(steps == 2);
  }
  Stage fresh(host_execution());
  kstage_adios2_open_desc_t rd = kstage_adios2_open_desc_init();
  rd.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  A2_OK(kstage_adios2_open(path.c_str(), &rd, &r));
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_read_step(r, fresh.stage, 0, &ordinal));
  A2_OK(kstage_adios2_close(r));
  CHECK(snapshot(fresh.stage) == snapshot(a.stage));
}
