// SPDX-License-Identifier: Apache-2.0
// kstage_delete_attributes: deleting attributes and prims, sealing order with
// writes, floors, argument errors, and prim modes against pending deletes.
#include "support.hpp"

using namespace kstage_test;

namespace {

// Existing prims (latest sealed state), in path-id order.
std::vector<kstage_path_t> existing(Stage& s) { return s.filtered(kstage_filter_t{}); }

}  // namespace

TEST_CASE("deleting an attribute hides it after the seal; the last one takes the prim",
          "[delete]") {
  Stage s(host_execution());
  kstage_token_t mass = s.token("mass"), temp = s.token("temp");
  auto prims = s.paths("/p", 4);
  kstage_query_t all = s.query(prims);
  KS_OK(try_write(s, all, mass, 1, {1.f, 2.f, 3.f, 4.f}));
  // Only p_0 and p_1 also hold temp.
  KS_OK(try_write(s, s.query({prims[0], prims[1]}), temp, 1, {10.f, 11.f}));
  s.seal(1);
  REQUIRE(existing(s) == prims);

  // Delete mass from p_0 (which keeps temp) and p_2 (mass is its only attribute).
  kstage_query_t victims = s.query({prims[0], prims[2]});
  KS_OK(s.remove(victims, {mass}, 2));
  // Before the seal: still visible.
  REQUIRE(scalars(s, all, mass).size() == 4);
  REQUIRE(existing(s) == prims);

  s.seal(2);
  REQUIRE(scalars(s, all, mass) ==
          std::map<kstage_path_t, float>{{prims[1], 2.f}, {prims[3], 4.f}});
  REQUIRE(scalars(s, all, temp) ==
          std::map<kstage_path_t, float>{{prims[0], 10.f}, {prims[1], 11.f}});
  // p_0 still exists (it holds temp); p_2 is gone.
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[0], prims[1], prims[3]});

  kstage_query_t q2 = s.query({prims[2]});
  KS_FAILS(try_write(s, q2, mass, 3, {9.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
           "UPDATE: prim '/p_2' (element 0) does not exist");
  // p_0 exists: INSERT fails even for the attribute it no longer holds.
  KS_FAILS(try_write(s, s.query({prims[0]}), mass, 3, {9.f}, KSTAGE_PRIM_MODE_INSERT),
           KSTAGE_ALREADY_EXISTS, "prim '/p_0'");
  KS_OK(try_write(s, s.query({prims[0]}), mass, 3, {5.f}, KSTAGE_PRIM_MODE_UPDATE));
  KS_OK(try_write(s, q2, mass, 3, {7.f}, KSTAGE_PRIM_MODE_INSERT));
  s.seal(3);
  REQUIRE(scalars(s, all, mass) ==
          std::map<kstage_path_t, float>{
              {prims[0], 5.f}, {prims[1], 2.f}, {prims[2], 7.f}, {prims[3], 4.f}});
  REQUIRE(existing(s) == prims);
}

TEST_CASE("deleting every attribute of a prim by name removes it", "[delete]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, q, b, 1, {3.f, 4.f}));
  s.seal(1);
  kstage_query_t q0 = s.query({prims[0]});
  KS_OK(s.remove(q0, {a, b}, 2));
  s.seal(2);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[1]});
  REQUIRE(s.read(q0, {a, b}).empty());
  KS_FAILS(try_write(s, q0, a, 3, {9.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND, "'/p_0'");
}

TEST_CASE("n = 0 deletes the prims with every attribute", "[delete]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b"), c = s.token("c");
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f, 3.f}));
  KS_OK(try_write(s, q, b, 1, {4.f, 5.f, 6.f}));
  KS_OK(try_write(s, s.query({prims[1]}), c, 1, {7.f}));
  s.seal(1);

  kstage_query_t q01 = s.query({prims[0], prims[1]});
  kstage_op_t op = 0;
  KS_OK(kstage_delete_attributes(s.stage, q01, nullptr, 0, 2, &op));
  REQUIRE(op != 0);
  REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_OK);
  KS_OK(kstage_release_op(s.stage, op));
  REQUIRE(existing(s) == prims);  // unsealed
  s.seal(2);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[2]});
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[2], 3.f}});
  REQUIRE(scalars(s, q, b) == std::map<kstage_path_t, float>{{prims[2], 6.f}});
  REQUIRE(s.read(q, {c}).empty());
  KS_FAILS(try_write(s, q01, a, 3, {0.f, 0.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
           "'/p_0'");
  KS_OK(try_write(s, q01, a, 3, {8.f, 9.f}, KSTAGE_PRIM_MODE_INSERT));
  s.seal(3);
  REQUIRE(existing(s) == prims);
  REQUIRE(scalars(s, q, b) ==
          std::map<kstage_path_t, float>{{prims[2], 6.f}});  // b did not come back
}

TEST_CASE("n = 0 with a scoped advance: each attribute loses the prims when it is sealed",
          "[delete][floors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, q, b, 1, {3.f, 4.f}));
  s.seal(1);
  kstage_query_t q0 = s.query({prims[0]});
  KS_OK(s.remove(q0, {}, 2));
  s.seal(2, {a});
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[1], 2.f}});
  REQUIRE(scalars(s, q, b) == std::map<kstage_path_t, float>{{prims[0], 3.f}, {prims[1], 4.f}});
  REQUIRE(existing(s) == prims);  // p_0 still holds b
  s.seal(2, {b});
  REQUIRE(scalars(s, q, b) == std::map<kstage_path_t, float>{{prims[1], 4.f}});
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[1]});
  s.seal(5);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[1]});
}

