// SPDX-License-Identifier: Apache-2.0
// The dictionary: interns attribute names (tokens) and prim paths to uint64
// ids, which start at 1 (0 is invalid). Tokens are few: a string table whose
// strings live as long as the stage. Paths can be 1e8: a tree of
// (parent, leaf) nodes in arenas (core/path_tree.hpp), strings made on demand.
#pragma once

#include "core/path_tree.hpp"
#include "core/status.hpp"

#include <deque>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kstage::core {

class StringTable {
 public:
  // Returns the existing id for `s` or a new one.
  uint64_t intern(std::string_view s);
  // Null if `id` is not an id of this table.
  const std::string* find(uint64_t id) const;
  bool contains(uint64_t id) const { return find(id) != nullptr; }
  uint64_t size() const;  // ids are 1..size()

 private:
  mutable std::shared_mutex mutex_;
  std::deque<std::string> strings_;  // deque: stable addresses for string_view keys
  std::unordered_map<std::string_view, uint64_t> ids_;
};

class Dictionary {
 public:
  Result<uint64_t> intern_token(const char* str, size_t length);
  Result<uint64_t> intern_path(const char* str, size_t length);
  // Interns `n` paths (lengths null: NUL-terminated). Every string is checked
  // first: on failure nothing is interned and the message names strings[i].
  Status intern_paths(const char* const* strings, const size_t* lengths, uint64_t n, uint64_t* ids);
  // A range of `count` paths "<parent>/<prefix><begin + i>" (kstage_intern_path_range):
  // its first id.
  Result<uint64_t> intern_path_range(const char* parent, size_t parent_length, const char* prefix,
                                     size_t prefix_length, uint64_t begin, uint64_t count);
  // The range `path` is a member of (false: none).
  bool path_range(uint64_t path, PathTree::Range& out) const { return paths_.range_of(path, out); }
  // (first id, count) of every path range, in id order.
  std::vector<std::pair<uint64_t, uint64_t>> path_range_extents() const {
    return paths_.range_extents();
  }
  // The parent and prefix of the range whose first id is `first`, kept for the stage's
  // lifetime (null: no range starts there).
  const PathTree::RangeStrings* stable_range_strings(uint64_t first) const {
    return paths_.stable_range_strings(first);
  }
  const std::string* token(uint64_t id) const { return tokens_.find(id); }
  bool is_token(uint64_t id) const { return tokens_.contains(id); }
  bool is_path(uint64_t id) const { return paths_.contains(id); }
  // The path's string ("" if `id` is not a path), made on demand.
  std::string path(uint64_t id) const { return paths_.path(id); }
  // The same, kept for the stage's lifetime (kstage_path_string); null if not a path.
  const std::string* stable_path(uint64_t id) const { return paths_.stable_path(id); }
  // The parent of a path in the tree of paths (PathTree::parent: hidden ancestors included;
  // "/" above top-level paths once "/" was interned; 0 at the top).
  uint64_t path_parent(uint64_t id) const { return paths_.parent(id); }
  void path_parents(const uint64_t* ids, size_t n, uint64_t* out) const {
    paths_.parents(ids, n, out);
  }
  // Every path id is below this.
  uint64_t path_id_bound() const { return paths_.id_bound(); }
  // Keeps the paths of `ids` that equal `prefix` or lie below it ("/a" covers
  // "/a/b", not "/ab").
  void keep_at_or_below(uint64_t prefix, std::vector<uint64_t>& ids) const {
    paths_.keep_at_or_below(prefix, ids);
  }
  // Copies of a subtree's paths below other paths (kstage_clone; PathTree::subtree_shape).
  void subtree_shape(uint64_t root, const uint64_t* ids, size_t n,
                     std::vector<PathTree::ShapeNode>& shape, std::vector<uint32_t>& index) const {
    paths_.subtree_shape(root, ids, n, shape, index);
  }
  bool find_copies(const uint64_t* targets, size_t nt,
                   const std::vector<PathTree::ShapeNode>& shape, std::vector<uint64_t>& out,
                   std::string& conflict) const {
    return paths_.find_copies(targets, nt, shape, out, conflict);
  }
  uint64_t intern_copies(const uint64_t* targets, size_t nt,
                         const std::vector<PathTree::ShapeNode>& shape, std::vector<uint64_t>& out,
                         std::string& conflict) {
    return paths_.intern_copies(targets, nt, shape, out, conflict);
  }
  size_t path_memory_bytes() const { return paths_.memory_bytes(); }

 private:
  StringTable tokens_;
  PathTree paths_;
};

}  // namespace kstage::core
