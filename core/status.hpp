// SPDX-License-Identifier: Apache-2.0
// Status and Result: how the engine reports errors. Internals never throw
// across layers on bad input; they return a Status that the C ABI turns into
// a kstage_status_t plus the thread's last-error message.
#pragma once

#include <kstage/kstage.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace kstage {

// A device runtime refused work it was given with valid arguments (a fault,
// not bad input): thrown from deep inside an enqueue, turned into
// KSTAGE_DEVICE_ERROR by the C API's guard.
class DeviceFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// OK is a null pointer (as in Arrow): making, passing and dropping an OK status
// costs one word, which matters on paths that validate one DLTensor per row. An
// error's state is shared and immutable: copying a status allocates nothing, so
// out-of-memory paths can pass one along.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(kstage_status_t code, std::string message)
      : state_(std::make_shared<const State>(State{code, std::move(message)})) {}

  static Status OK() noexcept { return Status(); }
  // KSTAGE_OUT_OF_MEMORY saying "out of memory", made without allocating (what an
  // out-of-memory handler returns when it cannot build a better message).
  static Status out_of_memory() noexcept;
  bool ok() const { return !state_ || state_->code == KSTAGE_OK; }
  kstage_status_t code() const { return state_ ? state_->code : KSTAGE_OK; }
  const std::string& message() const {
    static const std::string none;
    return state_ ? state_->message : none;
  }

 private:
  struct State {
    kstage_status_t code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

// printf-style message builders, so error sites can name the numbers
// involved. C varargs, not templates, so that the compiler checks every
// format string against its arguments (-Wformat=2 is on for the library).
#if defined(__GNUC__)
#define KSTAGE_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define KSTAGE_PRINTF(fmt_index, first_arg)
#endif

std::string format(const char* fmt, ...) KSTAGE_PRINTF(1, 2);
Status error(kstage_status_t code, const char* fmt, ...) KSTAGE_PRINTF(2, 3);
// error(KSTAGE_OUT_OF_MEMORY, ...) for out-of-memory handlers: never throws (without memory
// for the message, it is Status::out_of_memory()).
Status out_of_memory(const char* fmt, ...) noexcept KSTAGE_PRINTF(1, 2);

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kstage

#define KSTAGE_IMPL_CONCAT2(a, b) a##b
#define KSTAGE_IMPL_CONCAT(a, b) KSTAGE_IMPL_CONCAT2(a, b)

#define KSTAGE_RETURN_NOT_OK(expr)           \
  do {                                       \
    ::kstage::Status _kstage_st = (expr);    \
    if (!_kstage_st.ok()) return _kstage_st; \
  } while (0)

// `tmp` is a name being declared and `lhs` may be a declaration (`auto x`): neither can be
// parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define KSTAGE_IMPL_ASSIGN_OR_RETURN(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp.value())

#define KSTAGE_ASSIGN_OR_RETURN(lhs, expr) \
  KSTAGE_IMPL_ASSIGN_OR_RETURN(KSTAGE_IMPL_CONCAT(_kstage_r_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)