TEST_CASE("deleting absent prims or attributes is ignored", "[delete]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), never = s.token("never_written");
  auto prims = s.paths("/p", 2);
  kstage_path_t ghost = s.path("/ghost");
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);
  KS_OK(s.remove(s.query({ghost}), {a}, 2));           // prim that never existed
  KS_OK(s.remove(q, {never}, 2));                      // attribute no column has
  KS_OK(s.remove(s.query({ghost, prims[1]}), {}, 3));  // mix: ghost ignored
  KS_OK(s.remove(s.query({}), {a}, 3));                // empty query
  s.seal(2);
  REQUIRE(existing(s) == prims);
  REQUIRE(s.read(q, {never}).empty());
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});
  s.seal(3);
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 1.f}});
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[0]});
  // Deleting it again (already gone) is fine too.
  KS_OK(s.remove(s.query({prims[1]}), {a}, 4));
  s.seal(4);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[0]});
}

TEST_CASE("delete and write order: by ordinal, then by submission", "[delete][seal]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f, 3.f}));
  s.seal(1);
  kstage_query_t q0 = s.query({prims[0]}), q1 = s.query({prims[1]}), q2 = s.query({prims[2]});

  // p_0: delete at 2, write again at 3 -> comes back.
  KS_OK(s.remove(q0, {a}, 2));
  KS_OK(try_write(s, q0, a, 3, {30.f}));
  // p_1: write then delete at the same ordinal -> deleted.
  KS_OK(try_write(s, q1, a, 3, {31.f}));
  KS_OK(s.remove(q1, {a}, 3));
  // p_2: delete then write at the same ordinal -> written.
  KS_OK(s.remove(q2, {a}, 3));
  KS_OK(try_write(s, q2, a, 3, {32.f}));

  s.seal(2);
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[1], 2.f}, {prims[2], 3.f}});
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[1], prims[2]});
  s.seal(3);
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 30.f}, {prims[2], 32.f}});
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[0], prims[2]});
}

