// SPDX-License-Identifier: Apache-2.0
// The C++ API (include/kstage/kstage.hpp): every wrapper reaches its C call,
// failures arrive as kstage::Error (or a Status, for the non-throwing
// overloads), handles are released exactly once -- also when an exception
// leaves a loop over groups -- and moves leave empty objects. Views go in at
// rank 1 to 3 in any layout and come out as unmanaged Views that alias the
// group's memory; a View type that does not fit is refused, naming both.
//
// Built once per residency the build has (kstage_test_cpp_api and, on the
// emulated device, kstage_test_cpp_api_emulated). Cases tagged [host_adoption]
// or [host_bridge] look at host memory as host Views and run on the host only.
#include <kstage/kstage.hpp>

#include "support.hpp"

#include <array>
#include <numeric>
#include <stdexcept>

using kstage_test::kOnDevice;
using kstage_test::kResidency;

namespace {

kstage::Stage make_stage() {
  kstage_config_t c = kstage_config_init();
  c.host_execution = kstage_test::host_execution();
  if (kOnDevice) c.residency = kResidency;
  return kstage::Stage::create(c);
}

// Reads land on the host so that the test can look at them as host Views
// (on a device residency this copies down; on the host it is zero-copy).
kstage::ReadOptions host_read(kstage::ReadOptions o = {}) {
  if (kOnDevice) o.target_device = DLDevice{kDLCPU, 0};
  return o;
}

// Catches the kstage::Error `expr` throws and checks its status and message.
#define CPP_FAILS(expr, code, needle)                                       \
  do {                                                                      \
    bool _thrown = false;                                                   \
    try {                                                                   \
      (void)(expr);                                                         \
    } catch (const kstage::Error& e) {                                      \
      _thrown = true;                                                       \
      INFO(#expr << " threw " << e.what());                                 \
      REQUIRE(e.status() == (code));                                        \
      REQUIRE(std::string(e.what()).find(needle) != std::string::npos);     \
      REQUIRE(std::string(e.what()).find(kstage_status_string(code)) == 0); \
    }                                                                       \
    INFO(#expr);                                                            \
    REQUIRE(_thrown);                                                       \
  } while (0)

std::vector<kstage_path_t> make_paths(const kstage::Stage& s, const std::string& prefix, size_t n) {
  std::vector<kstage_path_t> p;
  for (size_t i = 0; i < n; ++i) p.push_back(s.path(prefix + std::to_string(i)));
  return p;
}

// Every float of every prim of `attr`, on the host, in prim order.
std::vector<float> read_floats(const kstage::Stage& s, const kstage::Query& q,
                               kstage_token_t attr) {
  std::vector<float> out;
  kstage::ReadOptions o = host_read();
  o.compact = true;
  for (auto& g : s.read(q, {attr}, o)) {
    const DLTensor& t = g.tensor(0);
    const auto* f = static_cast<const float*>(t.data);
    out.insert(out.end(), f, f + g.prims().size() * g.dtype().lanes);
  }
  return out;
}

}  // namespace

TEST_CASE("cpp: set_log_callback takes any callable; a throwing one drops the message", "[cpp]") {
  std::vector<std::string> got;
  kstage::set_log_callback(
      [&](kstage_log_severity_t severity, std::string_view channel, std::string_view message) {
        if (message == "throw") throw std::runtime_error("from the callback");
        got.push_back(std::to_string(severity) + " " + std::string(channel) + " " +
                      std::string(message));
      },
      KSTAGE_LOG_WARNING, "device=debug");
  kstage::log_message(KSTAGE_LOG_INFO, "api", "below the threshold");
  kstage::log_message(KSTAGE_LOG_DEBUG, "device", "d");
  kstage::log_message(KSTAGE_LOG_ERROR, "api", "throw");
  kstage::log_message(KSTAGE_LOG_ERROR, "api", "e");
  kstage::flush_log();
  REQUIRE(got == std::vector<std::string>{"0 device d", "3 api e"});
  // A malformed filter throws and keeps the callback.
  try {
    kstage::set_log_callback([](kstage_log_severity_t, std::string_view, std::string_view) {},
                             KSTAGE_LOG_DEBUG, "device=loud");
    FAIL("no exception");
  } catch (const kstage::Error& e) {
    REQUIRE(e.status() == KSTAGE_INVALID_ARGUMENT);
    REQUIRE(e.message().find("'device=loud'") != std::string::npos);
  }
  kstage::log_message(KSTAGE_LOG_WARNING, "api", "w");
  kstage::Status st;
  kstage::flush_log(st);
  REQUIRE(st.ok());
  REQUIRE(got.back() == "2 api w");
  kstage::set_log_callback(nullptr);  // removed
  kstage::log_message(KSTAGE_LOG_ERROR, "api", "after");
  kstage::flush_log();
  REQUIRE(got.back() == "2 api w");
}

TEST_CASE("cpp: build_info is kstage_build_info's text", "[cpp]") {
  const std::string info = kstage::build_info();
  REQUIRE(info.rfind("kstage: " + std::to_string(KSTAGE_VERSION_MAJOR) + "." +
                         std::to_string(KSTAGE_VERSION_MINOR) + ".",
                     0) == 0);
  REQUIRE(info.find("\nbackends: host") != std::string::npos);
  kstage::Status st;
  REQUIRE(kstage::build_info(st) == info);
  REQUIRE(st.ok());
}

TEST_CASE("cpp: device_check is kstage_device_check (the host: nothing to check)", "[cpp]") {
  kstage::Stage s = make_stage();
  s.device_check(DLDevice{kDLCPU, 0});
  kstage::Status st;
  s.device_check(DLDevice{kDLCPU, 0}, st);
  REQUIRE(st.ok());
  // A device type no build of kstage has a backend for (DLPack's kDLVPI).
  CPP_FAILS(s.device_check(DLDevice{kDLVPI, 0}), KSTAGE_NOT_SUPPORTED, "");
  s.device_check(DLDevice{kDLVPI, 0}, st);
  REQUIRE(st.code() == KSTAGE_NOT_SUPPORTED);
}

TEST_CASE("cpp: the dictionary, path lists and queries call through", "[cpp]") {
  kstage::Stage s = make_stage();
  REQUIRE(s);
  const kstage_token_t pos = s.token("position");
  REQUIRE(pos != 0);
  REQUIRE(s.token("position") == pos);
  REQUIRE(s.token_string(pos) == "position");
  const kstage_path_t a = s.path("/world/a");
  REQUIRE(s.path_string(a) == "/world/a");
  CPP_FAILS(s.path("relative"), KSTAGE_INVALID_ARGUMENT, "not absolute");
  CPP_FAILS(s.token(""), KSTAGE_INVALID_ARGUMENT, "empty");
  CPP_FAILS(s.token_string(12345), KSTAGE_NOT_FOUND, "12345");

  const std::vector<kstage_path_t> ids = make_paths(s, "/world/p", 5);
  kstage::PathList list = s.path_list(ids);
  REQUIRE(std::vector<kstage_path_t>(list.paths().begin(), list.paths().end()) == ids);
  kstage::Query q = s.query(ids);
  REQUIRE(q.count() == 5);
  kstage::PathList back = q.paths();
  REQUIRE(std::vector<kstage_path_t>(back.paths().begin(), back.paths().end()) == ids);
  CPP_FAILS(s.query({ids[0], ids[0]}), KSTAGE_INVALID_ARGUMENT, "repeats paths[0]");
  // Bulk: the same ids as one by one; a bad name interns nothing.
  const std::vector<std::string> names{"/world/p1", "/world/q", "/world/p3"};
  const std::vector<std::string_view> views(names.begin(), names.end());
  const std::vector<kstage_path_t> bulk = s.paths(views);
  REQUIRE(bulk[0] == ids[1]);
  REQUIRE(bulk[2] == ids[3]);
  REQUIRE(s.path_string(bulk[1]) == "/world/q");
  CPP_FAILS(s.paths({"/world/r", "bad"}), KSTAGE_INVALID_ARGUMENT, "strings[1]");
  // Path ranges and queries over them.
  const kstage::PathRange r = s.path_range("/world/cells", "c", 0, 100);
  REQUIRE(r.count == 100);
  REQUIRE(s.path_string(r[42]) == "/world/cells/c42");
  REQUIRE(s.path("/world/cells/c7") == r[7]);
  REQUIRE(s.query(r).count() == 100);
  REQUIRE(s.query(r, 10, 0, 10).count() == 9);
  const kstage::PathRangeDefinition def = s.path_range_definition(r.first);
  REQUIRE(def.parent == "/world/cells");
  REQUIRE(def.prefix == "c");
  REQUIRE(def.begin == 0);
  REQUIRE(def.count == 100);
  CPP_FAILS(s.path_range_definition(r[1]), KSTAGE_INVALID_ARGUMENT, "not the first path");
  CPP_FAILS(s.path_range("/world/cells", "c", 50, 100), KSTAGE_ALREADY_EXISTS,
            "/world/cells/c[0..99]");
  CPP_FAILS(s.query(r, 100), KSTAGE_INVALID_ARGUMENT, "start 100");

  // Filters: prims holding the attribute, under a prefix, in a list.
  Kokkos::View<float* [3], Kokkos::HostSpace> view("v", 5);
  s.write(pos, q, view, 1).wait();
  s.seal(1);
  kstage::Filter f;
  const kstage_token_t has[] = {pos};
  f.has = {has, 1};
  REQUIRE(s.query(f).count() == 5);
  f.path_prefix = s.path("/world");
  REQUIRE(s.query(f).count() == 5);
  f.path_prefix = a;
  REQUIRE(s.query(f).count() == 0);
  kstage::Filter in;
  kstage::PathList two = s.path_list({ids[1], ids[3]});
  in.path_in = two.handle();
  REQUIRE(s.query(in).count() == 2);
  REQUIRE(s.write_floor(pos) == 1);
  REQUIRE(s.write_floor() == 1);

  // Describing the stage: the attributes with a column, and each one's column.
  REQUIRE(s.attributes() == std::vector<kstage_token_t>{pos});
  const kstage_attribute_info_t info = s.attribute_info(pos);
  REQUIRE(info.attribute == pos);
  REQUIRE(info.dtype.code == kDLFloat);
  REQUIRE(info.dtype.lanes == 3);
  REQUIRE(info.prim_count == 5);
  REQUIRE(info.write_floor == 1);
  REQUIRE(s.query(kstage::Filter{}).count() == 5);  // every existing prim
  CPP_FAILS(s.attribute_info(s.token("velocity")), KSTAGE_NOT_FOUND, "'velocity' has no column");
  kstage::Status st;
  REQUIRE(s.attribute_info(s.token("velocity"), st).attribute == 0);
  REQUIRE(st.code() == KSTAGE_NOT_FOUND);
}

TEST_CASE("cpp: handles are released exactly once, and moves leave empty objects", "[cpp]") {
  kstage::Stage s = make_stage();
  const kstage_stage_t raw = s.handle();
  const std::vector<kstage_path_t> ids = make_paths(s, "/h/p", 3);

  kstage::Query q = s.query(ids);
  const kstage_query_t qh = q.handle();
  kstage::Query moved = std::move(q);
  REQUIRE(!q);
  REQUIRE(q.handle() == 0);
  REQUIRE(moved.handle() == qh);
  uint64_t n = 0;
  REQUIRE(kstage_query_count(raw, qh, &n) == KSTAGE_OK);
  // Move assignment releases what the target held.
  kstage::Query other = s.query({ids[0]});
  const kstage_query_t oh = other.handle();
  other = std::move(moved);
  REQUIRE(kstage_query_count(raw, oh, &n) == KSTAGE_INVALID_HANDLE);
  REQUIRE(other.handle() == qh);
  other.reset();
  REQUIRE(!other);
  REQUIRE(kstage_query_count(raw, qh, &n) == KSTAGE_INVALID_HANDLE);
  other.reset();  // twice: nothing more happens

  // Ops, path lists, reads and groups the same way.
  kstage::Query all = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 3);
  kstage::Op op = s.write(t, all, v, 1);
  const kstage_op_t oph = op.handle();
  kstage::Op op2 = std::move(op);
  REQUIRE(!op);
  REQUIRE(op2.wait(KSTAGE_TIMEOUT_INFINITE));  // (a device column copies after the call)
  op2.reset();
  REQUIRE(kstage_wait(raw, oph, 0) == KSTAGE_INVALID_HANDLE);
  s.seal(1);

  kstage::Read r = s.read(all, {t}, host_read());
  const kstage_read_t rh = r.handle();
  kstage::ReadGroup g;
  REQUIRE(r.next(g));
  const kstage_group_t gh = g.handle();
  kstage::ReadGroup kept = std::move(g);
  REQUIRE(!g);
  REQUIRE(kept.handle() == gh);
  REQUIRE(kept.prims().size() == 3);
  REQUIRE(!r.next(g));  // the end: not an error
  kstage::Read r2 = std::move(r);
  r2.reset();
  REQUIRE(kstage_release_read(raw, rh) == KSTAGE_INVALID_HANDLE);
  // A group outlives its read and is released with the object.
  REQUIRE(kept.tensor_count() == 1);
  kept.reset();
  REQUIRE(kstage_release_group(raw, gh) == KSTAGE_INVALID_HANDLE);

  // The stage goes with its object; handles still held go stale, and their
  // destructors' releases are harmless.
  kstage::Query late = s.query(ids);
  kstage::Stage s2 = std::move(s);
  REQUIRE(!s);
  REQUIRE(s2.handle() == raw);
  s2.reset();
  REQUIRE(kstage_query_count(raw, late.handle(), &n) == KSTAGE_INVALID_HANDLE);
}

TEST_CASE("cpp: borrowed stages and queries are C code's to release", "[cpp]") {
  kstage_config_t c = kstage_config_init();
  if (kOnDevice) c.residency = kResidency;
  kstage_stage_t raw = 0;
  REQUIRE(kstage_create(&c, &raw) == KSTAGE_OK);
  kstage_path_t p[2] = {0, 0};
  REQUIRE(kstage_intern_path(raw, "/c/a", KSTAGE_NUL_TERMINATED, &p[0]) == KSTAGE_OK);
  REQUIRE(kstage_intern_path(raw, "/c/b", KSTAGE_NUL_TERMINATED, &p[1]) == KSTAGE_OK);
  kstage_query_t rq = 0;
  REQUIRE(kstage_query_paths(raw, p, 2, &rq) == KSTAGE_OK);
  {
    kstage::Stage s = kstage::Stage::borrow(raw);
    kstage::Query q = kstage::Query::borrow(raw, rq);
    REQUIRE(q.count() == 2);
    Kokkos::View<float*, Kokkos::HostSpace> v("v", 2);
    s.write(s.token("t"), q, v, 1).wait();
    s.seal(1);
    kstage::Stage moved = std::move(s);  // a borrowed stage stays borrowed when moved
  }
  uint64_t n = 0;
  REQUIRE(kstage_query_count(raw, rq, &n) == KSTAGE_OK);  // still alive
  REQUIRE(n == 2);
  REQUIRE(kstage_query_release(raw, rq) == KSTAGE_OK);
  uint64_t floor = 0;
  REQUIRE(kstage_get_write_floor(raw, 0, &floor) == KSTAGE_OK);
  REQUIRE(floor == 1);
  REQUIRE(kstage_destroy(raw) == KSTAGE_OK);
}

TEST_CASE("cpp: failures throw kstage::Error or fill a Status, and change nothing", "[cpp]") {
  kstage::Stage s = make_stage();
  const kstage_token_t t = s.token("t");
  const std::vector<kstage_path_t> ids = make_paths(s, "/e/p", 4);
  kstage::Query q = s.query(ids);
  Kokkos::View<float* [3], Kokkos::HostSpace> v("v", 4);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) v(i, c) = float(10 * i + c);
  s.write(t, q, v, 5).wait();
  s.seal(5);

