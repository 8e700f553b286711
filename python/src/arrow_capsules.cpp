// SPDX-License-Identifier: Apache-2.0
// The Arrow PyCapsule interface
// (https://arrow.apache.org/docs/format/CDataInterface/PyCapsuleInterface.html) over
// kstage_group_export_arrow and kstage_read_export_arrow: the capsules "arrow_schema",
// "arrow_array" and "arrow_device_array" that pyarrow, polars, nanoarrow and DuckDB take without a
// copy.
//
// Each capsule owns its struct: its destructor releases what a consumer did not move out
// (release still set), then frees the struct -- the specification's rule, so that a capsule
// never consumed frees everything, and a consumed one only its struct.
#include "binding.hpp"

#include <kstage/kstage_arrow.h>

#include <cstdlib>

namespace kstage_py {
namespace {

void schema_capsule_free(PyObject* capsule) {
  auto* s = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (s == nullptr) return;
  if (s->release) s->release(s);
  delete s;
}
void array_capsule_free(PyObject* capsule) {
  auto* a = static_cast<ArrowArray*>(PyCapsule_GetPointer(capsule, "arrow_array"));
  if (a == nullptr) return;
  if (a->release) a->release(a);
  delete a;
}
void device_array_capsule_free(PyObject* capsule) {
  auto* a = static_cast<ArrowDeviceArray*>(PyCapsule_GetPointer(capsule, "arrow_device_array"));
  if (a == nullptr) return;
  if (a->array.release) a->array.release(&a->array);
  delete a;
}

nb::object capsule(void* p, const char* name, PyCapsule_Destructor free) {
  PyObject* c = PyCapsule_New(p, name, free);
  if (c == nullptr) throw nb::python_error();
  return nb::steal(c);
}

}  // namespace

nb::tuple arrow_capsules(const ArrowExport& make, ArrowKind kind) {
  auto schema = std::make_unique<ArrowSchema>();
  auto device = std::make_unique<ArrowDeviceArray>();
  *schema = ArrowSchema{};
  *device = ArrowDeviceArray{};
  kstage_status_t status;
  {
    ReleaseGil gil;  // a device export may wait for the device's queue
    status = make(schema.get(), device.get());
  }
  check(status);
  // From here the structs own kstage's release callbacks: each goes into its capsule at once.
  struct Guard {
    ArrowSchema* s;
    ArrowDeviceArray* a;
    ~Guard() {
      if (s && s->release) s->release(s);
      if (a && a->array.release) a->array.release(&a->array);
    }
  } guard{schema.get(), device.get()};
  if (kind == ArrowKind::Host && device->device_type != ARROW_DEVICE_CPU)
    raise_error(KSTAGE_INVALID_ARGUMENT,
                "__arrow_c_array__: the data is on a device (Arrow device type " +
                    std::to_string(device->device_type) +
                    "): use __arrow_c_device_array__, or read it "
                    "with device=\"cpu\"");
  nb::object s = capsule(schema.get(), "arrow_schema", &schema_capsule_free);
  guard.s = nullptr;
  (void)schema.release();
  if (kind == ArrowKind::Host) {
    auto array = std::make_unique<ArrowArray>(device->array);  // the ArrowArray moved out
    device->array.release = nullptr;
    guard.a = nullptr;
    nb::object a;
    try {
      a = capsule(array.get(), "arrow_array", &array_capsule_free);
    } catch (...) {
      array->release(array.get());
      throw;
    }
    (void)array.release();
    return nb::make_tuple(s, a);
  }
  nb::object a = capsule(device.get(), "arrow_device_array", &device_array_capsule_free);
  guard.a = nullptr;
  (void)device.release();
  return nb::make_tuple(s, a);
}

}  // namespace kstage_py
