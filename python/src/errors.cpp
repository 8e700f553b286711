// SPDX-License-Identifier: Apache-2.0
// kstage.Error and one subclass per status code, each also deriving from the built-in
// exception a Python user would catch for it (ValueError, KeyError, IndexError, ...). The
// message is kstage_last_error() of the failing call; `.status` is the code.
#include "binding.hpp"

#include <array>

namespace kstage_py {
namespace {

struct ErrorClass {
  kstage_status_t status;
  const char* name;
  PyObject* builtin;  // the second base; nullptr: kstage.Error only
  const char* doc;
};

// Filled by register_errors (the builtins are not constants in C).
PyObject* g_error = nullptr;
std::array<PyObject*, 14> g_by_status{};

}  // namespace

void register_errors(nb::module_& m) {
  const ErrorClass classes[] = {
      {KSTAGE_INVALID_ARGUMENT, "InvalidArgument", PyExc_ValueError,
       "An input is malformed or inconsistent (KSTAGE_INVALID_ARGUMENT)."},
      {KSTAGE_INVALID_HANDLE, "InvalidHandle", PyExc_ValueError,
       "A stage, query, read, group, map or op that was released, closed or is stale "
       "(KSTAGE_INVALID_HANDLE); a ValueError, as for a closed file."},
      {KSTAGE_NOT_FOUND, "NotFound", PyExc_KeyError,
       "An UPDATE of a missing prim, or an unknown id (KSTAGE_NOT_FOUND)."},
      {KSTAGE_ALREADY_EXISTS, "AlreadyExists", PyExc_ValueError,
       "An INSERT of an existing prim, or a path range that overlaps another "
       "(KSTAGE_ALREADY_EXISTS)."},
      {KSTAGE_WRITE_FLOOR_VIOLATION, "WriteFloorViolation", PyExc_ValueError,
       "A mutation at an ordinal at or below the attribute's write floor "
       "(KSTAGE_WRITE_FLOOR_VIOLATION)."},
      {KSTAGE_NOT_SUPPORTED, "NotSupported", PyExc_NotImplementedError,
       "A valid request this build cannot serve, such as a device type it has no backend for "
       "(KSTAGE_NOT_SUPPORTED)."},
      {KSTAGE_TIMEOUT, "Timeout", PyExc_TimeoutError,
       "A wait ran out; the op is still pending (KSTAGE_TIMEOUT)."},
      {KSTAGE_OUT_OF_MEMORY, "OutOfMemory", PyExc_MemoryError,
       "An allocation failed (KSTAGE_OUT_OF_MEMORY)."},
      {KSTAGE_OUT_OF_RANGE, "OutOfRange", PyExc_IndexError,
       "A change range that cannot be answered: a prim changed again after it "
       "(KSTAGE_OUT_OF_RANGE)."},
      {KSTAGE_OP_FAILED, "OpFailed", PyExc_RuntimeError,
       "An op failed for a reason with no code of its own (KSTAGE_OP_FAILED)."},
      {KSTAGE_DEVICE_ERROR, "DeviceError", PyExc_RuntimeError,
       "The device runtime reported an error (KSTAGE_DEVICE_ERROR)."},
      {KSTAGE_INTERNAL, "InternalError", PyExc_RuntimeError,
       "A bug in kstage: please report it with the message (KSTAGE_INTERNAL)."},
  };
  g_error = PyErr_NewExceptionWithDoc(
      "kstage.Error",
      "Base of every kstage exception. `status` is the C API's kstage_status_t and the "
      "message is kstage_last_error() of the failing call.",
      PyExc_Exception, nullptr);
  if (g_error == nullptr) throw nb::python_error();
  m.attr("Error") = nb::handle(g_error);
  for (const ErrorClass& c : classes) {
    nb::object bases = c.builtin != nullptr
                           ? nb::make_tuple(nb::handle(g_error), nb::handle(c.builtin))
                           : nb::make_tuple(nb::handle(g_error));
    std::string qualified = std::string("kstage.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw nb::python_error();
    nb::handle(cls).attr("status") = c.status;
    m.attr(c.name) = nb::handle(cls);
    g_by_status[static_cast<size_t>(c.status)] = cls;
  }
  nb::handle(g_error).attr("status") = static_cast<int>(KSTAGE_INTERNAL);
}

void raise_status(kstage_status_t status) {
  const char* message = kstage_last_error();
  raise_error(status, message != nullptr ? message : "");
}

void raise_error(kstage_status_t status, const std::string& message) {
  std::string text = !message.empty() ? message : kstage_status_string(status);
  PyObject* cls = status > 0 && static_cast<size_t>(status) < g_by_status.size() &&
                          g_by_status[status] != nullptr
                      ? g_by_status[status]
                      : g_error;
  // One argument, the message (a KeyError prints its argument's repr: a str stays readable).
  // kstage cuts long messages at a byte count, which can split a UTF-8 character.
  nb::object message_str = nb::steal(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace"));
  if (!message_str.is_valid()) throw nb::python_error();
  nb::object error = nb::handle(cls)(message_str);
  error.attr("status") = static_cast<int>(status);
  PyErr_SetObject(cls, error.ptr());
  throw nb::python_error();
}

void raise_invalid_argument(const std::string& message) {
  PyObject* cls = g_by_status[KSTAGE_INVALID_ARGUMENT];
  nb::object error = nb::handle(cls)(nb::str(message.data(), message.size()));
  error.attr("status") = static_cast<int>(KSTAGE_INVALID_ARGUMENT);
  PyErr_SetObject(cls, error.ptr());
  throw nb::python_error();
}

void raise_op_failure(kstage_stage_t stage, kstage_op_t op, kstage_status_t status) {
  const char* message = nullptr;
  if (kstage_op_error(stage, op, &message) != KSTAGE_OK || message == nullptr)
    message = kstage_last_error();
  raise_error(status, message != nullptr ? message : "");
}

void set_error_from_current_exception() noexcept {
  try {
    throw;
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

bool python_is_running() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

}  // namespace kstage_py
