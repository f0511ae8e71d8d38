#pragma once

#include "qkv/attention.hpp"
#include "qkv/autograd.hpp"
#include "qkv/dtype.hpp"
#include "qkv/error.hpp"
#include "qkv/half.hpp"
#include "qkv/models.hpp"
#include "qkv/nn.hpp"
#include "qkv/philox.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/system.hpp"
#include "qkv/tensor.hpp"
#include "qkv/version.hpp"
