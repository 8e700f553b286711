// SPDX-License-Identifier: Apache-2.0
// The log's entry points (kstage_set_log_callback, kstage_flush_log, kstage_log_message): their
// arguments checked here, the log itself in core/log.cpp.
#include "api/guard.hpp"
#include "core/log.hpp"

namespace kstage::capi {
namespace {

Status check_severity(kstage_log_severity_t s, int32_t highest, const char* name) {
  if (s < KSTAGE_LOG_DEBUG || s > highest)
    return error(KSTAGE_INVALID_ARGUMENT, "%s %d is not a level (KSTAGE_LOG_DEBUG %d .. %s %d)",
                 name, int(s), int(KSTAGE_LOG_DEBUG),
                 highest == KSTAGE_LOG_OFF ? "KSTAGE_LOG_OFF" : "KSTAGE_LOG_ERROR", int(highest));
  return Status::OK();
}

}  // namespace
}  // namespace kstage::capi

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_set_log_callback(kstage_log_callback_t callback, void* user_data,
                                        kstage_log_severity_t threshold,
                                        const char* channel_filter) {
  return guard([&]() -> Status {
    core::log::Levels levels{};
    if (callback) {
      KSTAGE_RETURN_NOT_OK(check_severity(threshold, KSTAGE_LOG_OFF, "threshold"));
      for (int32_t& l : levels.level) l = threshold;
      const Status parsed = core::log::parse(channel_filter, false, levels);
      if (!parsed.ok()) return error(parsed.code(), "channel_filter: %s", parsed.message().c_str());
    }
    return core::log::set_callback(callback, user_data, levels);
  });
}

kstage_status_t kstage_flush_log(void) {
  return guard([]() -> Status { return core::log::flush(); });
}

kstage_status_t kstage_log_message(kstage_log_severity_t severity, const char* channel,
                                   const char* message) {
  return guard([&]() -> Status {
    KSTAGE_RETURN_NOT_OK(check_severity(severity, KSTAGE_LOG_ERROR, "severity"));
    core::log::Channel c{};
    if (!core::log::channel_of(channel, &c))
      return error(KSTAGE_INVALID_ARGUMENT, "channel '%s' is not one of " KSTAGE_LOG_CHANNELS,
                   channel ? channel : "(NULL)");
    KSTAGE_RETURN_NOT_OK(need(message, "message"));
    core::log::emit_text(c, severity, message);
    return Status::OK();
  });
}

}  // extern "C"
