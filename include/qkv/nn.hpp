#pragma once

// Modules a Transformer is made of, on the autodiff engine: Linear, Embedding, LayerNorm,
// Dropout, FeedForward, MultiheadAttention, positional encodings (sinusoidal, learned, RoPE,
// ALiBi, T5 relative bias), Transformer encoder and decoder layers, optimizers, and weights in
// safetensors files under PyTorch's parameter names.
#include "qkv/nn/attention.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/nn/optim.hpp"
#include "qkv/nn/positional.hpp"
#include "qkv/nn/recurrent.hpp"
#include "qkv/nn/transformer.hpp"