  // Ordinal at the floor.
  CPP_FAILS(s.write(t, q, v, 5), KSTAGE_WRITE_FLOOR_VIOLATION, "floor");
  // UPDATE of a prim that does not exist.
  kstage::WriteOptions update;
  update.mode = KSTAGE_PRIM_MODE_UPDATE;
  kstage::Query missing = s.query({s.path("/e/missing")});
  Kokkos::View<float* [3], Kokkos::HostSpace> one("one", 1);
  CPP_FAILS(s.write(t, missing, one, 6, update), KSTAGE_NOT_FOUND, "/e/missing");
  // A schema that differs from the column's.
  Kokkos::View<double* [3], Kokkos::HostSpace> wrong("wrong", 4);
  CPP_FAILS(s.write(t, q, wrong, 6), KSTAGE_INVALID_ARGUMENT, "float");
  // Rows that are not the query's.
  Kokkos::View<float* [3], Kokkos::HostSpace> short_rows("short", 3);
  CPP_FAILS(s.write(t, q, short_rows, 6), KSTAGE_INVALID_ARGUMENT, "3");
  // A stale query.
  kstage::Query stale;
  {
    kstage::Query tmp = s.query(ids);
    const kstage_query_t h = tmp.handle();
    tmp.reset();
    // Not constructible from a raw handle on purpose; check the C call says stale.
    uint64_t n = 0;
    REQUIRE(kstage_query_count(s.handle(), h, &n) == KSTAGE_INVALID_HANDLE);
  }
  CPP_FAILS(s.write(t, stale, v, 6), KSTAGE_INVALID_HANDLE, "query");

  // The non-throwing overloads: a Status and an empty object.
  kstage::Status st;
  kstage::Op op = s.write(t, q, v, 5, {}, st);
  REQUIRE(!op);
  REQUIRE(st.code() == KSTAGE_WRITE_FLOOR_VIOLATION);
  REQUIRE(!st.message().empty());
  REQUIRE(st.to_string().find("KSTAGE_WRITE_FLOOR_VIOLATION: ") == 0);
  kstage::Status st2;
  kstage::Read r = s.read(q, {}, {}, st2);
  REQUIRE(!r);
  REQUIRE(st2.code() == KSTAGE_INVALID_ARGUMENT);
  kstage::Status ok;
  REQUIRE(s.write_floor(t, ok) == 5);
  REQUIRE(ok.ok());
  // A success resets a Status that held a failure.
  REQUIRE(s.write_floor(t, st) == 5);
  REQUIRE(st.ok());
  REQUIRE(st.message().empty());

  // Nothing above changed the sealed state.
  std::vector<float> expect;
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) expect.push_back(float(10 * i + c));
  REQUIRE(read_floats(s, q, t) == expect);
  REQUIRE(s.write_floor(t) == 5);
}

