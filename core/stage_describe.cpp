// SPDX-License-Identifier: Apache-2.0
// Describing a stage: what a generic consumer (a checkpoint writer, a viewer) asks of a stage
// it did not fill -- its attributes, each column's schema, residency, write floor and prim count.
#include "core/stage.hpp"

namespace kstage::core {

std::vector<uint64_t> Stage::attributes() const {
  std::lock_guard lock(mutex_);
  std::vector<uint64_t> out;
  out.reserve(columns_.size());
  for (const auto& [attribute, column] : columns_)
    out.push_back(attribute);  // std::map: token order
  return out;
}

Result<kstage_attribute_info_t> Stage::attribute_info(uint64_t attribute) const {
  KSTAGE_RETURN_NOT_OK(check_token(attribute, "attribute", 0));
  std::lock_guard lock(mutex_);
  const Column* c = column(attribute);
  if (c == nullptr)
    return error(KSTAGE_NOT_FOUND, "attribute '%s' has no column: nothing has written or mapped it",
                 token_name(attribute).c_str());
  kstage_attribute_info_t info{};
  info.semantic = c->schema().semantic;
  info.attribute = attribute;
  info.dtype = c->schema().dtype;
  info.is_array = c->schema().is_array;
  info.residency = c->backend().device();
  info.write_floor = floor_of(attribute);
  info.prim_count = c->live_rows();
  return info;
}

}  // namespace kstage::core