TEST_CASE("deletes at or below the floor are rejected with the floor and the attribute",
          "[delete][floors][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("alpha"), b = s.token("beta");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, q, b, 1, {3.f, 4.f}));
  s.seal(1);
  s.seal(6, {b});
  const std::string before = s.fingerprint(q, {a, b});
  kstage_op_t op = 0;

  kstage_token_t ab[2] = {a, b};
  KS_FAILS(kstage_delete_attributes(s.stage, q, &a, 1, 1, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 1 is not above the write floor 1 of attribute 'alpha'");
  KS_FAILS(kstage_delete_attributes(s.stage, q, ab, 2, 4, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 4 is not above the write floor 6 of attribute 'beta'");
  // n = 0: the prims hold beta, whose floor is 6.
  KS_FAILS(kstage_delete_attributes(s.stage, q, nullptr, 0, 5, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor 6 of attribute 'beta'");
  KS_FAILS(kstage_delete_attributes(s.stage, q, nullptr, 0, 5, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 5");
  // Exactly at beta's scoped floor (above the global floor 1, which alpha
  // still has): rejected too, and nothing is deleted -- accepting it would
  // delete alpha at 6 while beta kept the prims.
  KS_FAILS(kstage_delete_attributes(s.stage, q, nullptr, 0, 6, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "ordinal 6 is not above the write floor 6 of attribute 'beta'");
  // n = 0 at or below the global floor.
  KS_FAILS(kstage_delete_attributes(s.stage, s.query({s.path("/ghost")}), nullptr, 0, 1, &op),
           KSTAGE_WRITE_FLOOR_VIOLATION, "ordinal 1");
  REQUIRE(op == 0);
  REQUIRE(s.fingerprint(q, {a, b}) == before);
  // Sealing the ordinals the rejected calls used shows no trace of them.
  s.seal(6);
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});
  REQUIRE(scalars(s, q, b) == std::map<kstage_path_t, float>{{prims[0], 3.f}, {prims[1], 4.f}});
  REQUIRE(existing(s) == prims);

  // alpha alone at 2 was fine before; after the global seal to 6 a delete needs 7.
  KS_OK(s.remove(q, {}, 7));
  s.seal(7);
  REQUIRE(existing(s).empty());
}

TEST_CASE("delete argument errors leave the stage unchanged", "[delete][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);
  const std::string before = s.fingerprint(q, {a});
  kstage_op_t op = 0;

  KS_FAILS(kstage_delete_attributes(s.stage, q + 12345, &a, 1, 2, &op), KSTAGE_INVALID_HANDLE,
           "query handle");
  kstage_query_t released = s.query({prims[0]});
  KS_OK(kstage_query_release(s.stage, released));
  KS_FAILS(kstage_delete_attributes(s.stage, released, &a, 1, 2, &op), KSTAGE_INVALID_HANDLE,
           "query handle");
  KS_FAILS(kstage_delete_attributes(s.stage, 0, nullptr, 0, 2, &op), KSTAGE_INVALID_HANDLE,
           "query handle 0");
  const kstage_token_t bad = a + 1000;
  KS_FAILS(kstage_delete_attributes(s.stage, q, &bad, 1, 2, &op), KSTAGE_INVALID_ARGUMENT,
           "attributes[0] = " + std::to_string(bad) + " is not a token");
  kstage_token_t mixed[2] = {a, bad};
  KS_FAILS(kstage_delete_attributes(s.stage, q, mixed, 2, 2, &op), KSTAGE_INVALID_ARGUMENT,
           "attributes[1]");
  KS_FAILS(kstage_delete_attributes(s.stage, q, nullptr, 1, 2, &op), KSTAGE_INVALID_ARGUMENT,
           "NULL");
  KS_FAILS(kstage_delete_attributes(s.stage, q, &a, 1, 2, nullptr), KSTAGE_INVALID_ARGUMENT,
           "op is NULL");
  KS_FAILS(kstage_delete_attributes(0, q, &a, 1, 2, &op), KSTAGE_INVALID_HANDLE, "stage handle");
  REQUIRE(op == 0);
  REQUIRE(s.fingerprint(q, {a}) == before);
  s.seal(2);  // the ordinal the rejected calls used
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{prims[0], 1.f}, {prims[1], 2.f}});
  REQUIRE(existing(s) == prims);
}

TEST_CASE("prim modes see pending deletes (projected state)", "[delete][prim_mode]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  kstage_path_t p = s.path("/solo");
  kstage_query_t q = s.query({p});
  KS_OK(try_write(s, q, a, 1, {1.f}));
  s.seal(1);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{p});

  // Unsealed delete of the prim's only attribute at 2.
  KS_OK(s.remove(q, {a}, 2));
  // At 3 the prim is projected not to exist.
  KS_FAILS(try_write(s, q, a, 3, {5.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
           "UPDATE: prim '/solo' (element 0) does not exist");
  // At the same ordinal 2 but submitted after the delete, the prim is gone too.
  KS_FAILS(try_write(s, q, a, 2, {5.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND, "'/solo'");
  const std::string before = s.fingerprint(q, {a});
  KS_OK(try_write(s, q, a, 3, {7.f}, KSTAGE_PRIM_MODE_INSERT));
  REQUIRE(s.fingerprint(q, {a}) == before);  // nothing sealed yet
  // The INSERT at 3 is pending now: another INSERT at 4 sees the prim.
  KS_FAILS(try_write(s, q, a, 4, {8.f}, KSTAGE_PRIM_MODE_INSERT), KSTAGE_ALREADY_EXISTS,
           "INSERT: prim '/solo' (element 0) already exists");

  s.seal(2);
  REQUIRE(existing(s).empty());
  REQUIRE(s.read(q, {a}).empty());
  s.seal(3);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{p});
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{p, 7.f}});
}

TEST_CASE("prim modes: a pending delete at a later ordinal does not hide the prim earlier",
          "[delete][prim_mode]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  kstage_path_t p = s.path("/solo");
  kstage_query_t q = s.query({p});
  KS_OK(try_write(s, q, a, 1, {1.f}));
  s.seal(1);
  KS_OK(s.remove(q, {}, 5));  // prim delete at 5
  // At 3 the prim still exists.
  KS_FAILS(try_write(s, q, a, 3, {3.f}, KSTAGE_PRIM_MODE_INSERT), KSTAGE_ALREADY_EXISTS, "'/solo'");
  KS_OK(try_write(s, q, a, 3, {3.f}, KSTAGE_PRIM_MODE_UPDATE));
  // At 6 it is gone.
  KS_FAILS(try_write(s, q, a, 6, {6.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND, "'/solo'");
  s.seal(4);
  REQUIRE(scalars(s, q, a) == std::map<kstage_path_t, float>{{p, 3.f}});
  s.seal(5);
  REQUIRE(existing(s).empty());
}

// Prim modes see each attribute as sealed when its floor is past the write's ordinal (no
// history is kept), and pending mutations only when they are ordered before the write.
TEST_CASE("prim modes: an attribute sealed past the write's ordinal counts as it is",
          "[delete][prim_mode]") {
  Stage s(host_execution());
  const kstage_token_t a = s.token("a"), b = s.token("b");
  const kstage_query_t q = s.query({s.path("/late")});
  KS_OK(try_write(s, q, a, 8, {8.f}));                           // the prim gains a at 8, pending
  KS_OK(try_write(s, q, b, 3, {3.f}, KSTAGE_PRIM_MODE_INSERT));  // at 3 it does not exist yet
  KS_FAILS(try_write(s, q, b, 2, {2.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND, "'/late'");
  s.seal(10, {a});  // a alone, past 3
  const kstage_token_t c = s.token("c");
  KS_FAILS(try_write(s, q, c, 3, {3.f}, KSTAGE_PRIM_MODE_INSERT), KSTAGE_ALREADY_EXISTS, "'/late'");
  KS_OK(try_write(s, q, c, 3, {3.f}, KSTAGE_PRIM_MODE_UPDATE));
}

// The stage counts each prim's attributes in a byte, with counts from 255 on kept aside:
// a prim with hundreds of attributes exists exactly until its last one goes.
TEST_CASE("a prim with 300 attributes exists until its last attribute is deleted",
          "[delete][prims]") {
  Stage s(host_execution());
  const kstage_path_t p = s.path("/many"), other = s.path("/other");
  kstage_query_t q = s.query({p});
  std::vector<kstage_token_t> attrs;
  for (int i = 0; i < 300; ++i) attrs.push_back(s.token(("a" + std::to_string(i)).c_str()));
  for (size_t i = 0; i < attrs.size(); ++i) s.write_f32(q, attrs[i], 1, {float(i)});
  kstage_query_t o = s.query({other});
  s.write_f32(o, attrs[0], 1, {0.f});
  s.seal(1);
  REQUIRE(existing(s).size() == 2);
  // Delete all but one, in steps across the 255 boundary: the prim stays.
  uint64_t ordinal = 2;
  for (size_t from = 0; from < 299; from += 23) {
    std::vector<kstage_token_t> some(attrs.begin() + long(from),
                                     attrs.begin() + long(std::min<size_t>(from + 23, 299)));
    REQUIRE(s.remove(q, some, ordinal) == KSTAGE_OK);
    s.seal(ordinal++);
    REQUIRE(existing(s).size() == 2);
  }
  REQUIRE(s.floats(q, attrs[299]).at(p) == std::vector<float>{299.f});
  // Back up past 255 and down again.
  for (size_t i = 0; i < 280; ++i) s.write_f32(q, attrs[i], ordinal, {1.f});
  s.seal(ordinal++);
  REQUIRE(existing(s).size() == 2);
  REQUIRE(s.remove(q, {}, ordinal) == KSTAGE_OK);  // the prim itself: every attribute
  s.seal(ordinal++);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{other});
  kstage_filter_t f{};
  f.has_attributes = &attrs[0];
  f.has_attribute_count = 1;
  REQUIRE(s.filtered(f) == std::vector<kstage_path_t>{other});
}

// kstage.h "Prims: lifetime and visibility": a prim exists while it holds an attribute (sealed);
// queries see the sealed state; prim modes see the ledger at the write's ordinal.
TEST_CASE("a prim exists while it holds an attribute; queries see the sealed state",
          "[delete][lifetime]") {
  Stage s(host_execution());
  auto prims = s.paths("/life", 2);
  kstage_query_t q = s.query(prims);
  kstage_query_t first = s.query({prims[0]});
  const kstage_token_t a = s.token("a"), b = s.token("b");
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, first, b, 1, {3.f}));
  // Unsealed: no query sees the prims, but INSERT at a later ordinal does.
  REQUIRE(existing(s).empty());
  KS_FAILS(try_write(s, first, a, 2, {9.f}, KSTAGE_PRIM_MODE_INSERT), KSTAGE_ALREADY_EXISTS,
           "INSERT: prim '/life_0' (element 0) already exists");
  s.seal(1);
  REQUIRE(existing(s) == prims);
  // Deleting one of two attributes keeps the prim; deleting the last one, one by one, ends it.
  REQUIRE(s.remove(first, {a}, 2) == KSTAGE_OK);
  s.seal(2);
  REQUIRE(existing(s) == prims);
  REQUIRE(s.remove(first, {b}, 3) == KSTAGE_OK);
  REQUIRE(existing(s) == prims);  // the deletion is not sealed: still found
  s.seal(3);
  REQUIRE(existing(s) == std::vector<kstage_path_t>{prims[1]});
  // Gone means gone: UPDATE refuses it, INSERT makes it again, and the path stays interned.
  KS_FAILS(try_write(s, first, a, 4, {5.f}, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
           "'/life_0'");
  REQUIRE(s.path("/life_0") == prims[0]);
  KS_OK(try_write(s, first, a, 4, {5.f}, KSTAGE_PRIM_MODE_INSERT));
  s.seal(4);
  REQUIRE(existing(s) == prims);
}
