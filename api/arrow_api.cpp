// SPDX-License-Identifier: Apache-2.0
// Arrow C Device Data Interface export of read groups (kstage/kstage_arrow.h).
#include <kstage/kstage_arrow.h>

#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/arrow_export.hpp"

using namespace kstage;
using namespace kstage::capi;

extern "C" kstage_status_t kstage_group_export_arrow(kstage_stage_t stage, kstage_group_t group,
                                                     uint64_t flags, struct ArrowSchema* schema,
                                                     struct ArrowDeviceArray* array) {
  return guard("kstage::group_export_arrow", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(schema, "schema"));
    KSTAGE_RETURN_NOT_OK(need(array, "array"));
    std::shared_ptr<core::ReadGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, lookup(s->groups, group, Kind::Group));
    core::Dictionary& dictionary = s->engine->dictionary();
    core::ArrowNames names;
    const std::string* attribute = dictionary.token(g->desc.attribute);
    names.attribute = attribute ? *attribute : std::to_string(g->desc.attribute);
    names.path = [&dictionary](uint64_t p) { return dictionary.path(p); };
    return core::export_group_arrow(*g, names, flags, schema, array);
  });
}
