#pragma once

#include <nanobind/nanobind.h>

namespace qkv_python {

// Adds to qkv._qkv the per-head diagnostics of attention weights (qkv/viz/diagnostics.hpp).
void bind_inspect(nanobind::module_& m);

}  // namespace qkv_python
