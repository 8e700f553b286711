// SPDX-License-Identifier: Apache-2.0
// The process's log for Python (kstage.set_log_callback, flush_log, log_message; kstage.h,
// "Logging"): kstage calls a C trampoline on its dispatcher thread, which takes the GIL and calls
// the Python callable. What the callable raises goes to sys.unraisablehook, never into C. The
// setter and the flush release the GIL while they wait: the delivery they wait for needs it.
#include "binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

namespace kstage_py {
namespace {

// The installed callable, and the one replaced last: kept (with its reference) until the next
// setting, since a callback may replace itself while it runs. Touched with the GIL held.
struct LogHolders {
  std::unique_ptr<nb::object> installed;
  std::unique_ptr<nb::object> retired;
};
LogHolders& holders() {
  static auto* h = new LogHolders();  // never destroyed: see python_is_running()
  return *h;
}

void trampoline(kstage_log_severity_t severity, const char* channel, const char* message,
                void* user_data) {
  if (!python_is_running()) return;  // the interpreter is going: nothing may run
  const PyGILState_STATE gil = PyGILState_Ensure();
  try {
    const nb::object& fn = *static_cast<const nb::object*>(user_data);
    fn(int(severity), nb::str(channel), nb::str(message));
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("kstage log callback");
  } catch (...) {  // a conversion that failed: the message is dropped
  }
  PyGILState_Release(gil);
}

}  // namespace

void register_log(nb::module_& m) {
  m.def(
      "_set_log_callback",
      [](nb::object fn, int32_t threshold, std::optional<std::string> filter) {
        std::unique_ptr<nb::object> next;
        if (!fn.is_none()) next = std::make_unique<nb::object>(std::move(fn));
        nb::object* user_data = next.get();
        const char* f = filter ? filter->c_str() : nullptr;
        check(without_gil([&] {
          return user_data ? kstage_set_log_callback(&trampoline, user_data, threshold, f)
                           : kstage_set_log_callback(nullptr, nullptr, KSTAGE_LOG_OFF, nullptr);
        }));
        LogHolders& h = holders();
        h.retired = std::move(h.installed);
        h.installed = std::move(next);
      },
      nb::arg("fn").none(), nb::arg("threshold"), nb::arg("channel_filter").none(),
      "kstage_set_log_callback with a Python callable fn(severity: int, channel: str, "
      "message: str), or None to remove it (kstage.set_log_callback is the friendly form).");
  m.def(
      "flush_log", [] { check(without_gil([] { return kstage_flush_log(); })); },
      "Waits until every message emitted before the call has been delivered "
      "(kstage_flush_log). From inside the callback it returns at once.");
  m.def(
      "log_message",
      [](int32_t severity, const std::string& channel, const std::string& message) {
        check(kstage_log_message(severity, channel.c_str(), message.c_str()));
      },
      nb::arg("severity"), nb::arg("channel"), nb::arg("message"),
      "Emits `message` on one of kstage's channels ('stage', 'device', 'adios2', 'api') "
      "(kstage_log_message); delivered when the setting in force admits it.");
}

}  // namespace kstage_py
