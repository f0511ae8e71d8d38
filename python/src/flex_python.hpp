#pragma once

#include <nanobind/nanobind.h>

namespace qkv_python {

// Adds to qkv._qkv the mask and score mods as values (qkv/mod_values.hpp), block masks and
// flex_attention forward and backward.
void bind_flex(nanobind::module_& m);

}  // namespace qkv_python
