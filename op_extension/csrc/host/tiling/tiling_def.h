// BEGIN_TILING_DATA_DEF / TILING_DATA_FIELD_DEF / END_TILING_DATA_DEF /
// REGISTER_TILING_DATA_CLASS: how every <op>_tiling.h declares the TilingData
// shared by the host tiling function and the kernel.
//
// The macro names and their use are CANN's (register/tilingdata_base.h), but the
// definitions are ours. CANN generates the kernel-side struct and GET_TILING_DATA
// only for msopgen operator projects; our kernels are built as a kernel-launch
// library (ACLRT_LAUNCH_KERNEL), where it does not. So one definition serves the
// host compiler, CANN's device compiler and the simulator: a plain struct of
// scalar fields in declaration order (trivially copyable, natural alignment),
// which the host copies byte for byte into device memory and the kernel reads
// back with GET_TILING_DATA (kernel/ascendc/kernel_tiling.h).
//
// REGISTER_TILING_DATA_CLASS names the translation unit's TilingData for
// GET_TILING_DATA, so a TU includes exactly one <op>_tiling.h (CANN, too,
// compiles one op per kernel).
//
// On the host the struct also gets CANN's accessors (set_<field>, get_<field>,
// GetDataSize, SaveToBuffer) and a list of its fields, used by the simulator's
// tiling inspection in tests.
#ifndef OP_EXT_HOST_TILING_TILING_DEF_H_
#define OP_EXT_HOST_TILING_TILING_DEF_H_

#if defined(__CCE_AICORE__) || defined(__CCE_KT_TEST__)
// ---- CANN device compiler: fields only ------------------------------------
// The field types (uint32_t, uint64_t, float) come from kernel_operator.h: the
// device compile has no host C++ headers such as <cstdint>, so this branch must
// not include any, and including kernel_operator.h here keeps a tiling header
// self-contained whatever a kernel includes first
// (tests/test_device_compile.py compiles it that way).
#include "kernel_operator.h"

#define BEGIN_TILING_DATA_DEF(class_name) struct class_name {
#define TILING_DATA_FIELD_DEF(data_type, field_name) data_type field_name;
#define END_TILING_DATA_DEF \
  }                         \
  ;
#define REGISTER_TILING_DATA_CLASS(op_type, class_name) using OpExtKernelTilingData = class_name;

#else
// ---- host (and everything on the simulator) --------------------------------
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace op_ext::tiling {

struct FieldInfo {
  std::string name;
  size_t offset = 0;
  size_t size = 0;
  bool isFloat = false;
  bool isSigned = false;
};

struct FieldList {
  std::vector<FieldInfo> fields;
  size_t end = 0;  // offset after the last field
};

template <typename T>
inline bool AddField(FieldList& list, const char* name) {
  static_assert(std::is_arithmetic_v<T>, "tiling fields are plain numbers");
  FieldInfo f;
  f.name = name;
  f.size = sizeof(T);
  f.offset = (list.end + alignof(T) - 1) / alignof(T) * alignof(T);
  f.isFloat = std::is_floating_point_v<T>;
  f.isSigned = std::is_signed_v<T>;
  list.end = f.offset + f.size;
  list.fields.push_back(f);
  return true;
}

}  // namespace op_ext::tiling

#define BEGIN_TILING_DATA_DEF(class_name)                       \
  struct class_name {                                           \
    static ::op_ext::tiling::FieldList& OpExtFields() {         \
      static ::op_ext::tiling::FieldList list;                  \
      return list;                                              \
    }                                                           \
    size_t GetDataSize() const { return sizeof(class_name); }   \
    void SaveToBuffer(void* buf, size_t capacity) const {       \
      if (capacity >= sizeof(class_name)) std::memcpy(buf, this, sizeof(class_name)); \
    }

// Fields are zero-initialised, so a tiling function that forgets one sends 0.
#define TILING_DATA_FIELD_DEF(data_type, field_name)                                                           \
  data_type field_name = 0;                                                                                    \
  void set_##field_name(data_type value) { field_name = value; }                                               \
  data_type get_##field_name() const { return field_name; }                                                    \
  inline static const bool op_ext_field_##field_name = ::op_ext::tiling::AddField<data_type>(OpExtFields(), #field_name);

#define END_TILING_DATA_DEF \
  }                         \
  ;

#define REGISTER_TILING_DATA_CLASS(op_type, class_name)                                                   \
  static_assert(std::is_trivially_copyable_v<class_name> && std::is_standard_layout_v<class_name>,       \
                #class_name " must be a plain struct: it is copied byte for byte to the device");         \
  using OpExtKernelTilingData = class_name;

#endif

#endif  // OP_EXT_HOST_TILING_TILING_DEF_H_