TEST_CASE("cpp: writes take Views of rank 1 to 3 in any layout; trailing extents fold into lanes",
          "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/w/p", 6);
  kstage::Query q = s.query(ids);

  // Rank 1: one lane.
  Kokkos::View<float*, Kokkos::HostSpace> mass("mass", 6);
  for (int i = 0; i < 6; ++i) mass(i) = 0.5f * float(i);
  // Rank 2, LayoutRight, a fixed extent: float32 x 3.
  Kokkos::View<float* [3], Kokkos::HostSpace> pos("pos", 6);
  // Rank 2, LayoutLeft (column-major: strided rows): float32 x 3 all the same.
  Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace> vel("vel", 6, 3);
  // Rank 3: 2 x 2 matrices, lanes 4.
  Kokkos::View<float** [2], Kokkos::HostSpace> m("m", 6, 2);
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) {
      pos(i, c) = float(100 * i + c);
      vel(i, c) = -float(100 * i + c);
    }
  for (int i = 0; i < 6; ++i)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 2; ++c) m(i, r, c) = float(i * 4 + r * 2 + c);
  // A strided subview: every other row of a bigger View.
  Kokkos::View<float* [3], Kokkos::HostSpace> big("big", 12);
  for (int i = 0; i < 12; ++i)
    for (int c = 0; c < 3; ++c) big(i, c) = float(1000 * i + c);
  Kokkos::View<float**, Kokkos::LayoutStride, Kokkos::HostSpace> strided(
      big.data(), Kokkos::LayoutStride(6, 6, 3, 1));

  const kstage_token_t tm = s.token("mass"), tp = s.token("pos"), tv = s.token("vel"),
                       tx = s.token("m"), ts = s.token("strided");
  kstage::WriteOptions point;
  point.semantic = KSTAGE_SEMANTIC_POINT;
  s.write(tm, q, mass, 1).wait();
  s.write(tp, q, pos, 1, point).wait();
  s.write(tv, q, vel, 1).wait();
  s.write(tx, q, m, 1).wait();
  s.write(ts, q, strided, 1).wait();
  s.seal(1);

  std::vector<float> want_mass, want_pos, want_vel, want_m, want_strided;
  for (int i = 0; i < 6; ++i) {
    want_mass.push_back(0.5f * float(i));
    for (int c = 0; c < 3; ++c) {
      want_pos.push_back(float(100 * i + c));
      want_vel.push_back(-float(100 * i + c));
      want_strided.push_back(float(1000 * (2 * i) + c));
    }
    for (int k = 0; k < 4; ++k) want_m.push_back(float(i * 4 + k));
  }
  REQUIRE(read_floats(s, q, tm) == want_mass);
  REQUIRE(read_floats(s, q, tp) == want_pos);
  REQUIRE(read_floats(s, q, tv) == want_vel);
  REQUIRE(read_floats(s, q, tx) == want_m);
  REQUIRE(read_floats(s, q, ts) == want_strided);
  for (auto& g : s.read(q, {tp, tx}, host_read())) {
    REQUIRE(g.dtype().lanes == (g.attribute() == tp ? 3 : 4));
    REQUIRE(g.semantic() == (g.attribute() == tp ? KSTAGE_SEMANTIC_POINT : KSTAGE_SEMANTIC_NONE));
    REQUIRE(g.ordinal() == 1);
  }
  // dtype_of: the table the bridge uses, with array extents as lanes.
  STATIC_REQUIRE(kstage::dtype_of<float[3]>().lanes == 3);
  STATIC_REQUIRE(kstage::dtype_of<double[4][4]>().lanes == 16);
  STATIC_REQUIRE(kstage::dtype_of<double[4][4]>().bits == 64);
  STATIC_REQUIRE(kstage::dtype_of<const uint8_t>().code == kDLUInt);
}

TEST_CASE("cpp: index_map, mask, count and mode options", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/o/p", 5);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> zero("zero", 5);
  kstage::WriteOptions insert;
  insert.mode = KSTAGE_PRIM_MODE_INSERT;
  s.write(t, q, zero, 1, insert).wait();
  s.seal(1);
  CPP_FAILS(s.write(t, q, zero, 2, insert), KSTAGE_ALREADY_EXISTS, "/o/p");

  // index_map from a View: logical element i takes source row map(i).
  Kokkos::View<float*, Kokkos::HostSpace> src("src", 2);
  src(0) = 7.f;
  src(1) = 9.f;
  Kokkos::View<uint32_t*, Kokkos::HostSpace> map("map", 3);
  map(0) = 1;
  map(1) = 0;
  map(2) = 1;
  kstage::WriteOptions gather;
  gather.index_map = map;
  gather.count = 3;
  s.write(t, q, src, 2, gather).wait();
  s.seal(2);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{9, 7, 9, 0, 0});

  // mask from a std::vector: elements 1 and 4 of all five.
  Kokkos::View<float*, Kokkos::HostSpace> five("five", 5);
  for (int i = 0; i < 5; ++i) five(i) = float(50 + i);
  std::vector<uint64_t> bits{(1u << 1) | (1u << 4)};
  kstage::WriteOptions masked;
  masked.mask = bits;
  masked.count = 5;
  masked.mode = KSTAGE_PRIM_MODE_UPDATE;
  s.write(t, q, five, 3, masked).wait();
  s.seal(3);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{9, 51, 9, 0, 54});

  // count alone: the leading prims.
  kstage::WriteOptions lead;
  lead.count = 2;
  Kokkos::View<float*, Kokkos::HostSpace> two("two", 2);
  two(0) = -1.f;
  two(1) = -2.f;
  s.write(t, q, two, 4, lead).wait();
  s.seal(4);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{-1, -2, 9, 0, 54});

  // Two selections are refused before the C API, naming the options; bad entries are the C
  // API's errors.
  kstage::WriteOptions both = gather;
  both.mask = bits;
  CPP_FAILS(s.write(t, q, src, 5, both), KSTAGE_INVALID_ARGUMENT,
            "options.index_map and options.mask are both set");
  map(2) = 2;  // out of range
  CPP_FAILS(s.write(t, q, src, 5, gather), KSTAGE_INVALID_ARGUMENT, "index_map");
  REQUIRE(read_floats(s, q, t) == std::vector<float>{-1, -2, 9, 0, 54});
}

// WriteOptions::attribute_mode and MapOptions::attribute_mode, Stage::attribute_schemas: a name
// held in two schemas, a prim's schema replaced with FORCE (kstage_attribute_mode_t).
TEST_CASE("cpp: attribute_mode FORCE replaces a prim's schema; attribute_schemas lists them",
          "[cpp][schemas]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/sch/p", 2);
  kstage::Query a = s.query({ids[0]});
  kstage::Query b = s.query({ids[1]});
  const kstage_token_t m = s.token("m");
  Kokkos::View<float*, Kokkos::HostSpace> f("f", 1);
  Kokkos::View<double*, Kokkos::HostSpace> d("d", 1);
  s.write(m, a, f, 1).wait();
  s.write(m, b, d, 1).wait();  // another prim: another schema, a column of its own
  s.seal(1);
  std::vector<kstage_attribute_info_t> schemas = s.attribute_schemas(m);
  REQUIRE(schemas.size() == 2);
  REQUIRE(schemas[0].dtype.bits == 32);
  REQUIRE(schemas[1].dtype.bits == 64);
  CPP_FAILS(s.write(m, a, d, 2), KSTAGE_INVALID_ARGUMENT, "holds 'm' as float32 NONE");
  kstage::WriteOptions force;
  force.attribute_mode = KSTAGE_ATTRIBUTE_MODE_FORCE;
  s.write(m, a, d, 2, force).wait();
  s.seal(2);
  schemas = s.attribute_schemas(m);
  REQUIRE(schemas[0].prim_count == 0);
  REQUIRE(schemas[1].prim_count == 2);
  REQUIRE(s.attribute_info(m).schema_count == 2);
  // A map with FORCE back to float32 (MapOptions::attribute_mode).
  kstage::MapOptions mo;
  mo.attribute_mode = KSTAGE_ATTRIBUTE_MODE_FORCE;
  kstage::Map map = s.map(b, m, 3, kstage::dtype_of<float>(), mo);
  for (auto& g : map) {
    const float five = 5.f;
    REQUIRE(g.prims().size() == 1);
    kstage_test::host_write(g.tensor(0).data, &five, sizeof(float), g.tensor(0).device);
  }
  map.commit().wait();
  s.seal(3);
  REQUIRE(s.attribute_schemas(m)[0].prim_count == 1);
}

// WriteOptions::index_map64 and device_index_map64: int64 index maps (torch's, most codes'),
// from a View or a span, handed to the C API as index_map64.
TEST_CASE("cpp: index_map64 and device_index_map64 take int64 index maps", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/dm64/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> src("src", 3);
  for (int i = 0; i < 3; ++i) src(i) = float(10 * (i + 1));
  Kokkos::View<int64_t*, Kokkos::HostSpace> host_map("host_map", 4);
  const int64_t entries[4] = {2, 2, 0, 1};
  for (int i = 0; i < 4; ++i) host_map(i) = entries[i];
  kstage::WriteOptions o;
  o.index_map64 = host_map;
  o.count = 4;
  s.write(t, q, src, 1, o).wait();
  s.seal(1);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{30, 30, 10, 20});
  kstage::WriteOptions through_device_form;
  through_device_form.device_index_map64 = host_map;  // a HostSpace View: host memory
  through_device_form.count = 4;
  host_map(0) = 0;
  s.write(t, q, src, 2, through_device_form).wait();
  s.seal(2);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{10, 30, 10, 20});
  host_map(3) = -1;
  CPP_FAILS(s.write(t, q, src, 3, o), KSTAGE_INVALID_ARGUMENT, "index_map64[3] = -1 references");
  // Two selections, and a span shorter than count, are refused before the C API.
  kstage::WriteOptions both = o;
  const std::vector<uint32_t> narrow{0, 1, 2, 0};
  both.index_map = narrow;
  CPP_FAILS(s.write(t, q, src, 3, both), KSTAGE_INVALID_ARGUMENT,
            "options.index_map and options.index_map64 are both set");
  both.device_index_map64 = host_map;
  CPP_FAILS(s.write(t, q, src, 3, both), KSTAGE_INVALID_ARGUMENT,
            "options.index_map and options.index_map64 and options.device_index_map64 are all set");
  kstage::WriteOptions longer = o;
  longer.count = 5;
  CPP_FAILS(s.write(t, q, src, 3, longer), KSTAGE_INVALID_ARGUMENT,
            "options.index_map64 has 4 entries but options.count is 5");
  longer = through_device_form;
  longer.count = 5;
  CPP_FAILS(s.write(t, q, src, 3, longer), KSTAGE_INVALID_ARGUMENT,
            "options.device_index_map64 has 4 entries but options.count is 5");
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
  if (kOnDevice) {
    float* dsrc =
        static_cast<float*>(kstage_emulated_malloc(kResidency.device_id, 3 * sizeof(float)));
    int64_t* dmap = static_cast<int64_t*>(kstage_emulated_malloc(kResidency.device_id, 32));
    const float values[3] = {1, 2, 3};
    const int64_t good[4] = {1, 0, 2, 2}, bad[4] = {0, -7, 1, 0};
    kstage_emulated_memcpy(dsrc, values, sizeof values);
    kstage_emulated_memcpy(dmap, good, sizeof good);
    int64_t shape[1] = {3};
    const DLTensor dt =
        kstage_test::tensor(dsrc, kstage_test::f32(), 1, shape, nullptr, kResidency);
    kstage::WriteOptions dev;
    dev.device_index_map64 = kstage::device_span<const int64_t>(dmap, 4, kResidency);
    dev.count = 4;
    s.write(t, q, dt, 3, dev).wait();
    s.seal(3);
    REQUIRE(read_floats(s, q, t) == std::vector<float>{2, 1, 3, 3});
    kstage_emulated_memcpy(dmap, bad, sizeof bad);
    CPP_FAILS(s.write(t, q, dt, 4, dev).wait(), KSTAGE_INVALID_ARGUMENT,
              "index_map64[1] = -7 references");
    s.seal(4);
    REQUIRE(read_floats(s, q, t) == std::vector<float>{2, 1, 3, 3});
    kstage_emulated_free(dmap);
    kstage_emulated_free(dsrc);
  }
