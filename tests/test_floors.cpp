// SPDX-License-Identifier: Apache-2.0
// Ordinals and sealing: write floors per attribute and global, scoped and
// global advances, the default floor of attributes not seen yet, the order
// in which sealing applies pending mutations, and what reads see meanwhile.
#include "support.hpp"

using namespace kstage_test;

namespace {}  // namespace

TEST_CASE("floors start at 0 and only move forward", "[floors]") {
  Stage s(host_execution());
  kstage_token_t mass = s.token("mass"), temp = s.token("temperature");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  REQUIRE(s.floor(0) == 0);
  REQUIRE(s.floor(mass) == 0);
  REQUIRE(s.floor(temp) == 0);

  // Ordinal 0 is never above a floor.
  KS_FAILS(try_write(s, q, mass, 0, {1.f, 2.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 0 is not above the write floor 0 of attribute 'mass'");
  s.seal(1);
  REQUIRE(s.read(q, {mass}).empty());  // the rejected write left no trace

  KS_OK(try_write(s, q, mass, 2, {1.f, 2.f}));
  // n = 0: every attribute (written or not) and the global floor move.
  s.seal(7);
  REQUIRE(s.floor(0) == 7);
  REQUIRE(s.floor(mass) == 7);
  REQUIRE(s.floor(temp) == 7);
  REQUIRE(scalars(s, q, mass) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});

  // Backwards (and equal) advances are no-ops that return OK.
  KS_OK(kstage_advance_write_floor(s.stage, 3, nullptr, 0));
  KS_OK(kstage_advance_write_floor(s.stage, 7, nullptr, 0));
  KS_OK(kstage_advance_write_floor(s.stage, 5, &mass, 1));
  REQUIRE(s.floor(0) == 7);
  REQUIRE(s.floor(mass) == 7);
  REQUIRE(s.floor(temp) == 7);
  // ... and in particular do not reopen sealed ordinals.
  KS_FAILS(try_write(s, q, mass, 6, {9.f, 9.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 6 is not above the write floor 7 of attribute 'mass'");
  KS_FAILS(try_write(s, q, temp, 7, {9.f, 9.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor 7 of attribute 'temperature'");
  REQUIRE(scalars(s, q, mass) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});
}

TEST_CASE("a scoped advance seals only the attributes it names", "[floors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("A"), b = s.token("B");
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 3, {1.f, 2.f, 3.f}));
  KS_OK(try_write(s, q, b, 3, {4.f, 5.f, 6.f}));

  s.seal(3, {a});
  REQUIRE(s.floor(a) == 3);
  REQUIRE(s.floor(b) == 0);
  REQUIRE(s.floor(0) == 0);  // the global floor is the minimum
  auto ga = s.read(q, {a});
  REQUIRE(ga.size() == 1);
  REQUIRE(ga[0].prims == prims);
  REQUIRE(ga[0].ordinal == 3);
  REQUIRE(s.read(q, {b}).empty());
  // Reading both: only A has a group.
  auto both = s.read(q, {a, b});
  REQUIRE(both.size() == 1);
  REQUIRE(both[0].attribute == a);

  // B advanced to 2 (below its pending write): still hidden. The global floor
  // is the minimum: B's 2, or 0 if it also counts the default floor of
  // attributes not seen yet (which no scoped advance moves).
  s.seal(2, {b});
  REQUIRE(s.floor(b) == 2);
  const uint64_t global = s.floor(0);
  REQUIRE((global == 0 || global == 2));
  REQUIRE(s.read(q, {b}).empty());

  // A write to A at 3 is now sealed out, but B still accepts 3.
  KS_FAILS(try_write(s, q, a, 3, {0.f, 0.f, 0.f}), KSTAGE_WRITE_FLOOR_VIOLATION, "attribute 'A'");

  s.seal(3);
  REQUIRE(s.floor(0) == 3);
  REQUIRE(s.floor(b) == 3);
  REQUIRE(scalars(s, q, b) ==
          std::map<kstage_path_t, float>{{prims[0], 4.f}, {prims[1], 5.f}, {prims[2], 6.f}});
  REQUIRE(scalars(s, q, a) ==
          std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}, {prims[2], 3.f}});
}

TEST_CASE("floor violations are per attribute and name the ordinal and the attribute",
          "[floors][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("velocity"), b = s.token("pressure");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(5, {a});
  const std::string before = s.fingerprint(q, {a, b});

  KS_FAILS(try_write(s, q, a, 5, {7.f, 8.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 5 is not above the write floor 5 of attribute 'velocity'");
  KS_FAILS(try_write(s, q, a, 4, {7.f, 8.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 4 is not above the write floor 5 of attribute 'velocity'");
  // The batch form rejects everything when one attribute is sealed.
  {
    std::vector<float> va{7.f, 8.f}, vb{7.f, 8.f};
    int64_t shape[1] = {2};
    DLTensor ta = tensor(va.data(), f32(), 1, shape), tb = tensor(vb.data(), f32(), 1, shape);
    kstage_write_data_t w[2] = {write_data(&tb), write_data(&ta)};
    kstage_token_t attrs[2] = {b, a};
    kstage_op_t op = 0;
    KS_FAILS(kstage_write_attributes(s.stage, q, attrs, w, 2, 3, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_WRITE_FLOOR_VIOLATION,
             "ordinal 3 is not above the write floor 5 of attribute 'velocity'");
    REQUIRE(op == 0);
  }
  REQUIRE(s.fingerprint(q, {a, b}) == before);

  // B's floor is still 0: ordinal 2 is fine for it.
  KS_OK(try_write(s, q, b, 2, {3.f, 4.f}));
  KS_OK(try_write(s, q, a, 6, {5.f, 6.f}));
  s.seal(6);
  REQUIRE(scalars(s, q, b) == std::map<kstage_path_t, float>{{prims[0], 3.f}, {prims[1], 4.f}});
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 5.f}, {prims[1], 6.f}});
}

TEST_CASE("attributes not seen yet start at the default floor", "[floors]") {
  Stage s(host_execution());
  kstage_token_t early = s.token("interned_early");  // interned, never written
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  s.seal(10);
  kstage_token_t fresh = s.token("brand_new");  // interned after the advance
  REQUIRE(s.floor(fresh) == 10);
  REQUIRE(s.floor(early) == 10);
  REQUIRE(s.floor(0) == 10);

  KS_FAILS(try_write(s, q, fresh, 10, {1.f, 2.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 10 is not above the write floor 10 of attribute 'brand_new'");
  KS_FAILS(try_write(s, q, early, 9, {1.f, 2.f}), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor 10 of attribute 'interned_early'");
  KS_OK(try_write(s, q, fresh, 11, {1.f, 2.f}));
  KS_OK(try_write(s, q, early, 11, {3.f, 4.f}));
  REQUIRE(s.read(q, {fresh, early}).empty());
  s.seal(11);
  REQUIRE(scalars(s, q, fresh) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});
  REQUIRE(scalars(s, q, early) == std::map<kstage_path_t, float>{{prims[0], 3.f}, {prims[1], 4.f}});

  // A scoped advance of one attribute does not move the default floor.
  s.seal(20, {fresh});
  kstage_token_t later = s.token("later");
  REQUIRE(s.floor(later) == 11);
  REQUIRE(s.floor(0) == 11);
  KS_OK(try_write(s, q, later, 12, {5.f, 6.f}));
  // A global advance below a scoped floor leaves that floor alone.
  s.seal(15);
  REQUIRE(s.floor(fresh) == 20);
  REQUIRE(s.floor(later) == 15);
  REQUIRE(s.floor(early) == 15);
  REQUIRE(s.floor(0) == 15);
  REQUIRE(s.floor(s.token("latest")) == 15);
  REQUIRE(scalars(s, q, later) == std::map<kstage_path_t, float>{{prims[0], 5.f}, {prims[1], 6.f}});
}

TEST_CASE("sealing applies in ordinal order, then submission order", "[floors][seal]") {
  Stage s(host_execution());
  kstage_token_t v = s.token("value");
  kstage_path_t p = s.path("/prim"), r = s.path("/other");
  kstage_query_t qp = s.query({p}), qr = s.query({r});

  // Submitted out of ordinal order.
  KS_OK(try_write(s, qp, v, 5, {50.f}));
  KS_OK(try_write(s, qp, v, 3, {30.f}));
  KS_OK(try_write(s, qp, v, 4, {40.f}));
  // Same ordinal twice: the later submission wins.
  KS_OK(try_write(s, qr, v, 4, {41.f}));
  KS_OK(try_write(s, qr, v, 4, {42.f}));
  KS_OK(try_write(s, qr, v, 3, {31.f}));

  s.seal(3);
  REQUIRE(scalars(s, qp, v) == std::map<kstage_path_t, float>{{p, 30.f}});
  REQUIRE(scalars(s, qr, v) == std::map<kstage_path_t, float>{{r, 31.f}});

  s.seal(4);
  REQUIRE(scalars(s, qp, v) == std::map<kstage_path_t, float>{{p, 40.f}});  // 5 still hidden
  REQUIRE(scalars(s, qr, v) == std::map<kstage_path_t, float>{{r, 42.f}});
  auto g = s.read(qp, {v});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].ordinal == 4);

  s.seal(5);
  REQUIRE(scalars(s, qp, v) == std::map<kstage_path_t, float>{{p, 50.f}});
  REQUIRE(scalars(s, qr, v) == std::map<kstage_path_t, float>{{r, 42.f}});
}

TEST_CASE("one seal over several ordinals applies them all in order", "[floors][seal]") {
  Stage s(host_execution());
  kstage_token_t v = s.token("value");
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims), q0 = s.query({prims[0]}), q12 = s.query({prims[1], prims[2]});
  KS_OK(try_write(s, q, v, 9, {9.f, 9.f, 9.f}));
  KS_OK(try_write(s, q0, v, 8, {80.f}));
  KS_OK(try_write(s, q12, v, 9, {91.f, 92.f}));  // same ordinal, submitted later
  KS_OK(try_write(s, q0, v, 2, {20.f}));
  KS_OK(try_write(s, q, v, 7, {7.f, 7.f, 7.f}));
  s.seal(9);
  REQUIRE(scalars(s, q, v) ==
          std::map<kstage_path_t, float>{{prims[0], 9.f}, {prims[1], 91.f}, {prims[2], 92.f}});
}

TEST_CASE("reads never see unsealed writes and never fail because of them", "[floors][read]") {
  Stage s(host_execution());
  kstage_token_t v = s.token("value");
  auto prims = s.paths("/p", 2);
  kstage_path_t newcomer = s.path("/newcomer");
  kstage_query_t q = s.query(prims), all = s.query({prims[0], prims[1], newcomer});
  KS_OK(try_write(s, q, v, 1, {1.f, 2.f}));
  s.seal(1);
  // Unsealed: new values for the existing prims, and a new prim.
  KS_OK(try_write(s, q, v, 2, {10.f, 20.f}));
  KS_OK(try_write(s, s.query({newcomer}), v, 2, {30.f}));

  auto g = s.read(all, {v});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == prims);
  REQUIRE(g[0].ordinal == 1);
  REQUIRE(as_floats(g[0].values[0]) == std::vector<float>{1.f});
  REQUIRE(as_floats(g[0].values[1]) == std::vector<float>{2.f});
  // A change range that ends at the floor is answerable despite the pending writes.
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = 1;
  d.range_end = 1;
  auto cr = s.read(all, {v}, &d);
  REQUIRE(cr.size() == 1);
  REQUIRE(cr[0].prims == prims);
  // The unsealed prim does not exist yet.
  kstage_filter_t f{};
  kstage_query_t existing = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &existing));
  uint64_t n = 0;
  KS_OK(kstage_query_count(s.stage, existing, &n));
  REQUIRE(n == 2);

  s.seal(2);
  REQUIRE(scalars(s, all, v) ==
          std::map<kstage_path_t, float>{{prims[0], 10.f}, {prims[1], 20.f}, {newcomer, 30.f}});
}

TEST_CASE("floor calls reject ids that are not tokens", "[floors][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("A");
  kstage_path_t p = s.path("/p");
  kstage_query_t q = s.query({p});
  KS_OK(try_write(s, q, a, 1, {1.f}));
  const std::string before = s.fingerprint(q, {a});

  uint64_t f = 1234;
  KS_FAILS(kstage_get_write_floor(s.stage, a + 1000, &f), KSTAGE_INVALID_ARGUMENT,
           "is not a token of this stage");
  REQUIRE(f == 1234);
  KS_FAILS(kstage_get_write_floor(s.stage, a, nullptr), KSTAGE_INVALID_ARGUMENT, "NULL");

  kstage_token_t attrs[2] = {a, a + 1000};
  KS_FAILS(kstage_advance_write_floor(s.stage, 5, attrs, 2), KSTAGE_INVALID_ARGUMENT,
           "attributes[1] = " + std::to_string(a + 1000));
  KS_FAILS(kstage_advance_write_floor(s.stage, 5, nullptr, 1), KSTAGE_INVALID_ARGUMENT, "NULL");
  REQUIRE(s.floor(a) == 0);  // nothing moved, not even the valid attribute
  REQUIRE(s.floor(0) == 0);
  REQUIRE(s.fingerprint(q, {a}) == before);
  REQUIRE(s.read(q, {a}).empty());  // the pending write at 1 is still unsealed

  KS_FAILS(kstage_advance_write_floor(0, 5, nullptr, 0), KSTAGE_INVALID_HANDLE, "stage handle 0");
  KS_FAILS(kstage_get_write_floor(0, 0, &f), KSTAGE_INVALID_HANDLE, "stage handle 0");
}

TEST_CASE("group.ordinal is the attribute's floor at the snapshot", "[floors][read]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("A"), b = s.token("B");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, q, b, 1, {3.f, 4.f}));
  s.seal(3, {a});
  s.seal(8, {b});
  auto g = s.read(q, {a, b});
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].attribute == a);
  REQUIRE(g[0].ordinal == 3);
  REQUIRE(g[1].attribute == b);
  REQUIRE(g[1].ordinal == 8);

  // A group fetched earlier keeps the ordinal of its snapshot.
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
  s.seal(12);
  kstage_read_group_t held{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &held));
  REQUIRE(held.ordinal == 3);
  KS_OK(kstage_release_group(s.stage, held.handle));
  KS_OK(kstage_release_read(s.stage, r));
  g = s.read(q, {a});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].ordinal == 12);
}
