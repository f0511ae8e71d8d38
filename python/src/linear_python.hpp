#pragma once

#include <nanobind/nanobind.h>

namespace qkv_python {

// Adds to qkv._qkv linear attention's forward and backward and its recurrent state
// (qkv/linear_attention.hpp).
void bind_linear(nanobind::module_& m);

}  // namespace qkv_python
