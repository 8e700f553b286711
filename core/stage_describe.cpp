// SPDX-License-Identifier: Apache-2.0
// Describing a stage: what a generic consumer (a checkpoint writer, a viewer) asks of a stage
// it did not fill -- its attributes, each column's schema, residency, write floor and prim count.
#include "core/stage.hpp"

namespace kstage::core {

std::vector<uint64_t> Stage::attributes() const {
  std::lock_guard lock(mutex_);
  std::vector<uint64_t> out;
  out.reserve(columns_.size());
  for (const auto& [key, column] : columns_)  // token order, a name's columns adjacent
    if (out.empty() || out.back() != key.first) out.push_back(key.first);
  return out;
}

namespace {

kstage_attribute_info_t describe_column(const Column& c) {
  kstage_attribute_info_t info{};
  info.semantic = c.schema().semantic;
  info.attribute = c.attribute();
  info.dtype = c.schema().dtype;
  info.is_array = c.schema().is_array;
  info.residency = c.backend().device();
  info.prim_count = c.live_rows();
  return info;
}

}  // namespace

Result<kstage_attribute_info_t> Stage::attribute_info(uint64_t attribute) const {
  KSTAGE_RETURN_NOT_OK(check_token(attribute, "attribute", 0));
  std::lock_guard lock(mutex_);
  // The column holding the most sealed prims (of equals, the newest) describes the name; the
  // count is of every prim holding it (in one column each).
  const Column* shown = nullptr;
  uint64_t prims = 0, schemas = 0;
  for (const auto& [key, c] : columns_.of(attribute)) {
    if (!shown || c->live_rows() >= shown->live_rows()) shown = c.get();
    prims += c->live_rows();
    ++schemas;
  }
  if (shown == nullptr)
    return error(KSTAGE_NOT_FOUND, "attribute '%s' has no column: nothing has written or mapped it",
                 token_name(attribute).c_str());
  kstage_attribute_info_t info = describe_column(*shown);
  info.write_floor = floor_of(attribute);
  info.prim_count = prims;
  info.schema_count = schemas;
  return info;
}

Result<kstage_attribute_info_t> Stage::attribute_schema(uint64_t attribute, uint64_t index) const {
  KSTAGE_RETURN_NOT_OK(check_token(attribute, "attribute", 0));
  std::lock_guard lock(mutex_);
  const ColumnTable::Range columns = columns_.of(attribute);
  if (columns.empty())
    return error(KSTAGE_NOT_FOUND, "attribute '%s' has no column: nothing has written or mapped it",
                 token_name(attribute).c_str());
  const size_t count = columns.size();
  if (index >= count)
    return error(KSTAGE_NOT_FOUND, "index %llu: attribute '%s' has %zu schema%s",
                 (unsigned long long)index, token_name(attribute).c_str(), count,
                 count == 1 ? "" : "s");
  kstage_attribute_info_t info = describe_column(*std::next(columns.begin(), long(index))->second);
  info.write_floor = floor_of(attribute);
  info.schema_count = count;
  return info;
}

}  // namespace kstage::core