#endif
}

// WriteOptions::device_index_map: a device_span (pointer, count, DLDevice, or a View) handed to
// the C API as index_map with its selection_device. From a HostSpace View it is host memory (the
// host path); on the emulated device, device memory read in place and checked on the device.
TEST_CASE("cpp: device_index_map takes an index map where it lives", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/dm/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> src("src", 3);
  for (int i = 0; i < 3; ++i) src(i) = float(10 * (i + 1));
  Kokkos::View<uint32_t*, Kokkos::HostSpace> host_map("host_map", 4);
  const uint32_t entries[4] = {2, 2, 0, 1};
  for (int i = 0; i < 4; ++i) host_map(i) = entries[i];
  kstage::WriteOptions o;
  o.device_index_map = host_map;
  o.count = 4;
  REQUIRE(o.device_index_map.device().device_type == kDLCPU);
  s.write(t, q, src, 1, o).wait();
  s.seal(1);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{30, 30, 10, 20});
  // Both forms at once, and a span shorter than count, are refused before the C API.
  kstage::WriteOptions both = o;
  both.index_map = host_map;
  CPP_FAILS(s.write(t, q, src, 2, both), KSTAGE_INVALID_ARGUMENT, "both set");
  kstage::WriteOptions longer = o;
  longer.count = 5;
  CPP_FAILS(s.write(t, q, src, 2, longer), KSTAGE_INVALID_ARGUMENT,
            "options.device_index_map has 4 entries but options.count is 5");
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
  if (kOnDevice) {
    // Device memory: the source and the map on the column's device, read in place.
    float* dsrc =
        static_cast<float*>(kstage_emulated_malloc(kResidency.device_id, 3 * sizeof(float)));
    uint32_t* dmap = static_cast<uint32_t*>(kstage_emulated_malloc(kResidency.device_id, 16));
    const float values[3] = {1, 2, 3};
    const uint32_t good[4] = {1, 0, 2, 2}, bad[4] = {0, 3, 1, 0};
    kstage_emulated_memcpy(dsrc, values, sizeof values);
    kstage_emulated_memcpy(dmap, good, sizeof good);
    int64_t shape[1] = {3};
    const DLTensor dt =
        kstage_test::tensor(dsrc, kstage_test::f32(), 1, shape, nullptr, kResidency);
    kstage::WriteOptions dev;
    dev.device_index_map = kstage::device_span<const uint32_t>(dmap, 4, kResidency);
    dev.count = 4;
    uint64_t uploads_before = 0, uploads_after = 0;
    KS_OK(kstage_transfer_counts(nullptr, nullptr, &uploads_before));
    s.write(t, q, dt, 2, dev).wait();
    KS_OK(kstage_transfer_counts(nullptr, nullptr, &uploads_after));
    REQUIRE(uploads_after == uploads_before);
    s.seal(2);
    REQUIRE(read_floats(s, q, t) == std::vector<float>{2, 1, 3, 3});
    // A bad entry: the call succeeds, the op fails, the write is never applied.
    kstage_emulated_memcpy(dmap, bad, sizeof bad);
    kstage::Op op = s.write(t, q, dt, 3, dev);
    CPP_FAILS(op.wait(), KSTAGE_INVALID_ARGUMENT, "index_map[1] = 3");
    s.seal(3);
    REQUIRE(read_floats(s, q, t) == std::vector<float>{2, 1, 3, 3});
    // A device mask: elements 0 and 3.
    uint64_t* dmask = static_cast<uint64_t*>(kstage_emulated_malloc(kResidency.device_id, 8));
    const uint64_t bits = 0b1001;
    kstage_emulated_memcpy(dmask, &bits, sizeof bits);
    int64_t four[1] = {4};
    const float five[4] = {5, 6, 7, 8};
    float* dfour = static_cast<float*>(kstage_emulated_malloc(kResidency.device_id, sizeof five));
    kstage_emulated_memcpy(dfour, five, sizeof five);
    const DLTensor d4 =
        kstage_test::tensor(dfour, kstage_test::f32(), 1, four, nullptr, kResidency);
    kstage::WriteOptions masked;
    masked.device_mask = kstage::device_span<const uint64_t>(dmask, 1, kResidency);
    masked.count = 4;
    s.write(t, q, d4, 4, masked).wait();
    s.seal(4);
    REQUIRE(read_floats(s, q, t) == std::vector<float>{5, 1, 3, 8});
    kstage::WriteOptions both_masks = masked;
    const std::vector<uint64_t> host_bits{bits};
    both_masks.mask = host_bits;
    CPP_FAILS(s.write(t, q, d4, 5, both_masks), KSTAGE_INVALID_ARGUMENT,
              "options.mask and options.device_mask are both set");
    kstage_emulated_free(dfour);
    kstage_emulated_free(dmask);
    kstage_emulated_free(dmap);
    kstage_emulated_free(dsrc);
  }
#endif
  // A read asking for device index maps: on a device column, the group's map is device memory
  // (labelled with the group's device); on a host column, host memory.
  std::vector<kstage_path_t> reversed(ids.rbegin(), ids.rend());
  kstage::Query rq = s.query(reversed);
  kstage::ReadOptions ro;
  ro.device_index_map = true;
  size_t groups = 0;
  for (auto& g : s.read(rq, {t}, ro)) {
    ++groups;
    const kstage::device_span<const uint32_t> m = g.device_index_map();
    REQUIRE(m.size() == 4);
    REQUIRE(m.device().device_type == (kOnDevice ? kResidency.device_type : kDLCPU));
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
    if (kOnDevice) {
      REQUIRE(kstage_emulated_ordinal_of(m.data()) == kResidency.device_id);
      continue;
    }
#endif
    REQUIRE(std::vector<uint32_t>(m.data(), m.data() + 4) == std::vector<uint32_t>{3, 2, 1, 0});
  }
  REQUIRE(groups == 1);
}

TEST_CASE("cpp: a batch writes several attributes as one op", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/b/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t a = s.token("a"), b = s.token("b");
  Kokkos::View<float*, Kokkos::HostSpace> va("a", 3);
  Kokkos::View<float* [2], Kokkos::HostSpace> vb("b", 3);
  for (int i = 0; i < 3; ++i) {
    va(i) = float(i);
    vb(i, 0) = float(10 + i);
    vb(i, 1) = float(20 + i);
  }
  kstage::WriteBatch batch(KSTAGE_PRIM_MODE_INSERT);
  kstage::WriteOptions vec;
  vec.semantic = KSTAGE_SEMANTIC_VECTOR;
  batch.add(a, va).add(b, vb, vec);
  REQUIRE(batch.size() == 2);
  s.write(q, batch, 1).wait();
  s.seal(1);
  REQUIRE(read_floats(s, q, a) == std::vector<float>{0, 1, 2});
  REQUIRE(read_floats(s, q, b) == std::vector<float>{10, 20, 11, 21, 12, 22});
  // All or nothing: a batch with one bad entry writes neither.
  Kokkos::View<float*, Kokkos::HostSpace> bad("bad", 2);
  kstage::WriteBatch mixed(KSTAGE_PRIM_MODE_UPSERT);
  mixed.add(a, va).add(b, bad);
  CPP_FAILS(s.write(q, mixed, 2), KSTAGE_INVALID_ARGUMENT, "data[1] ('b')");
  s.seal(2);
  REQUIRE(read_floats(s, q, a) == std::vector<float>{0, 1, 2});
}

