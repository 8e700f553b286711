// SPDX-License-Identifier: Apache-2.0
// Path dictionary: tokens, paths, strings back, path lists.
#include "support.hpp"

using namespace kstage_test;

TEST_CASE("tokens and paths intern to stable non-zero ids", "[dictionary]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("points"), b = s.token("points"), c = s.token("mass");
  REQUIRE(a != 0);
  REQUIRE(a == b);
  REQUIRE(a != c);
  kstage_path_t p = s.path("/world/body_17"), q = s.path("/world/body_17");
  REQUIRE(p != 0);
  REQUIRE(p == q);
  REQUIRE(s.path_string(p) == "/world/body_17");
  const char* str = nullptr;
  size_t len = 0;
  KS_OK(kstage_token_string(s.stage, a, &str, &len));
  REQUIRE(std::string(str) == "points");
  REQUIRE(len == 6);
  // Explicit lengths: only the given bytes count.
  kstage_token_t prefix = 0;
  KS_OK(kstage_intern_token(s.stage, "pointsXYZ", 6, &prefix));
  REQUIRE(prefix == a);
  // The root path is a path.
  REQUIRE(s.path("/") != 0);
}

TEST_CASE("empty strings and embedded NULs are rejected with a message", "[dictionary][errors]") {
  Stage s(host_execution());
  kstage_token_t t = 77;
  KS_FAILS(kstage_intern_token(s.stage, "", KSTAGE_NUL_TERMINATED, &t), KSTAGE_INVALID_ARGUMENT,
           "empty");
  KS_FAILS(kstage_intern_token(s.stage, "abc", 0, &t), KSTAGE_INVALID_ARGUMENT, "empty");
  KS_FAILS(kstage_intern_token(s.stage, "ab\0c", 4, &t), KSTAGE_INVALID_ARGUMENT,
           "embedded NUL at byte 2");
  KS_FAILS(kstage_intern_token(s.stage, nullptr, 3, &t), KSTAGE_INVALID_ARGUMENT, "NULL");
  REQUIRE(t == 77);  // out-parameters are written only on success
  kstage_path_t p = 0;
  KS_FAILS(kstage_intern_path(s.stage, "", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT,
           "empty");
  KS_FAILS(kstage_intern_path(s.stage, "/a\0b", 4, &p), KSTAGE_INVALID_ARGUMENT,
           "embedded NUL at byte 2");
  KS_FAILS(kstage_intern_path(s.stage, "world", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT,
           "not absolute");
  KS_FAILS(kstage_intern_path(s.stage, "/a//b", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT,
           "empty component");
  KS_FAILS(kstage_intern_path(s.stage, "/a/", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT,
           "ends with '/'");
  KS_FAILS(kstage_intern_token(s.stage, "x", KSTAGE_NUL_TERMINATED, nullptr),
           KSTAGE_INVALID_ARGUMENT, "token is NULL");
  REQUIRE(p == 0);
}

TEST_CASE("unknown ids have no string", "[dictionary][errors]") {
  Stage s(host_execution());
  kstage_path_t p = s.path("/a");
  const char* str = nullptr;
  KS_FAILS(kstage_path_string(s.stage, p + 100, &str, nullptr), KSTAGE_NOT_FOUND, "not interned");
  KS_FAILS(kstage_token_string(s.stage, 0, &str, nullptr), KSTAGE_NOT_FOUND, "token id 0");
  REQUIRE(str == nullptr);
}

TEST_CASE("path lists are refcounted copies", "[dictionary][path_list]") {
  Stage s(host_execution());
  std::vector<kstage_path_t> ids = s.paths("/p", 3);
  kstage_path_list_t list = 0;
  KS_OK(kstage_path_list_create(s.stage, ids.data(), ids.size(), &list));
  ids[0] = 0;  // the list holds its own copy
  const kstage_path_t* got = nullptr;
  uint64_t n = 0;
  KS_OK(kstage_path_list_get(s.stage, list, &got, &n));
  REQUIRE(n == 3);
  REQUIRE(got[0] == s.path("/p_0"));
  KS_OK(kstage_path_list_retain(s.stage, list));
  KS_OK(kstage_path_list_release(s.stage, list));
  KS_OK(kstage_path_list_get(s.stage, list, &got, &n));  // one reference left
  KS_OK(kstage_path_list_release(s.stage, list));
  KS_FAILS(kstage_path_list_get(s.stage, list, &got, &n), KSTAGE_INVALID_HANDLE,
           "path list handle");
  KS_FAILS(kstage_path_list_release(s.stage, list), KSTAGE_INVALID_HANDLE, "path list handle");
  KS_FAILS(kstage_path_list_retain(s.stage, list), KSTAGE_INVALID_HANDLE, "path list handle");
}

TEST_CASE("path lists reject ids that are not paths", "[dictionary][path_list][errors]") {
  Stage s(host_execution());
  kstage_path_t a = s.path("/a");
  kstage_path_t bad[2] = {a, a + 5};
  kstage_path_list_t list = 0;
  KS_FAILS(kstage_path_list_create(s.stage, bad, 2, &list), KSTAGE_INVALID_ARGUMENT, "paths[1]");
  KS_FAILS(kstage_path_list_create(s.stage, nullptr, 2, &list), KSTAGE_INVALID_ARGUMENT, "NULL");
  REQUIRE(list == 0);
  KS_OK(kstage_path_list_create(s.stage, nullptr, 0, &list));  // empty list is fine
  KS_OK(kstage_path_list_release(s.stage, list));
}

// Paths are a tree of (parent, leaf) nodes: ancestors a path needs are made
// hidden (no path of the stage) and keep their id when interned later.
TEST_CASE("ancestors get hidden ids that become paths when interned", "[dictionary][tree]") {
  Stage s(host_execution());
  const kstage_path_t deep = s.path("/a/b/c");
  // "/a" and "/a/b" exist as hidden nodes: ids below deep's, but not paths yet.
  const char* str = nullptr;
  for (kstage_path_t hidden = 1; hidden < deep; ++hidden) {
    KS_FAILS(kstage_path_string(s.stage, hidden, &str, nullptr), KSTAGE_NOT_FOUND, "not interned");
    kstage_query_t q = 0;
    KS_FAILS(kstage_query_paths(s.stage, &hidden, 1, &q), KSTAGE_INVALID_ARGUMENT, "not a path");
  }
  const kstage_path_t a = s.path("/a"), ab = s.path("/a/b");
  REQUIRE(a < ab);
  REQUIRE(ab < deep);
  REQUIRE(s.path_string(a) == "/a");
  REQUIRE(s.path_string(ab) == "/a/b");
  REQUIRE(s.path_string(deep) == "/a/b/c");
  // Siblings share the parent; similar strings are different paths.
  const kstage_path_t sib = s.path("/a/b/d"), ab2 = s.path("/ab"), abc = s.path("/a/bc");
  REQUIRE(sib == deep + 1);
  REQUIRE(ab2 != ab);
  REQUIRE(abc != ab);
  REQUIRE(s.path_string(ab2) == "/ab");
  REQUIRE(s.path_string(abc) == "/a/bc");
  // The root, and a path below it: "/" is a node of its own, not every top-level path's parent id.
  const kstage_path_t root = s.path("/");
  REQUIRE(s.path_string(root) == "/");
  REQUIRE(s.path("/") == root);
  REQUIRE(s.path_string(s.path("/x")) == "/x");
}

TEST_CASE("long, deep and unusual paths round trip", "[dictionary][tree]") {
  Stage s(host_execution());
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "/d" + std::to_string(i);
  const kstage_path_t d = s.path(deep);
  REQUIRE(s.path_string(d) == deep);
  const std::string long_leaf =
      "/big/" + std::string(3u << 20, 'x');  // beyond one 1 MiB leaf chunk
  const kstage_path_t l = s.path(long_leaf);
  REQUIRE(s.path_string(l) == long_leaf);
  REQUIRE(s.path(long_leaf) == l);
  // Leaves of every length around the hash's 8-byte words, and bytes of every value but NUL and
  // '/'.
  std::map<kstage_path_t, std::string> made;
  for (size_t len = 1; len <= 20; ++len) {
    std::string leaf;
    for (size_t k = 0; k < len; ++k)
      leaf += char(1 + (k * 37 + len) % 254 == '/' ? 1 : 1 + (k * 37 + len) % 254);
    const std::string p = "/bytes/" + leaf;
    made[s.path(p)] = p;
  }
  REQUIRE(made.size() == 20);
  for (const auto& [id, p] : made) {
    REQUIRE(s.path_string(id) == p);
    REQUIRE(s.path(p) == id);
  }
  // The string kstage_path_string hands out stays put.
  const char* first = nullptr;
  const char* again = nullptr;
  KS_OK(kstage_path_string(s.stage, d, &first, nullptr));
  for (int i = 0; i < 1000; ++i) s.path("/more/p" + std::to_string(i));
  KS_OK(kstage_path_string(s.stage, d, &again, nullptr));
  REQUIRE(first == again);
  REQUIRE(std::string(first) == deep);
}

TEST_CASE("many paths keep their ids as the index grows", "[dictionary][tree]") {
  Stage s(host_execution());
  std::vector<kstage_path_t> ids;
  for (int i = 0; i < 50000; ++i) ids.push_back(s.path("/world/particles/p" + std::to_string(i)));
  for (int i = 0; i < 50000; i += 997) {
    REQUIRE(s.path("/world/particles/p" + std::to_string(i)) == ids[size_t(i)]);
    REQUIRE(s.path_string(ids[size_t(i)]) == "/world/particles/p" + std::to_string(i));
  }
  REQUIRE(ids.back() == ids.front() + 49999);  // siblings after the first: consecutive ids
}

TEST_CASE("kstage_intern_paths interns a batch, or nothing when a string is bad",
          "[dictionary][bulk]") {
  Stage s(host_execution());
  const kstage_path_t before = s.path("/probe/1");
  std::vector<std::string> strs;
  for (int i = 0; i < 100; ++i) strs.push_back("/bulk/q" + std::to_string(i));
  strs.push_back("/other/x");
  std::vector<const char*> ptrs;
  for (const auto& x : strs) ptrs.push_back(x.c_str());
  std::vector<kstage_path_t> ids(strs.size(), 0);
  KS_OK(kstage_intern_paths(s.stage, ptrs.data(), nullptr, ptrs.size(), ids.data()));
  for (size_t i = 0; i < strs.size(); ++i) {
    REQUIRE(ids[i] != 0);
    REQUIRE(s.path(strs[i]) == ids[i]);
  }
  // Explicit lengths, repeats and paths interned before.
  const char* with_len[3] = {"/bulk/q5XXXX", "/bulk/q5", "/probe/1"};
  const size_t lens[3] = {8, KSTAGE_NUL_TERMINATED, KSTAGE_NUL_TERMINATED};
  kstage_path_t three[3] = {0, 0, 0};
  KS_OK(kstage_intern_paths(s.stage, with_len, lens, 3, three));
  REQUIRE(three[0] == ids[5]);
  REQUIRE(three[1] == ids[5]);
  REQUIRE(three[2] == before);
  // A bad string anywhere: INVALID_ARGUMENT naming it, nothing interned, nothing written.
  const char* bad[3] = {"/fresh/a", "/fresh/b", "relative"};
  kstage_path_t out[3] = {7, 7, 7};
  KS_FAILS(kstage_intern_paths(s.stage, bad, nullptr, 3, out), KSTAGE_INVALID_ARGUMENT,
           "strings[2]: path 'relative' is not absolute");
  REQUIRE(out[0] == 7);
  const char* nul[2] = {"/fresh/c", nullptr};
  KS_FAILS(kstage_intern_paths(s.stage, nul, nullptr, 2, out), KSTAGE_INVALID_ARGUMENT,
           "strings[1]");
  const kstage_path_t after = s.path("/probe/2");
  REQUIRE(after == ids.back() + 1);  // "/fresh" was never made, not even hidden
  KS_FAILS(kstage_intern_paths(s.stage, nullptr, nullptr, 2, out), KSTAGE_INVALID_ARGUMENT,
           "strings is NULL");
  KS_FAILS(kstage_intern_paths(s.stage, bad, nullptr, 2, nullptr), KSTAGE_INVALID_ARGUMENT,
           "paths is NULL");
  KS_OK(kstage_intern_paths(s.stage, nullptr, nullptr, 0, nullptr));
  KS_FAILS(kstage_intern_paths(0, bad, nullptr, 2, out), KSTAGE_INVALID_HANDLE, "stage");
}

TEST_CASE("prefix filters follow the tree", "[dictionary][tree][queries]") {
  Stage s(host_execution());
  const auto a = s.path("/w/a"), ab = s.path("/w/a/b"), abc = s.path("/w/a/b/c"),
             wab = s.path("/w/ab"), other = s.path("/v/a");
  kstage_token_t t = s.token("t");
  kstage_query_t all = s.query({a, ab, abc, wab, other});
  s.write_f32(all, t, 1, {1, 2, 3, 4, 5});
  s.seal(1);
  auto filtered = [&](kstage_path_t prefix) {
    kstage_filter_t f{};
    f.path_prefix = prefix;
    return s.filtered(f);
  };
  REQUIRE(filtered(a) == std::vector<kstage_path_t>{a, ab, abc});
  REQUIRE(filtered(ab) == std::vector<kstage_path_t>{ab, abc});
  REQUIRE(filtered(wab) == std::vector<kstage_path_t>{wab});
  // "/w" was hidden until now; interning it makes it a prefix (it holds no attribute itself).
  const kstage_path_t w = s.path("/w");
  REQUIRE(w < a);
  REQUIRE(filtered(w) == std::vector<kstage_path_t>{a, ab, abc, wab});
  REQUIRE(filtered(s.path("/")) == std::vector<kstage_path_t>{a, ab, abc, wab, other});
  REQUIRE(filtered(s.path("/v/a/zz")).empty());
  // A hidden node is not a prefix one may name.
  kstage_filter_t f{};
  f.path_prefix = s.path("/h/x/y") - 1;  // "/h/x", hidden
  kstage_query_t q = 0;
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT, "path_prefix");
}
