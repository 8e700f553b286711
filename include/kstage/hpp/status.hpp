// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/status.hpp
 * \brief The C++ API's errors: Status, the Error the throwing calls throw, and
 * KSTAGE_CPP_EXCEPTIONS.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_STATUS_HPP_
#define KSTAGE_HPP_STATUS_HPP_

#include <kstage/kstage.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

/**
 * \def KSTAGE_CPP_EXCEPTIONS
 * \brief 1 when the compiler has C++ exceptions enabled, else 0. kstage::Error
 * and the throwing overloads are declared only when it is 1; the overloads
 * taking a `Status&` always are.
 */
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define KSTAGE_CPP_EXCEPTIONS 1
#else
#define KSTAGE_CPP_EXCEPTIONS 0
#endif

namespace kstage {

// ---- errors ------------------------------------------------------------------------------------

/// \brief The outcome of a non-throwing call: a kstage_status_t and its message.
class Status {
 public:
  /// OK, with no message.
  Status() = default;
  /// A status of `code` with `message`.
  Status(kstage_status_t code, std::string message) : code_(code), message_(std::move(message)) {}
  /// The call's kstage_status_t (KSTAGE_OK on success).
  kstage_status_t code() const noexcept { return code_; }
  /// True when code() is KSTAGE_OK.
  bool ok() const noexcept { return code_ == KSTAGE_OK; }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }
  /// kstage_last_error() of the failed call ("" when ok).
  const std::string& message() const noexcept { return message_; }
  /// "KSTAGE_INVALID_ARGUMENT: <message>"
  std::string to_string() const {
    return std::string(kstage_status_string(code_)) + ": " + message_;
  }

 private:
  kstage_status_t code_ = KSTAGE_OK;
  std::string message_;
};

#if KSTAGE_CPP_EXCEPTIONS
/// \brief What the throwing calls throw: the C call's status and kstage_last_error().
class Error : public std::runtime_error {
 public:
  /// The error of a failed `status` (what() is status.to_string()).
  explicit Error(const Status& status)
      : std::runtime_error(status.to_string()),
        status_(status.code()),
        message_(status.message()) {}
  /// The failed call's kstage_status_t.
  kstage_status_t status() const noexcept { return status_; }
  /// The message alone (what() is "<status name>: <message>").
  const std::string& message() const noexcept { return message_; }

 private:
  kstage_status_t status_;
  std::string message_;
};
#endif

namespace detail {

// True when `code` is KSTAGE_OK (and `st` is reset to OK, as std::filesystem's
// error_code overloads do); otherwise records it and the thread's message in `st`.
inline bool check(kstage_status_t code, Status& st) {
  if (code == KSTAGE_OK) {
    if (!st.ok()) st = Status();
    return true;
  }
  st = Status(code, kstage_last_error());
  return false;
}

#if KSTAGE_CPP_EXCEPTIONS
inline void raise_if(const Status& st) {
  if (!st.ok()) throw Error(st);
}
// The throwing form of a call: runs `call(status)` and throws what it recorded.
template <class F>
auto throwing(F&& call) {
  Status st;
  if constexpr (std::is_void_v<decltype(call(st))>) {
    call(st);
    raise_if(st);
  } else {
    auto result = call(st);
    raise_if(st);
    return result;
  }
}
#endif

}  // namespace detail

}  // namespace kstage

#endif  // KSTAGE_HPP_STATUS_HPP_
