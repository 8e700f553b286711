// SPDX-License-Identifier: Apache-2.0
#include "core/dictionary.hpp"

#include <cstring>
#include <mutex>

namespace kstage::core {

uint64_t StringTable::intern(std::string_view s) {
  {
    std::shared_lock lock(mutex_);
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
  }
  std::unique_lock lock(mutex_);
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  strings_.emplace_back(s);
  uint64_t id = strings_.size();
  ids_.emplace(std::string_view(strings_.back()), id);
  return id;
}

uint64_t StringTable::size() const {
  std::shared_lock lock(mutex_);
  return strings_.size();
}

const std::string* StringTable::find(uint64_t id) const {
  std::shared_lock lock(mutex_);
  if (id == 0 || id > strings_.size()) return nullptr;
  return &strings_[id - 1];
}

namespace {

Result<std::string_view> checked_string(const char* what, const char* str, size_t length) {
  if (str == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s: string is NULL", what);
  if (length == KSTAGE_NUL_TERMINATED) length = std::strlen(str);
  if (length == 0) return error(KSTAGE_INVALID_ARGUMENT, "%s: empty string", what);
  const void* nul = std::memchr(str, '\0', length);
  if (nul != nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: embedded NUL at byte %zu of %zu", what,
                 static_cast<size_t>(static_cast<const char*>(nul) - str), length);
  return std::string_view(str, length);
}

}  // namespace

Result<uint64_t> Dictionary::intern_token(const char* str, size_t length) {
  std::string_view s;
  KSTAGE_ASSIGN_OR_RETURN(s, checked_string("token", str, length));
  return tokens_.intern(s);
}

namespace {

Status check_path_syntax(std::string_view s) {
  std::string shown(s.substr(0, 64));
  if (s.front() != '/')
    return error(KSTAGE_INVALID_ARGUMENT, "path '%s' is not absolute (must start with '/')",
                 shown.c_str());
  if (s.size() > 1 && s.back() == '/')
    return error(KSTAGE_INVALID_ARGUMENT, "path '%s' ends with '/'", shown.c_str());
  if (s.find("//") != std::string_view::npos)
    return error(KSTAGE_INVALID_ARGUMENT, "path '%s' has an empty component ('//')", shown.c_str());
  return Status::OK();
}

}  // namespace

Result<uint64_t> Dictionary::intern_path(const char* str, size_t length) {
  std::string_view s;
  KSTAGE_ASSIGN_OR_RETURN(s, checked_string("path", str, length));
  KSTAGE_RETURN_NOT_OK(check_path_syntax(s));
  return paths_.intern(s);
}

Result<uint64_t> Dictionary::intern_path_range(const char* parent, size_t parent_length,
                                               const char* prefix, size_t prefix_length,
                                               uint64_t begin, uint64_t count) {
  std::string_view under;
  KSTAGE_ASSIGN_OR_RETURN(under, checked_string("parent", parent, parent_length));
  if (Status st = check_path_syntax(under); !st.ok())
    return Status(st.code(), "parent: " + st.message());
  if (prefix == nullptr && prefix_length != 0 && prefix_length != KSTAGE_NUL_TERMINATED)
    return error(KSTAGE_INVALID_ARGUMENT, "prefix is NULL but prefix_length is %zu", prefix_length);
  std::string_view lead;
  if (prefix != nullptr) {
    const size_t n = prefix_length == KSTAGE_NUL_TERMINATED ? std::strlen(prefix) : prefix_length;
    lead = std::string_view(prefix, n);
    const size_t bad = lead.find_first_of(std::string_view("/\0", 2));
    if (bad != std::string_view::npos)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "prefix '%s' holds a %s at byte %zu: it is the start of one path component",
                   std::string(lead.substr(0, std::min<size_t>(bad, 64))).c_str(),
                   lead[bad] == '/' ? "'/'" : "NUL", bad);
  }
  if (count == 0 || count > UINT32_MAX)
    return error(KSTAGE_INVALID_ARGUMENT, "count %llu: a range holds 1 to 2^32 - 1 paths",
                 (unsigned long long)count);
  if (begin > UINT64_MAX - (count - 1))
    return error(KSTAGE_INVALID_ARGUMENT, "begin %llu + count %llu overflows a 64-bit number",
                 (unsigned long long)begin, (unsigned long long)count);
  std::string why;
  const uint64_t first = paths_.intern_range(under, lead, begin, count, why);
  if (first == 0) {
    const std::string name = (under == "/" ? std::string() : std::string(under.substr(0, 64))) +
                             "/" + std::string(lead.substr(0, 64));
    return error(KSTAGE_ALREADY_EXISTS, "range '%s[%llu..%llu]': %s", name.c_str(),
                 (unsigned long long)begin, (unsigned long long)(begin + (count - 1)), why.c_str());
  }
  return first;
}

Status Dictionary::intern_paths(const char* const* strings, const size_t* lengths, uint64_t n,
                                uint64_t* ids) {
  if (n > 0 && strings == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "strings is NULL but count is %llu",
                 (unsigned long long)n);
  if (n > 0 && ids == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "paths is NULL but count is %llu", (unsigned long long)n);
  std::vector<std::string_view> views(n);
  for (uint64_t i = 0; i < n; ++i) {
    Result<std::string_view> r =
        checked_string("path", strings[i], lengths ? lengths[i] : KSTAGE_NUL_TERMINATED);
    Status st = r.ok() ? check_path_syntax(r.value()) : r.status();
    if (!st.ok())
      return Status(st.code(),
                    format("strings[%llu]: %s", (unsigned long long)i, st.message().c_str()));
    views[i] = r.value();
  }
  paths_.intern_many(views.data(), views.size(), ids);
  return Status::OK();
}

}  // namespace kstage::core
