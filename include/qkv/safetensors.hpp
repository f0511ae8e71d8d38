#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"

namespace qkv {

// The safetensors format (https://github.com/huggingface/safetensors), read and written by
// Python's safetensors package, PyTorch, JAX and Rust alike:
//   8 bytes      N, the header length, unsigned little-endian
//   N bytes      a JSON object: {"__metadata__": {string: string}?,
//                                name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}}
//                padded with spaces so the data starts at a multiple of 8
//   the data     each tensor row-major and little-endian in bytes [b, e) counted from the byte
//                after the header; tensors follow one another without gaps.
// dtypes: F64, F32, BF16, F16 and BOOL, qkv's DType::f64 ... DType::boolean.

using NamedTensors = std::map<std::string, Tensor>;
using SafetensorsMetadata = std::map<std::string, std::string>;  // the "__metadata__" entry

struct SafetensorsContents {
  NamedTensors tensors;  // owning and contiguous
  SafetensorsMetadata metadata;
};

// tensors: any shapes (0-d and empty included), dtypes and strides, written contiguous. Data is
// ordered by element size, largest first, then by name, as the Rust implementation does, so
// every tensor is aligned to its element size in the file. Throws qkv::Error for an undefined
// tensor or a tensor named "__metadata__", writing nothing.
std::vector<std::byte> serialize_safetensors(const NamedTensors& tensors,
                                             const SafetensorsMetadata& metadata = {});
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

// The input is untrusted: anything but a well-formed file whose tensors have the dtypes above
// throws qkv::Error naming what is wrong (header length, JSON, a field of a tensor, offsets
// that overlap or leave a gap, bytes after the last tensor); nothing is read out of bounds.
SafetensorsContents deserialize_safetensors(std::span<const std::byte> bytes);
SafetensorsContents load_safetensors(const std::filesystem::path& path);

}  // namespace qkv
