// SPDX-License-Identifier: Apache-2.0
// PathTree's copies of a subtree with a path range in it (kstage_clone): the check
// (find_copies) and the copy (intern_copies) each refuse a range that a target's paths make
// impossible, naming it -- the copy also when such a path was interned after the check, as
// another thread may do between the two.
#include "core/path_tree.hpp"

#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

using kstage::core::PathTree;

namespace {

// /src, its range /src/pts/p{0..7}, and the shape of /src reaching members 2 and 5.
struct Source {
  PathTree tree;
  uint64_t src = 0, first = 0;
  std::vector<PathTree::ShapeNode> shape;
  Source() {
    src = tree.intern("/src");
    std::string why;
    first = tree.intern_range("/src/pts", "p", 0, 8, why);
    REQUIRE(first != 0);
    const uint64_t ids[] = {first + 2, first + 5};
    std::vector<uint32_t> index;
    tree.subtree_shape(src, ids, 2, shape, index);
    REQUIRE(index[0] != PathTree::kNotBelow);
    REQUIRE(index[1] != PathTree::kNotBelow);
  }
};

}  // namespace

TEST_CASE("a range copy that a path interned after the check makes impossible is refused",
          "[path_tree][clone]") {
  Source s;
  REQUIRE(s.shape.size() == 3);  // /src/pts, p2, p5
  CHECK_FALSE(s.shape[0].member);
  CHECK(s.shape[1].member);
  CHECK(s.shape[2].member);
  const uint64_t targets[] = {s.tree.intern("/a"), s.tree.intern("/b")};
  std::vector<uint64_t> found;
  std::string conflict;
  CHECK_FALSE(s.tree.find_copies(targets, 2, s.shape, found, conflict));
  CHECK(conflict.empty());
  // Another thread interns /b/pts/p7 now: /b's range copy can no longer be made.
  s.tree.intern("/b/pts/p7");
  std::vector<uint64_t> copies;
  CHECK(s.tree.intern_copies(targets, 2, s.shape, copies, conflict) == 0);
  CHECK(conflict ==
        "the copy of the path range '/src/pts/p0' ... for '/b' cannot be made under '/b/pts': "
        "its member '/b/pts/p7' was interned before");
  // The check sees it too now.
  std::string again;
  CHECK(s.tree.find_copies(targets, 2, s.shape, found, again));
  CHECK(again == conflict);
}

TEST_CASE("range copies are ranges: consecutive members below each target's parent copy",
          "[path_tree][clone]") {
  Source s;
  const uint64_t targets[] = {s.tree.intern("/a"), s.tree.intern("/b")};
  std::vector<uint64_t> copies;
  std::string conflict;
  REQUIRE(s.tree.intern_copies(targets, 2, s.shape, copies, conflict) == 0);  // (no block)
  REQUIRE(conflict.empty());
  REQUIRE(copies.size() == 6);
  for (size_t t = 0; t < 2; ++t) {
    const std::string base = t == 0 ? "/a" : "/b";
    CHECK_FALSE(s.tree.contains(copies[t * 3]));  // /pts: hidden (an ancestor), as the source's
    CHECK(s.tree.path(copies[t * 3 + 1]) == base + "/pts/p2");
    CHECK(copies[t * 3 + 2] == copies[t * 3 + 1] + 3);  // p5: the same range's member
    PathTree::Range r;
    REQUIRE(s.tree.range_of(copies[t * 3 + 1], r));
    CHECK(r.count == 8);
    CHECK(r.prefix == "p");
    CHECK(r.parent == copies[t * 3]);
  }
  // Again to the same targets: the ranges exist, the same members are found, nothing made.
  std::vector<uint64_t> found;
  CHECK(s.tree.find_copies(targets, 2, s.shape, found, conflict));
  CHECK(conflict.empty());
  CHECK(found == copies);
}