TEST_CASE("cpp: ragged attributes from a range of Views or a packed View with row counts",
          "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/r/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("neighbours"), u = s.token("packed");

  std::vector<Kokkos::View<int32_t*, Kokkos::HostSpace>> rows;
  for (int i = 0; i < 3; ++i) {
    Kokkos::View<int32_t*, Kokkos::HostSpace> r("row", size_t(i == 1 ? 0 : i + 2));
    for (size_t k = 0; k < r.extent(0); ++k) r(k) = int32_t(10 * i + int(k));
    rows.push_back(r);
  }
  s.write_ragged(t, q, rows, 1).wait();
  // Packed: float32 x 2 entries, rows of 1, 3 and 0 entries.
  Kokkos::View<float* [2], Kokkos::HostSpace> packed("packed", 4);
  for (int i = 0; i < 4; ++i) {
    packed(i, 0) = float(i);
    packed(i, 1) = float(-i);
  }
  const std::vector<uint64_t> counts{1, 3, 0};
  s.write_ragged(u, q, packed, counts, 1).wait();
  s.seal(1);

  std::vector<std::vector<int32_t>> got;
  std::vector<std::vector<float>> got_packed;
  kstage::ReadOptions o = host_read();
  o.compact = true;
  for (auto& g : s.read(q, {t, u}, o)) {
    REQUIRE(g.is_array());
    REQUIRE(g.tensor_count() == 3);
    for (uint64_t i = 0; i < 3; ++i) {
      if (g.attribute() == t) {
        auto v = g.view<const int32_t*>(i);
        got.emplace_back(v.data(), v.data() + v.extent(0));
      } else {
        auto v = g.view<const float* [2]>(i);
        got_packed.emplace_back(v.data(), v.data() + 2 * v.extent(0));
      }
    }
  }
  REQUIRE(got == std::vector<std::vector<int32_t>>{{0, 1}, {}, {20, 21, 22, 23}});
  REQUIRE(got_packed == std::vector<std::vector<float>>{{0, 0}, {1, -1, 2, -2, 3, -3}, {}});
  // Row counts that are not the View's rows.
  const std::vector<uint64_t> wrong{1, 1};
  CPP_FAILS(s.write_ragged(u, q, packed, wrong, 2), KSTAGE_INVALID_ARGUMENT,
            "row_counts add up to 2");
}

TEST_CASE("cpp: read Views alias the group's memory; compact reads are in prim order",
          "[cpp][host_bridge]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/v/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float* [3], Kokkos::HostSpace> v("v", 4);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) v(i, c) = float(10 * i + c);
  s.write(t, q, v, 1).wait();
  s.seal(1);
  // Reverse order: a zero-copy read maps each prim to its row.
  kstage::Query rev = s.query({ids[3], ids[2], ids[1], ids[0]});
  const float* storage = nullptr;
  for (auto& g : s.read(rev, {t})) {
    auto view = g.view<const float* [3]>(0);
    REQUIRE(view.data() == static_cast<const float*>(g.tensor(0).data));
    REQUIRE(view.extent(0) == 4);
    REQUIRE(g.index_map().size() == 4);
    for (size_t i = 0; i < 4; ++i) REQUIRE(view(g.index_map()[i], 0) == float(10 * (3 - int(i))));
    storage = view.data();
  }
  // The same column storage again (zero-copy), as long as nothing was sealed.
  for (auto& g : s.read(q, {t})) REQUIRE(g.view<const float* [3]>(0).data() == storage);
  // max_group_prims: windows of that storage, each with its own prims.
  kstage::ReadOptions windows = host_read();
  windows.max_group_prims = 3;
  std::vector<uint64_t> sizes;
  for (auto& g : s.read(q, {t}, windows)) {
    auto view = g.view<const float* [3]>(0);
    REQUIRE(view.data() == storage + 3 * 3 * sizes.size());
    REQUIRE(g.prims()[0] == ids[3 * sizes.size()]);
    sizes.push_back(view.extent(0));
  }
  REQUIRE(sizes == std::vector<uint64_t>{3, 1});
  // Compact: the group's own buffer, rows in prim order, no index map.
  kstage::ReadOptions compact;
  compact.compact = true;
  for (auto& g : s.read(rev, {t}, compact)) {
    auto view = g.view<const float* [3]>(0);
    REQUIRE(view.data() != storage);
    REQUIRE(g.index_map().empty());
    for (int i = 0; i < 4; ++i) REQUIRE(view(i, 1) == float(10 * (3 - i) + 1));
  }
  // LayoutStride and a dynamic trailing extent see the same memory.
  for (auto& g : s.read(q, {t})) {
    auto strided = g.view<const float**, Kokkos::HostSpace, Kokkos::LayoutStride>(0);
    REQUIRE(strided.data() == storage);
    REQUIRE(strided.extent(1) == 3);
    REQUIRE(strided.stride(0) == 3);
  }
}

TEST_CASE("cpp: a View type that does not fit the tensor is refused, naming both", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/m/p", 2);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float* [3], Kokkos::HostSpace> v("v", 2);
  s.write(t, q, v, 1).wait();
  s.seal(1);
  for (auto& g : s.read(q, {t}, host_read())) {
    CPP_FAILS(g.view<const double* [3]>(0), KSTAGE_INVALID_ARGUMENT, "float32x3");
    CPP_FAILS(g.view<const double* [3]>(0), KSTAGE_INVALID_ARGUMENT, "float64");
    CPP_FAILS(g.view<const float*>(0), KSTAGE_INVALID_ARGUMENT, "needs a View of rank 2, not 1");
    CPP_FAILS((g.view<const float* [4]>(0)), KSTAGE_INVALID_ARGUMENT, "fixes it at 4");
    CPP_FAILS((g.view<const float**, Kokkos::HostSpace, Kokkos::LayoutLeft>(0)),
              KSTAGE_INVALID_ARGUMENT, "LayoutRight");
    CPP_FAILS(g.view<const float* [3]>(1), KSTAGE_INVALID_ARGUMENT, "tensor 1 of a group with 1");
    // The non-throwing form: an empty View and a Status.
    kstage::Status st;
    auto empty = g.view<const int32_t* [3]>(0, st);
    REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
    REQUIRE(empty.extent(0) == 0);
    REQUIRE(empty.data() == nullptr);
  }
  if (kOnDevice) {
    // Device data is not host memory: viewing it in HostSpace is refused, never copied.
    for (auto& g : s.read(q, {t}))
      CPP_FAILS(g.view<const float* [3]>(0), KSTAGE_NOT_SUPPORTED,
                "cannot be viewed in Kokkos::HostSpace");
  }
}

TEST_CASE(
    "cpp: write_managed hands the View to the stage: adopted without a copy, never written "
    "behind the caller's back",
    "[cpp][host_adoption]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/a/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float* [3], Kokkos::HostSpace> mine("mine", 4);
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) mine(i, c) = float(i);
  // The caller keeps a reference: adopted read-only.
  s.write_managed(t, q, mine, 1).wait();
  s.seal(1);
  REQUIRE(mine.use_count() == 2);  // the caller's and the stage's
  for (auto& g : s.read(q, {t})) REQUIRE(g.view<const float* [3]>(0).data() == mine.data());
  // A sparse write later copies the column first: the caller's memory stays as it was.
  Kokkos::View<float* [3], Kokkos::HostSpace> one("one", 1);
  one(0, 0) = one(0, 1) = one(0, 2) = 42.f;
  kstage::Query first = s.query({ids[0]});
  s.write(t, first, one, 2).wait();
  s.seal(2);
  REQUIRE(mine(0, 0) == 0.f);
  REQUIRE(read_floats(s, q, t)[0] == 42.f);

  // Moved in: adopted just the same (with Kokkos 4, whose moves leave `handed`
  // empty, the stage holds the last reference and may write into it in place).
  const kstage_token_t u = s.token("u");
  Kokkos::View<float* [3], Kokkos::HostSpace> handed("handed", 4);
  const float* where = handed.data();
  s.write_managed(u, q, std::move(handed), 3).wait();
  s.seal(3);
  for (auto& g : s.read(q, {u})) REQUIRE(g.view<const float* [3]>(0).data() == where);

  // An unmanaged View owns nothing to hand over.
  float raw[3] = {1, 2, 3};
  Kokkos::View<float* [3], Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> unmanaged(
      raw, 1);
  CPP_FAILS(s.write_managed(t, first, unmanaged, 4), KSTAGE_INVALID_ARGUMENT, "unmanaged");
  // A rejected managed write still lets the View go (the deleter runs once).
  Kokkos::View<float* [3], Kokkos::HostSpace> refused("refused", 4);
  CPP_FAILS(s.write_managed(t, q, refused, 1), KSTAGE_WRITE_FLOOR_VIOLATION, "floor");
  REQUIRE(refused.use_count() == 1);
}

TEST_CASE("cpp: write_managed on any residency gives the same values", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/mm/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 3);
  for (int i = 0; i < 3; ++i) v(i) = float(i + 1);
  auto keep = v;
  s.write_managed(t, q, std::move(v), 1).wait();
  s.seal(1);
  REQUIRE(read_floats(s, q, t) == std::vector<float>{1, 2, 3});
  s.reset();  // the stage lets go of what it adopted
  // Kokkos 4 moves Views (`v` holds no reference now; from 4.7 its data() may still be set);
  // Kokkos 3's move copies (`v` still holds one).
  REQUIRE(keep.use_count() == (v.use_count() == 0 ? 1 : 2));
}

