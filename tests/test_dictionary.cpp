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
  KS_FAILS(kstage_intern_token(s.stage, "", KSTAGE_NUL_TERMINATED, &t), KSTAGE_INVALID_ARGUMENT, "empty");
  KS_FAILS(kstage_intern_token(s.stage, "abc", 0, &t), KSTAGE_INVALID_ARGUMENT, "empty");
  KS_FAILS(kstage_intern_token(s.stage, "ab\0c", 4, &t), KSTAGE_INVALID_ARGUMENT, "embedded NUL at byte 2");
  KS_FAILS(kstage_intern_token(s.stage, nullptr, 3, &t), KSTAGE_INVALID_ARGUMENT, "NULL");
  REQUIRE(t == 77);  // out-parameters are written only on success
  kstage_path_t p = 0;
  KS_FAILS(kstage_intern_path(s.stage, "", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT, "empty");
  KS_FAILS(kstage_intern_path(s.stage, "/a\0b", 4, &p), KSTAGE_INVALID_ARGUMENT, "embedded NUL at byte 2");
  KS_FAILS(kstage_intern_path(s.stage, "world", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT, "not absolute");
  KS_FAILS(kstage_intern_path(s.stage, "/a//b", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT, "empty component");
  KS_FAILS(kstage_intern_path(s.stage, "/a/", KSTAGE_NUL_TERMINATED, &p), KSTAGE_INVALID_ARGUMENT, "ends with '/'");
  KS_FAILS(kstage_intern_token(s.stage, "x", KSTAGE_NUL_TERMINATED, nullptr), KSTAGE_INVALID_ARGUMENT, "token is NULL");
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
  KS_FAILS(kstage_path_list_get(s.stage, list, &got, &n), KSTAGE_INVALID_HANDLE, "path list handle");
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
