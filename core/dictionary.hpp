// SPDX-License-Identifier: Apache-2.0
// Path dictionary: interns attribute names (tokens) and prim paths to uint64
// ids. Strings are never freed while the stage lives, so the pointers handed
// out by string() stay valid; ids start at 1 (0 is invalid).
#pragma once

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
  const std::string* token(uint64_t id) const { return tokens_.find(id); }
  const std::string* path(uint64_t id) const { return paths_.find(id); }
  bool is_token(uint64_t id) const { return tokens_.contains(id); }
  bool is_path(uint64_t id) const { return paths_.contains(id); }
  uint64_t path_count() const { return paths_.size(); }

  // True if `path` equals `prefix` or lies below it ("/a" covers "/a/b", not "/ab").
  static bool path_has_prefix(std::string_view path, std::string_view prefix);

 private:
  StringTable tokens_;
  StringTable paths_;
};

}  // namespace kstage::core
