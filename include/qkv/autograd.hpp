#pragma once

// Reverse-mode automatic differentiation over qkv::Tensor (f32 and f64): Var, the ops with their
// backward rules, attention as one primitive or as composed ops, and gradcheck.
#include "qkv/autograd/gradcheck.hpp"
#include "qkv/autograd/ops.hpp"
#include "qkv/autograd/var.hpp"
