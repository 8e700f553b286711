// SPDX-License-Identifier: Apache-2.0
#include "core/reserved_names.hpp"

#include "core/dtype.hpp"

#include <string>

namespace kstage::core {

Status check_reserved_name(std::string_view name, const Schema& s) {
  if (name == KSTAGE_PATH_ATTRIBUTE || name == KSTAGE_PARENT_ATTRIBUTE ||
      name == KSTAGE_CHILDREN_ATTRIBUTE)
    return error(KSTAGE_NOT_SUPPORTED,
                 "'%.*s' is a reserved name derived from paths (the hierarchy): it cannot be "
                 "written or mapped",
                 int(name.size()), name.data());
  const bool type = name == KSTAGE_PRIM_TYPE, schemas = name == KSTAGE_APPLIED_SCHEMAS;
  if (!type && !schemas) return Status::OK();
  const bool token_ids = s.dtype.code == kDLUInt && s.dtype.bits == 64 && s.dtype.lanes == 1 &&
                         s.semantic == KSTAGE_SEMANTIC_TOKEN_ID;
  if (token_ids && s.is_array == schemas) return Status::OK();
  return error(KSTAGE_INVALID_ARGUMENT,
               "'%.*s' is a reserved name: it must be %s, dtype uint64 lanes 1, semantic "
               "TOKEN_ID (got %s, dtype %s, semantic %s)",
               int(name.size()), name.data(), schemas ? "an array column" : "a fixed-size column",
               s.is_array ? "an array column" : "a fixed-size column",
               dtype_string(s.dtype).c_str(), semantic_name(s.semantic));
}

}  // namespace kstage::core