TEST_CASE("cpp: maps hand out writable Views; commit unmaps, destruction abandons", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/map/p", 6);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  kstage::MapOptions o;
  o.residency = kResidency;
  o.max_group_prims = 4;
  o.semantic = KSTAGE_SEMANTIC_POINT;
  {
    kstage::Map m = s.map(q, t, 1, kstage::dtype_of<float[3]>(), o);
    size_t groups = 0, filled = 0;
    for (auto& g : m) {
      ++groups;
      REQUIRE(g.ordinal() == 1);
      REQUIRE(g.dtype().lanes == 3);
      std::vector<float> rows(g.tensor(0).shape[0] * 3);
      for (size_t i = 0; i < g.prims().size(); ++i) {
        const uint32_t row = g.index_map().empty() ? uint32_t(i) : g.index_map()[i];
        const size_t prim = size_t(std::find(ids.begin(), ids.end(), g.prims()[i]) - ids.begin());
        for (int c = 0; c < 3; ++c) rows[3 * row + c] = float(10 * prim + c);
      }
      if (kOnDevice) {
        kstage_test::host_write(g.tensor(0).data, rows.data(), rows.size() * sizeof(float),
                                g.tensor(0).device);
        CPP_FAILS(g.view<float* [3]>(0), KSTAGE_NOT_SUPPORTED, "cannot be viewed");
      } else {
        auto view = g.view<float* [3]>(0);
        for (size_t r = 0; r < view.extent(0); ++r)
          for (int c = 0; c < 3; ++c) view(r, c) = rows[3 * r + c];
      }
      filled += g.prims().size();
    }
    REQUIRE(groups == 2);
    REQUIRE(filled == 6);
    m.commit().wait();
    REQUIRE(!m);
  }
  s.seal(1);
  std::vector<float> want;
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) want.push_back(float(10 * i + c));
  REQUIRE(read_floats(s, q, t) == want);

  // A map destroyed without commit writes nothing; its handle is released.
  kstage_map_t abandoned = 0;
  {
    kstage::Map m = s.map(q, t, 2, kstage::dtype_of<float[3]>(), o);
    abandoned = m.handle();
    kstage::MapGroup g;
    REQUIRE(m.next(g));
    kstage_test::host_write(g.tensor(0).data,
                            std::vector<float>(g.tensor(0).shape[0] * 3, -1.f).data(),
                            size_t(g.tensor(0).shape[0]) * 3 * sizeof(float), g.tensor(0).device);
  }
  REQUIRE(kstage_release_map(s.handle(), abandoned) == KSTAGE_INVALID_HANDLE);
  // ... as one abandoned after its producer (kstage_release_map_after): a refused sync leaves it
  // open, {0, 0} (the producer's work done) releases it.
  {
    kstage::Map m = s.map(q, t, 2, kstage::dtype_of<float[3]>(), o);
    kstage::Status st;
    const kstage_device_sync_t bad =
        kstage_test::kOnDevice ? kstage_device_sync_t{0, 0xdead1} : kstage_device_sync_t{7, 0};
    REQUIRE_FALSE(m.abandon_after(bad, st));
    REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
    REQUIRE(bool(m));
    abandoned = m.handle();
    m.abandon_after({0, 0});
    REQUIRE(!m);
  }
  REQUIRE(kstage_release_map(s.handle(), abandoned) == KSTAGE_INVALID_HANDLE);
  s.seal(2);
  REQUIRE(read_floats(s, q, t) == want);
  // A group committed on its own.
  {
    kstage::MapOptions whole = o;
    whole.max_group_prims = 0;
    whole.mode = KSTAGE_PRIM_MODE_UPDATE;
    kstage::Map m = s.map(q, t, 3, kstage::dtype_of<float[3]>(), whole);
    kstage::MapGroup g;
    REQUIRE(m.next(g));
    std::vector<float> ones(size_t(g.tensor(0).shape[0]) * 3, 1.f);
    kstage_test::host_write(g.tensor(0).data, ones.data(), ones.size() * sizeof(float),
                            g.tensor(0).device);
    g.commit().wait();
    kstage::MapGroup none;
    REQUIRE(!m.next(none));
  }
  s.seal(3);
  REQUIRE(read_floats(s, q, t) == std::vector<float>(18, 1.f));
  // Map errors are the C API's.
  CPP_FAILS(s.map(q, t, 3, kstage::dtype_of<float[3]>(), o), KSTAGE_WRITE_FLOOR_VIOLATION, "floor");
  CPP_FAILS(s.map(q, t, 4, kstage::dtype_of<double[3]>(), o), KSTAGE_INVALID_ARGUMENT, "float");
}

TEST_CASE("cpp: an exception thrown while iterating releases every handle", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/x/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t a = s.token("a"), b = s.token("b");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 4);
  s.write(a, q, v, 1).wait();
  s.write(b, q, v, 1).wait();
  s.seal(1);

  kstage_read_t read = 0;
  kstage_group_t group = 0;
  try {
    kstage::Read r = s.read(q, {a, b});
    read = r.handle();
    for (auto& g : r) {
      group = g.handle();
      throw std::runtime_error("consumer failed");
    }
  } catch (const std::runtime_error&) {
  }
  REQUIRE(read != 0);
  REQUIRE(group != 0);
  REQUIRE(kstage_release_group(s.handle(), group) == KSTAGE_INVALID_HANDLE);
  REQUIRE(kstage_release_read(s.handle(), read) == KSTAGE_INVALID_HANDLE);

  kstage_map_t map = 0;
  try {
    kstage::MapOptions o;
    o.residency = kResidency;
    kstage::Map m = s.map(q, a, 2, kstage::dtype_of<float>(), o);
    map = m.handle();
    for (auto& g : m) {
      (void)g;
      throw std::runtime_error("producer failed");
    }
  } catch (const std::runtime_error&) {
  }
  REQUIRE(kstage_release_map(s.handle(), map) == KSTAGE_INVALID_HANDLE);
  // The abandoned map wrote nothing, and ordinal 2 is still free.
  s.write(a, q, v, 2).wait();
  s.seal(2);
  REQUIRE(s.write_floor(a) == 2);
}

TEST_CASE("cpp: change ranges, deletes and tombstones", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/c/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 3);
  s.write(t, q, v, 1).wait();
  s.seal(1);
  kstage::Query last = s.query({ids[2]});
  s.delete_prims(last, 2).wait();
  kstage::Query first = s.query({ids[0]});
  Kokkos::View<float*, Kokkos::HostSpace> one("one", 1);
  one(0) = 5.f;
  s.write(t, first, one, 3).wait();
  s.seal(3);
  size_t tombstones = 0, changed = 0;
  for (auto& g : s.read(q, {t}, host_read(kstage::ReadOptions::changes(2, 3)))) {
    if (g.is_tombstone()) {
      ++tombstones;
      REQUIRE(g.prims().size() == 1);
      REQUIRE(g.prims()[0] == ids[2]);
      REQUIRE(g.tensor_count() == 0);
    } else {
      changed += g.prims().size();
      REQUIRE(g.prims()[0] == ids[0]);
    }
  }
  REQUIRE(tombstones == 1);
  REQUIRE(changed == 1);
  // delete_attributes with a list.
  const kstage_token_t u = s.token("u");
  s.write(u, q, v, 4).wait();
  s.delete_attributes(first, {u}, 5).wait();
  s.seal(5);
  kstage::Filter f;
  const kstage_token_t has[] = {u};
  f.has = {has, 1};
  REQUIRE(s.query(f).count() == 2);
}

TEST_CASE("cpp: an Op keeps its write's Views until the work is done", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/k/p", 1000);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  auto filled = [](float v) {
    Kokkos::View<float* [3], Kokkos::HostSpace> x("x", 1000);
    Kokkos::deep_copy(x, v);
    return x;
  };
  // A temporary View: on a device column the copy runs after the call returns.
  kstage::Op op = s.write(t, q, filled(1.f), 1);
  REQUIRE(op.wait());
  s.seal(1);
  REQUIRE(read_floats(s, q, t) == std::vector<float>(3000, 1.f));
  // An Op dropped before its work is done waits for it first.
  s.write(t, q, filled(2.f), 2).reset();
  { kstage::Op dropped = s.write(t, q, filled(3.f), 3); }
  kstage::WriteBatch b;
  b.add(t, filled(4.f));
  { kstage::Op batch = s.write(q, b, 4); }
  s.seal(4);
  REQUIRE(read_floats(s, q, t) == std::vector<float>(3000, 4.f));
  // The View the Op kept is let go once the work is done.
  auto mine = filled(5.f);
  kstage::Op kept = s.write(t, q, mine, 5);
  REQUIRE(kept.wait());
  REQUIRE(mine.use_count() == 1);
}

TEST_CASE("cpp: option spans never bind to temporaries; argument lists take braced lists",
          "[cpp]") {
  STATIC_REQUIRE(!std::is_constructible_v<kstage::span<const uint32_t>, std::vector<uint32_t>&&>);
  STATIC_REQUIRE(
      !std::is_constructible_v<kstage::span<const uint32_t>, std::initializer_list<uint32_t>>);
  STATIC_REQUIRE(std::is_constructible_v<kstage::span<const uint32_t>, std::vector<uint32_t>&>);
  // A View temporary too (its memory goes with it); a named View is fine.
  using HostIds = Kokkos::View<uint32_t*, Kokkos::HostSpace>;
  STATIC_REQUIRE(!std::is_constructible_v<kstage::span<const uint32_t>, HostIds&&>);
  STATIC_REQUIRE(!std::is_constructible_v<kstage::span<const uint32_t>, const HostIds&&>);
  STATIC_REQUIRE(std::is_constructible_v<kstage::span<const uint32_t>, const HostIds&>);
  STATIC_REQUIRE(!std::is_assignable_v<kstage::span<const uint32_t>&, HostIds>);
  STATIC_REQUIRE(std::is_constructible_v<kstage::array_ref<kstage_token_t>,
                                         std::initializer_list<kstage_token_t>>);
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/l/p", 2);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 2);
  s.write(t, q, v, 1).wait();
  s.seal(1, {t});
  size_t groups = 0;
  for (auto& g : s.read(q, {t}, host_read())) groups += g.prims().size();
  REQUIRE(groups == 2);
  // A C array in an option struct: its own storage.
  uint32_t map[2] = {1, 0};
  kstage::WriteOptions o;
  o.index_map = map;
  o.count = 2;
  s.write(t, q, v, 2, o).wait();
  s.seal(2);
  REQUIRE(s.write_floor(t) == 2);
}

