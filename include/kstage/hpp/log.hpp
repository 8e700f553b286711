// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/log.hpp
 * \brief The process's log (kstage.h, "Logging"): set_log_callback with any callable,
 * flush_log, log_message.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views). Every rule of
 * kstage_set_log_callback holds: one callback per process, called serially on a kstage
 * thread, never under a kstage lock; a callback may call kstage.
 */
#ifndef KSTAGE_HPP_LOG_HPP_
#define KSTAGE_HPP_LOG_HPP_

#include <kstage/hpp/status.hpp>
#include <kstage/kstage.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

namespace kstage {

/// A log callback: severity (KSTAGE_LOG_DEBUG .. KSTAGE_LOG_ERROR), channel ("stage",
/// "device", "adios2", "api") and message, whose views are valid only during the call.
using LogCallback =
    std::function<void(kstage_log_severity_t, std::string_view channel, std::string_view message)>;

namespace detail {

struct LogHolders {
  std::mutex mutex;  // one setter at a time
  std::unique_ptr<LogCallback> installed;
  // The one replaced last: not destroyed yet, in case it was replaced from inside itself (a
  // callback calling set_log_callback), when it is still running.
  std::unique_ptr<LogCallback> retired;
};
inline LogHolders& log_holders() {
  static LogHolders* h = new LogHolders();  // never destroyed: the dispatcher may outlive statics
  return *h;
}
// What kstage calls: the std::function, with nothing thrown back into C.
inline void log_trampoline(kstage_log_severity_t severity, const char* channel, const char* message,
                           void* user_data) {
  const auto& callback = *static_cast<const LogCallback*>(user_data);
#if KSTAGE_CPP_EXCEPTIONS
  try {
    callback(severity, channel, message);
  } catch (...) {  // an exception must not cross the C boundary: the message is dropped
  }
#else
  callback(severity, channel, message);
#endif
}

}  // namespace detail

/// Installs `callback` as the process's log callback (an empty one removes it: messages go back
/// to KSTAGE_LOG's stderr), with `threshold` and `channel_filter` ("device=debug,stage=off"; may
/// be empty) as kstage_set_log_callback states. An exception the callback throws is caught and
/// the message dropped. On failure (a malformed filter) the previous callback stays.
inline void set_log_callback(LogCallback callback, kstage_log_severity_t threshold,
                             const char* channel_filter, Status& st) {
  detail::LogHolders& h = detail::log_holders();
  std::lock_guard lock(h.mutex);
  std::unique_ptr<LogCallback> next;
  if (callback) next = std::make_unique<LogCallback>(std::move(callback));
  const kstage_status_t code =
      next ? kstage_set_log_callback(&detail::log_trampoline, next.get(), threshold, channel_filter)
           : kstage_set_log_callback(nullptr, nullptr, KSTAGE_LOG_OFF, nullptr);
  if (!detail::check(code, st)) return;
  h.retired = std::move(h.installed);
  h.installed = std::move(next);
}
/// As set_log_callback with no channel filter.
inline void set_log_callback(LogCallback callback, kstage_log_severity_t threshold, Status& st) {
  set_log_callback(std::move(callback), threshold, nullptr, st);
}
/// kstage_flush_log: every message emitted before the call is delivered when it returns.
inline void flush_log(Status& st) { detail::check(kstage_flush_log(), st); }
/// kstage_log_message: `message` on `channel`, delivered as kstage's own.
inline void log_message(kstage_log_severity_t severity, const char* channel, const char* message,
                        Status& st) {
  detail::check(kstage_log_message(severity, channel, message), st);
}

#if KSTAGE_CPP_EXCEPTIONS
/// As set_log_callback(..., Status&), throwing kstage::Error on failure.
inline void set_log_callback(LogCallback callback,
                             kstage_log_severity_t threshold = KSTAGE_LOG_WARNING,
                             const char* channel_filter = nullptr) {
  detail::throwing(
      [&](Status& st) { set_log_callback(std::move(callback), threshold, channel_filter, st); });
}
/// As flush_log(Status&), throwing kstage::Error on failure.
inline void flush_log() {
  detail::throwing([&](Status& st) { flush_log(st); });
}
/// As log_message(..., Status&), throwing kstage::Error on failure.
inline void log_message(kstage_log_severity_t severity, const char* channel, const char* message) {
  detail::throwing([&](Status& st) { log_message(severity, channel, message, st); });
}
#endif

}  // namespace kstage

#endif  // KSTAGE_HPP_LOG_HPP_
