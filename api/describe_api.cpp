// SPDX-License-Identifier: Apache-2.0
// Describing a stage: kstage_list_attributes, kstage_attribute_info, kstage_attribute_schema.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/stage.hpp"

#include <algorithm>

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_list_attributes(kstage_stage_t stage, kstage_token_t* attributes,
                                       uint64_t capacity, uint64_t* count) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(count, "count"));
    if (capacity > 0 && attributes == nullptr)
      return error(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but capacity is %llu",
                   (unsigned long long)capacity);
    const std::vector<uint64_t> all = s.engine->attributes();
    std::copy_n(all.begin(), std::min<uint64_t>(capacity, all.size()), attributes);
    *count = all.size();
    return Status::OK();
  });
}

kstage_status_t kstage_attribute_info(kstage_stage_t stage, kstage_token_t attribute,
                                      kstage_attribute_info_t* info) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    if (info == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "info is NULL");
    kstage_attribute_info_t found;
    KSTAGE_ASSIGN_OR_RETURN(found, s.engine->attribute_info(attribute));
    return write_descriptor(found, info, "info");
  });
}

kstage_status_t kstage_attribute_schema(kstage_stage_t stage, kstage_token_t attribute,
                                        uint64_t index, kstage_attribute_info_t* info) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    if (info == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "info is NULL");
    kstage_attribute_info_t found;
    KSTAGE_ASSIGN_OR_RETURN(found, s.engine->attribute_schema(attribute, index));
    return write_descriptor(found, info, "info");
  });
}

}  // extern "C"