TEST_CASE("cpp: a map group outliving its map is refused, not read", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/g/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  kstage::MapGroup g;
  {
    kstage::Map m = s.map(q, t, 1, kstage::dtype_of<float>());
    REQUIRE(m.next(g));
    REQUIRE(g.tensor(0).shape[0] == 3);
  }
  CPP_FAILS(g.view<float*>(0), KSTAGE_INVALID_HANDLE,
            "its map was committed, abandoned or destroyed");
  CPP_FAILS(g.export_dlpack(0), KSTAGE_INVALID_HANDLE, "abandoned");
  CPP_FAILS(g.commit(), KSTAGE_INVALID_HANDLE, "abandoned");
  // After Map::commit, its groups are gone too; a group committed alone is empty.
  kstage::Map m = s.map(q, t, 1, kstage::dtype_of<float>());
  kstage::MapGroup h;
  REQUIRE(m.next(h));
  const std::vector<float> ones(3, 1.f), twos(3, 2.f);
  kstage_test::host_write(h.tensor(0).data, ones.data(), 3 * sizeof(float), h.tensor(0).device);
  m.commit().wait();
  CPP_FAILS(h.view<float*>(0), KSTAGE_INVALID_HANDLE, "committed");
  kstage::Map m2 = s.map(q, t, 2, kstage::dtype_of<float>());
  kstage::MapGroup k;
  REQUIRE(m2.next(k));
  kstage_test::host_write(k.tensor(0).data, twos.data(), 3 * sizeof(float), k.tensor(0).device);
  k.commit().wait();
  REQUIRE(!k);
  CPP_FAILS(k.view<float*>(0), KSTAGE_INVALID_HANDLE, "empty map group");
  s.seal(2);
  REQUIRE(read_floats(s, q, t) == std::vector<float>(3, 2.f));
}

// The C API reads `count` entries of an index_map and ceil(count / 64) words of a mask: the
// C++ API knows the spans' sizes and refuses shorter ones (they were read past their end).
TEST_CASE("cpp: index_map and mask spans shorter than count are refused", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/short/p", 100);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 100);
  const std::vector<uint32_t> two{0, 1};
  const std::vector<uint64_t> one_word{~uint64_t(0)};
  kstage::WriteOptions o;
  o.index_map = two;
  o.count = 3;
  CPP_FAILS(s.write(t, q, v, 1, o), KSTAGE_INVALID_ARGUMENT,
            "options.index_map has 2 entries but options.count is 3");
  o = kstage::WriteOptions();
  o.mask = one_word;
  o.count = 65;
  CPP_FAILS(s.write(t, q, v, 1, o), KSTAGE_INVALID_ARGUMENT, "options.mask has 1 words (64 prims)");
  kstage::WriteBatch batch;
  batch.add(t, v, o);
  CPP_FAILS(s.write(q, batch, 1), KSTAGE_INVALID_ARGUMENT, "batch entry 0: options.mask");
  Kokkos::View<float*, Kokkos::HostSpace> adopted("adopted", 100);
  CPP_FAILS(s.write_managed(t, q, adopted, 1, o), KSTAGE_INVALID_ARGUMENT,
            "write_managed: options.mask");
  o.count = 64;  // exactly one word's worth
  Kokkos::View<float*, Kokkos::HostSpace> v64("v64", 64);
  s.write(t, q, v64, 1, o).wait();
  s.seal(1);
  REQUIRE(s.write_floor(t) == 1);
}

// Self-move leaves a group as it was; a group whose stage was destroyed is refused.
TEST_CASE("cpp: a map group survives self-move and is refused once its stage is gone", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/self/p", 2);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  kstage::Map m = s.map(q, t, 1, kstage::dtype_of<float>());
  kstage::MapGroup g;
  REQUIRE(m.next(g));
  kstage::MapGroup& same = g;
  g = std::move(same);
  REQUIRE(g);
  REQUIRE(g.tensor(0).shape[0] == 2);
  DLManagedTensorVersioned* e = g.export_dlpack(0);  // the group still names its live map
  e->deleter(e);
  q.reset();
  s.reset();  // the map's buffers go with the stage, although `m` lives on
  CPP_FAILS(g.view<float*>(0), KSTAGE_INVALID_HANDLE, "its stage was destroyed");
  CPP_FAILS(g.export_dlpack(0), KSTAGE_INVALID_HANDLE, "");
}

TEST_CASE("cpp: packed row counts whose sum overflows are refused", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/ovf/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> packed("packed", 6);
  const std::vector<uint64_t> counts{UINT64_MAX / 2, UINT64_MAX / 2, 8};
  CPP_FAILS(s.write_ragged(t, q, packed, counts, 1), KSTAGE_INVALID_ARGUMENT,
            "row_counts add up to more than the packed View's 6 entries");
}

TEST_CASE("cpp: one View, or one row count, is one source row", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/one/p", 3);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  std::vector<Kokkos::View<float*, Kokkos::HostSpace>> one{
      Kokkos::View<float*, Kokkos::HostSpace>("r", 6)};
  CPP_FAILS(s.write_ragged(t, q, one, 1), KSTAGE_INVALID_ARGUMENT, "one View for 3 source rows");
  Kokkos::View<float*, Kokkos::HostSpace> packed("p", 6);
  CPP_FAILS(s.write_ragged(t, q, packed, {6}, 1), KSTAGE_INVALID_ARGUMENT,
            "row_counts with one entry for 3 source rows");
  // One prim: one row, either way; and an index_map that picks row 0 only.
  kstage::Query first = s.query({ids[0]});
  s.write_ragged(t, first, one, 1).wait();
  kstage::WriteOptions broadcast;
  uint32_t zeros[3] = {0, 0, 0};
  broadcast.index_map = zeros;
  broadcast.count = 3;
  s.write_ragged(t, q, one, 2, broadcast).wait();
  s.seal(2);
  kstage::ReadOptions o = host_read();
  o.compact = true;
  for (auto& g : s.read(q, {t}, o))
    for (uint64_t i = 0; i < g.tensor_count(); ++i) REQUIRE(g.tensor(i).shape[0] == 6);
}

TEST_CASE("cpp: Op::sync orders a consumer after the op's device work", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/opsync/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 4);
  kstage::WriteOptions o;
  o.residency = kResidency;
  kstage::Op op = s.write(t, q, v, 1, o);
  if (kOnDevice) {
    op.sync({1, 0});  // the legacy default stream waits for the write's copy out of `v`
  } else {
    op.sync({0, 0});  // a host op: complete, nothing to order
    CPP_FAILS(op.sync({1, 0}), KSTAGE_INVALID_ARGUMENT, "consumer");
    kstage::Status st;
    op.sync({0, 1}, st);
    REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
  }
  REQUIRE(op.wait());
  kstage::Status st;
  op.sync({0, 0}, st);
  REQUIRE(st.ok());
  op.reset();
  op.sync({0, 0}, st);  // an empty Op: no such op
  REQUIRE(st.code() == KSTAGE_INVALID_HANDLE);
}

TEST_CASE("cpp: group exports, group sync and map exports call through", "[cpp]") {
  kstage::Stage s = make_stage();
  const std::vector<kstage_path_t> ids = make_paths(s, "/ex/p", 4);
  kstage::Query q = s.query(ids);
  const kstage_token_t t = s.token("t");
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 4);
  for (int i = 0; i < 4; ++i) v(i) = float(i);
  s.write(t, q, v, 1).wait();
  s.seal(1);
  for (auto& g : s.read(q, {t})) {
    DLManagedTensorVersioned* e = g.export_dlpack(0);
    REQUIRE(e != nullptr);
    REQUIRE((e->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);  // zero-copy: the column's storage
    REQUIRE(e->dl_tensor.data == g.tensor(0).data);
    e->deleter(e);
    CPP_FAILS(g.export_dlpack(1), KSTAGE_INVALID_ARGUMENT, "");
    if (kOnDevice) {
      kstage_test::wait_for(g.device_sync());
      // The legacy default stream as the consumer's: released after its work.
      DLManagedTensorVersioned* d = g.export_dlpack_on_stream(0, 1);
      REQUIRE(d->dl_tensor.data == g.tensor(0).data);
      d->deleter(d);
    } else {
      REQUIRE(g.device_sync().stream == 0);
      REQUIRE(g.device_sync().event == 0);
      g.sync({0, 0});
      CPP_FAILS(g.sync({1, 0}), KSTAGE_INVALID_ARGUMENT, "consumer");
      CPP_FAILS(g.export_dlpack_on_stream(0, 1), KSTAGE_INVALID_ARGUMENT, "consumer");
      DLManagedTensorVersioned* h = g.export_dlpack_on_stream(0, 0);  // 0: a plain export
      REQUIRE(h->dl_tensor.data == g.tensor(0).data);
      h->deleter(h);
    }
  }
  kstage::MapOptions mo;
  mo.residency = kResidency;
  kstage::Map m = s.map(q, t, 2, kstage::dtype_of<float>(), mo);
  for (auto& g : m) {
    DLManagedTensorVersioned* e = g.export_dlpack(0);
    REQUIRE(e != nullptr);
    REQUIRE((e->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0);  // a producer fills it
    REQUIRE(e->dl_tensor.data == g.tensor(0).data);
    std::vector<float> nines(size_t(g.tensor(0).shape[0]), 9.f);
    kstage_test::host_write(e->dl_tensor.data, nines.data(), nines.size() * sizeof(float),
                            e->dl_tensor.device);
    e->deleter(e);
  }
  m.commit().wait();
  s.seal(2);
  REQUIRE(read_floats(s, q, t) == std::vector<float>(4, 9.f));
}

TEST_CASE("cpp: compute_world_transforms writes the world column the caller seals", "[cpp]") {
  kstage::Stage s = make_stage();
  const kstage_token_t local = s.token(KSTAGE_LOCAL_MATRIX), world = s.token("my:world");
  const std::vector<kstage_path_t> ids = {s.path("/arm"), s.path("/arm/hand")};
  kstage::Query q = s.query(ids);
  Kokkos::View<double* [4][4], Kokkos::HostSpace> m("m", 2);
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 4; ++r) m(i, r, r) = 1;
  m(0, 3, 0) = 1;  // the arm at x = 1, the hand 2 further along
  m(1, 3, 0) = 2;
  kstage::WriteOptions o;
  o.semantic = KSTAGE_SEMANTIC_MATRIX;
  s.write(local, q, m, 1, o).wait();
  s.seal(1);
  kstage::TransformOptions t;
  t.world = world;
  s.compute_world_transforms(2, t).wait();
  s.seal(2);
  kstage::ReadOptions r = host_read();
  r.compact = true;
  std::vector<double> got;
  for (auto& g : s.read(q, {world}, r)) {
    const auto* d = static_cast<const double*>(g.tensor(0).data);
    got.insert(got.end(), d, d + g.prims().size() * 16);
  }
  REQUIRE(got.size() == 32);
  REQUIRE(got[12] == 1);
  REQUIRE(got[16 + 12] == 3);
  // A failure throws, or fills a Status.
  CPP_FAILS(s.compute_world_transforms(2, t), KSTAGE_WRITE_FLOOR_VIOLATION, "my:world");
  kstage::Status st;
  kstage::TransformOptions bad;
  bad.local = world;
  bad.world = world;
  REQUIRE(!s.compute_world_transforms(3, bad, st));
  REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
}

