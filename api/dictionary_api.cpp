// SPDX-License-Identifier: Apache-2.0
// Tokens, paths and path lists.
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

namespace {

kstage_status_t intern(kstage_stage_t stage, const char* str, size_t length, uint64_t* out,
                       bool path) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(out, path ? "path" : "token"));
    auto& dict = s.engine->dictionary();
    KSTAGE_ASSIGN_OR_RETURN(*out,
                            path ? dict.intern_path(str, length) : dict.intern_token(str, length));
    return Status::OK();
  });
}

kstage_status_t string_of(kstage_stage_t stage, uint64_t id, const char** str, size_t* length,
                          bool path) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(str, "str"));
    auto& dict = s.engine->dictionary();
    const std::string* v = path ? dict.stable_path(id) : dict.token(id);
    if (!v)
      return error(KSTAGE_NOT_FOUND, "%s id %llu is not interned in this stage",
                   path ? "path" : "token", (unsigned long long)id);
    *str = v->c_str();
    if (length) *length = v->size();
    return Status::OK();
  });
}

}  // namespace

extern "C" {

kstage_status_t kstage_intern_token(kstage_stage_t stage, const char* str, size_t length,
                                    kstage_token_t* token) {
  return intern(stage, str, length, token, false);
}
kstage_status_t kstage_intern_path(kstage_stage_t stage, const char* str, size_t length,
                                   kstage_path_t* path) {
  return intern(stage, str, length, path, true);
}
kstage_status_t kstage_intern_paths(kstage_stage_t stage, const char* const* strings,
                                    const size_t* lengths, uint64_t count, kstage_path_t* paths) {
  return with_stage("kstage::intern_paths", stage, [&](StageEntry& s) -> Status {
    return s.engine->dictionary().intern_paths(strings, lengths, count, paths);
  });
}
kstage_status_t kstage_intern_path_range(kstage_stage_t stage, const char* parent,
                                         size_t parent_length, const char* prefix,
                                         size_t prefix_length, uint64_t begin, uint64_t count,
                                         kstage_path_t* first) {
  return with_stage("kstage::intern_path_range", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(first, "first"));
    KSTAGE_ASSIGN_OR_RETURN(*first,
                            s.engine->dictionary().intern_path_range(parent, parent_length, prefix,
                                                                     prefix_length, begin, count));
    return Status::OK();
  });
}
kstage_status_t kstage_path_range_info(kstage_stage_t stage, kstage_path_t path,
                                       kstage_path_t* first, uint64_t* count, uint64_t* index) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    core::PathTree::Range r;
    if (!s.engine->dictionary().path_range(path, r))
      return error(KSTAGE_NOT_FOUND, "path %llu is not a member of a path range of this stage",
                   (unsigned long long)path);
    if (first) *first = r.first;
    if (count) *count = r.count;
    if (index) *index = path - r.first;
    return Status::OK();
  });
}
kstage_status_t kstage_path_range_definition(kstage_stage_t stage, kstage_path_t first,
                                             const char** parent, size_t* parent_length,
                                             const char** prefix, size_t* prefix_length,
                                             uint64_t* begin) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    core::Dictionary& d = s.engine->dictionary();
    core::PathTree::Range r;
    const core::PathTree::RangeStrings* strings = d.stable_range_strings(first);
    if (strings == nullptr || !d.path_range(first, r))
      return error(KSTAGE_INVALID_ARGUMENT,
                   "range %llu is not the first path of a path range of this stage",
                   (unsigned long long)first);
    if (parent) *parent = strings->parent.c_str();
    if (parent_length) *parent_length = strings->parent.size();
    if (prefix) *prefix = strings->prefix.c_str();
    if (prefix_length) *prefix_length = strings->prefix.size();
    if (begin) *begin = r.begin;
    return Status::OK();
  });
}
kstage_status_t kstage_path_range_member(kstage_stage_t stage, kstage_path_t first, uint64_t index,
                                         kstage_path_t* path) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(path, "path"));
    core::PathTree::Range r;
    if (!s.engine->dictionary().path_range(first, r) || r.first != first)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "range %llu is not the first path of a path range of this stage",
                   (unsigned long long)first);
    if (index >= r.count)
      return error(KSTAGE_INVALID_ARGUMENT, "index %llu is beyond the range's %llu paths",
                   (unsigned long long)index, (unsigned long long)r.count);
    *path = first + index;
    return Status::OK();
  });
}
kstage_status_t kstage_token_string(kstage_stage_t stage, kstage_token_t token, const char** str,
                                    size_t* length) {
  return string_of(stage, token, str, length, false);
}
kstage_status_t kstage_path_string(kstage_stage_t stage, kstage_path_t path, const char** str,
                                   size_t* length) {
  return string_of(stage, path, str, length, true);
}

kstage_status_t kstage_path_list_create(kstage_stage_t stage, const kstage_path_t* paths,
                                        uint64_t count, kstage_path_list_t* list) {
  return with_stage("kstage::path_list_create", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(list, "list"));
    if (count > 0 && paths == nullptr)
      return error(KSTAGE_INVALID_ARGUMENT, "paths is NULL but count is %llu",
                   (unsigned long long)count);
    for (uint64_t i = 0; i < count; ++i)
      if (!s.engine->dictionary().is_path(paths[i]))
        return error(KSTAGE_INVALID_ARGUMENT, "paths[%llu] = %llu is not a path of this stage",
                     (unsigned long long)i, (unsigned long long)paths[i]);
    auto l = std::make_shared<PathList>();
    l->paths = std::make_shared<const std::vector<uint64_t>>(paths, paths + count);
    *list = s.path_lists.add(Kind::PathList, std::move(l));
    return Status::OK();
  });
}

kstage_status_t kstage_path_list_get(kstage_stage_t stage, kstage_path_list_t list,
                                     const kstage_path_t** paths, uint64_t* count) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(paths, "paths"));
    KSTAGE_RETURN_NOT_OK(need(count, "count"));
    std::shared_ptr<PathList> l;
    KSTAGE_ASSIGN_OR_RETURN(l, lookup(s.path_lists, list, Kind::PathList));
    *paths = l->paths->data();
    *count = l->paths->size();
    return Status::OK();
  });
}

kstage_status_t kstage_path_list_retain(kstage_stage_t stage, kstage_path_list_t list) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<PathList> l;
    KSTAGE_ASSIGN_OR_RETURN(l, lookup(s.path_lists, list, Kind::PathList));
    std::lock_guard lock(l->mutex);
    if (l->refs == 0)  // lost a race with the last release
      return error(KSTAGE_INVALID_HANDLE, "path list handle %llu was released",
                   (unsigned long long)list);
    ++l->refs;
    return Status::OK();
  });
}

kstage_status_t kstage_path_list_release(kstage_stage_t stage, kstage_path_list_t list) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<PathList> l;
    KSTAGE_ASSIGN_OR_RETURN(l, lookup(s.path_lists, list, Kind::PathList));
    std::lock_guard lock(l->mutex);
    if (l->refs == 0)
      return error(KSTAGE_INVALID_HANDLE, "path list handle %llu was released",
                   (unsigned long long)list);
    if (--l->refs == 0) s.path_lists.take(list);
    return Status::OK();
  });
}

}  // extern "C"