TEST_CASE("cpp: clone copies a subtree to targets and to range members", "[cpp][scene]") {
  kstage::Stage s = make_stage();
  const kstage_token_t pos = s.token("pos");
  const kstage_path_t src = s.path("/src");
  const std::vector<kstage_path_t> tree = {src, s.path("/src/a"), s.path("/src/a/b")};
  Kokkos::View<float* [3], Kokkos::HostSpace> v("v", 3);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 3; ++c) v(i, c) = float(10 * i + c);
  kstage::WriteOptions o;
  o.semantic = KSTAGE_SEMANTIC_POINT;
  s.write(pos, s.query(tree), v, 1, o).wait();
  s.seal(1);
  const std::vector<float> values = read_floats(s, s.query(tree), pos);
  REQUIRE(values.size() == 9);

  // Two targets, one op; nothing is seen before the seal.
  const std::vector<kstage_path_t> targets = {s.path("/copies/t1"), s.path("/copies/t2")};
  kstage::Op op = s.clone(src, targets, 2);
  REQUIRE(op);
  op.wait();
  for (const char* t : {"/copies/t1", "/copies/t2"})
    REQUIRE(read_floats(s, s.query({s.path(std::string(t) + "/a/b")}), pos).empty());
  s.seal(2);
  for (const char* t : {"/copies/t1", "/copies/t2"}) {
    const std::string root(t);
    INFO(root);
    kstage::Query copy = s.query({s.path(root), s.path(root + "/a"), s.path(root + "/a/b")});
    REQUIRE(read_floats(s, copy, pos) == values);
  }
  // An existing target: refused at the call, thrown or in the Status; the stage unchanged.
  CPP_FAILS(s.clone(src, {targets[0]}, 3), KSTAGE_ALREADY_EXISTS, "'/copies/t1' already exists");
  kstage::Status st;
  REQUIRE(!s.clone(src, {s.path("/copies/t3"), targets[1]}, 3, st));
  REQUIRE(st.code() == KSTAGE_ALREADY_EXISTS);
  s.seal(3);
  REQUIRE(read_floats(s, s.query({s.path("/copies/t3")}), pos).empty());
  CPP_FAILS(s.clone(src, {s.path("/src/a/inside")}, 4), KSTAGE_INVALID_ARGUMENT,
            "lies below the source");
  CPP_FAILS(s.clone(s.path("/nothing"), {s.path("/t")}, 4), KSTAGE_NOT_FOUND,
            "'/nothing' does not exist");
  CPP_FAILS(s.clone(src, {s.path("/t")}, 3), KSTAGE_WRITE_FLOOR_VIOLATION, "write floor 3");

  // Members 1 and 2 of a range of four.
  const kstage::PathRange envs = s.path_range("/envs", "env_", 0, 4);
  s.clone_range(src, envs.first, 1, 2, 4).wait();
  s.seal(4);
  for (uint64_t i = 0; i < 4; ++i) {
    const std::string root = "/envs/env_" + std::to_string(i);
    INFO(root);
    kstage::Query copy = s.query({envs[i], s.path(root + "/a"), s.path(root + "/a/b")});
    REQUIRE(read_floats(s, copy, pos) == (i == 1 || i == 2 ? values : std::vector<float>{}));
  }
  REQUIRE(!s.clone_range(src, envs.first, 3, 2, 5, st));
  REQUIRE(st.code() == KSTAGE_INVALID_ARGUMENT);
  CPP_FAILS(s.clone_range(src, envs[1], 0, 1, 5), KSTAGE_INVALID_ARGUMENT,
            "not the first path of a path range");
}

TEST_CASE("cpp: a read names a range's prims by a progression on request", "[cpp][ranges]") {
  kstage::Stage s = make_stage();
  const kstage_token_t mass = s.token("mass");
  const kstage::PathRange cells = s.path_range("/cells", "c", 0, 10);
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 10);
  for (int i = 0; i < 10; ++i) v(i) = float(i);
  s.write(mass, s.query(cells), v, 1).wait();
  s.seal(1);

  // Every other member: first + i * 2, with no list of ids.
  kstage::ReadOptions o = host_read();
  o.compact = true;
  o.prims_as_progression = true;
  uint64_t groups = 0;
  for (auto& g : s.read(s.query(cells, 1, 0, 2), {mass}, o)) {
    ++groups;
    REQUIRE(g.prims_are_progression());
    REQUIRE(g.prims().empty());
    REQUIRE(g.prim_count() == 5);
    REQUIRE(g.progression_first() == cells[1]);
    REQUIRE(g.progression_stride() == 2);
    const auto* f = static_cast<const float*>(g.tensor(0).data);
    for (uint64_t i = 0; i < g.prim_count(); ++i) {
      REQUIRE(g.prim(i) == cells[1 + 2 * i]);
      REQUIRE(f[i] == float(1 + 2 * i));
    }
    kstage::ReadGroup moved = std::move(g);  // the progression moves with the group
    REQUIRE(moved.prim(4) == cells[9]);
    REQUIRE(!g.prims_are_progression());  // NOLINT(bugprone-use-after-move): left empty
    REQUIRE(g.progression_stride() == 0);
    moved.reset();
    REQUIRE(!moved.prims_are_progression());
    REQUIRE(moved.progression_stride() == 0);
  }
  REQUIRE(groups == 1);

  // Without the option (or for a listed query) the ids are listed, and prim(i) reads them.
  o.prims_as_progression = false;
  for (auto& g : s.read(s.query(cells, 1, 0, 2), {mass}, o)) {
    REQUIRE(!g.prims_are_progression());
    REQUIRE(g.prims().size() == 5);
    REQUIRE(g.prim(2) == cells[5]);
    REQUIRE(g.prims()[2] == cells[5]);
  }
  o.prims_as_progression = true;
  for (auto& g : s.read(s.query({cells[3], cells[7]}), {mass}, o)) {
    REQUIRE(!g.prims_are_progression());
    REQUIRE(g.prim(1) == cells[7]);
  }
}

TEST_CASE("cpp: hierarchy answers and relational filters", "[cpp][scene]") {
  kstage::Stage s = make_stage();
  const kstage_token_t mass = s.token("mass"), parent = s.token(KSTAGE_PARENT_ATTRIBUTE);
  const kstage_path_t world = s.path("/World");
  const kstage::PathRange envs = s.path_range("/World/envs", "env_", 0, 1000);
  const kstage_path_t ground = s.path("/World/ground");
  Kokkos::View<float*, Kokkos::HostSpace> one("one", 2);
  s.write(mass, s.query({world, ground}), one, 1).wait();
  Kokkos::View<float*, Kokkos::HostSpace> many("many", 1000);
  s.write(mass, s.query(envs, 0, 0, 0), many, 1).wait();
  s.seal(1);

  kstage::Hierarchy h = s.hierarchy(s.query({world, s.path("/nothing")}), KSTAGE_RELATION_CHILDREN);
  REQUIRE(h);
  REQUIRE(h.items().size() == 2);
  REQUIRE(h.items()[0].status == KSTAGE_OK);
  REQUIRE(h.items()[1].status == KSTAGE_NOT_FOUND);
  REQUIRE(h.spans(0).size() == 2);  // the range as one span, then "/World/ground"
  REQUIRE(h.spans(0)[0].first == envs.first);
  REQUIRE(h.spans(0)[0].count == 1000);
  REQUIRE(h.spans().size() == 2);
  REQUIRE(h.paths(0).size() == 1001);
  REQUIRE(h.paths(1).empty());
  kstage::Hierarchy moved = std::move(h);
  REQUIRE(!h);
  REQUIRE(h.items().empty());
  REQUIRE(moved.items().size() == 2);
  kstage::Hierarchy assigned;
  assigned = std::move(moved);
  REQUIRE(!moved);
  REQUIRE(assigned.spans().size() == 2);
  assigned.reset();
  REQUIRE(assigned.items().empty());
  CPP_FAILS(s.hierarchy(s.query({world}), 9), KSTAGE_INVALID_ARGUMENT, "relation 9");

  kstage::FilterEx f;
  f.in(parent, {world}).has(mass);
  REQUIRE(f.size() == 2);
  REQUIRE(s.query(f).count() == 1001);
  kstage::FilterEx wrong;
  wrong.add(KSTAGE_FILTER_GE, mass, {1});
  CPP_FAILS(s.query(wrong), KSTAGE_NOT_SUPPORTED, "filter.predicates[0]");
}
