#include "qkv/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "qkv/dtype.hpp"
#include "qkv/error.hpp"

namespace qkv {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Tensors are written from and read into memory as is.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr std::size_t kLengthBytes = 8;
// The data starts at a multiple of 8 so every tensor in it is aligned to its element size.
constexpr std::size_t kHeaderAlignment = 8;
// The Rust implementation's limit: a bigger header is refused before it is parsed.
constexpr std::uint64_t kMaxHeaderLength = 100'000'000;
// A valid header nests 3 deep; the bound keeps a hostile one from building deep JSON trees.
constexpr int kMaxJsonDepth = 64;
// Names and JSON values are shortened to this many bytes in error messages.
constexpr std::size_t kMaxQuoted = 120;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f64, "F64"},
                                     {DType::f32, "F32"},
                                     {DType::bf16, "BF16"},
                                     {DType::f16, "F16"},
                                     {DType::boolean, "BOOL"}};

std::string_view safetensors_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::string shortened(std::string text) {
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return text;
}

std::string tensor_argument(const std::string& name) { return "tensor '" + shortened(name) + "'"; }

std::string brief(const Json& value) { return shortened(value.dump()); }

std::string offsets_string(std::uint64_t begin, std::uint64_t end) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of operator+.
  std::string text = "[";
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  text += "]";
  return text;
}

// ---- writing ----

struct WriteEntry {
  const std::string* name;
  const Tensor* tensor;
  std::uint64_t bytes;
};

struct WritePlan {
  std::string prefix;  // the 8 length bytes and the padded header
  std::vector<WriteEntry> entries;
  std::uint64_t data_bytes = 0;
};

// tensors: any shapes, dtypes and strides.
WritePlan plan_write(const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  WritePlan plan;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) {
      throw Error("tensors", "no tensor named __metadata__ (the key of the metadata)", name);
    }
    if (!tensor.defined()) throw Error(tensor_argument(name), "a defined tensor", "undefined");
    const auto bytes = static_cast<std::uint64_t>(tensor.numel()) * dtype_size(tensor.dtype());
    plan.entries.push_back({&name, &tensor, bytes});
  }
  // The map gives name order; the stable sort keeps it among tensors of one element size.
  std::stable_sort(plan.entries.begin(), plan.entries.end(),
                   [](const WriteEntry& a, const WriteEntry& b) {
                     return dtype_size(a.tensor->dtype()) > dtype_size(b.tensor->dtype());
                   });

  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  for (const WriteEntry& e : plan.entries) {
    header[*e.name] = {{"dtype", std::string(safetensors_name(e.tensor->dtype()))},
                       {"shape", e.tensor->shape()},
                       {"data_offsets", {plan.data_bytes, plan.data_bytes + e.bytes}}};
    plan.data_bytes += e.bytes;
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, OrderedJson::error_handler_t::strict);
  } catch (const Json::exception& e) {
    throw Error("tensors", "names and metadata in UTF-8", e.what());
  }
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  std::uint64_t length = text.size();
  for (std::size_t i = 0; i < kLengthBytes; ++i, length >>= 8) {
    plan.prefix.push_back(static_cast<char>(length & 0xff));
  }
  plan.prefix += text;
  return plan;
}

// Calls sink(pointer, bytes) with the file's bytes in order.
template <class Sink>
void write_plan(const WritePlan& plan, Sink&& sink) {
  sink(plan.prefix.data(), plan.prefix.size());
  for (const WriteEntry& e : plan.entries) {
    const Tensor data = e.tensor->contiguous();
    sink(data.data(), static_cast<std::size_t>(e.bytes));
  }
}

// ---- reading ----

struct ReadEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

struct Header {
  std::vector<ReadEntry> entries;  // in offset order, covering the data without gaps
  SafetensorsMetadata metadata;
};

// The header length from the first 8 bytes, checked against the size of the whole input.
std::uint64_t header_length(const unsigned char* prefix, std::uint64_t total_size) {
  std::uint64_t length = 0;
  for (std::size_t i = kLengthBytes; i-- > 0;) length = (length << 8) | prefix[i];
  if (length > kMaxHeaderLength) {
    throw Error("safetensors header length", "at most " + std::to_string(kMaxHeaderLength),
                std::to_string(length));
  }
  if (length > total_size - kLengthBytes) {
    throw Error("safetensors header length",
                "at most " + std::to_string(total_size - kLengthBytes) + " (the bytes after it)",
                std::to_string(length));
  }
  return length;
}

// Parses JSON, refusing duplicate keys (which a plain parse would silently merge) and deep
// nesting.
Json parse_json(std::string_view text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  const Json::parser_callback_t callback = [&keys](int depth, Json::parse_event_t event,
                                                   Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw Error("safetensors header",
                      "JSON nested at most " + std::to_string(kMaxJsonDepth) + " deep", "deeper");
        }
        if (event == Json::parse_event_t::object_start) keys.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second) {
          throw Error("safetensors header", "unique keys",
                      "'" + shortened(parsed.get<std::string>()) + "' twice");
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    throw Error("safetensors header", "valid JSON", e.what());
  }
}

const Json& field(const Json& entry, const char* key, const std::string& argument) {
  const auto it = entry.find(key);
  if (it == entry.end()) throw Error(argument, std::string("a field \"") + key + "\"", "none");
  return *it;
}

std::uint64_t offset_value(const Json& value, const std::string& argument) {
  if (!value.is_number_unsigned()) {
    throw Error(argument, "data_offsets of non-negative integers", brief(value));
  }
  return value.get<std::uint64_t>();
}

ReadEntry parse_entry(const std::string& name, const Json& entry, std::uint64_t data_size) {
  const std::string argument = tensor_argument(name);
  if (!entry.is_object()) {
    throw Error(argument, "an object with dtype, shape and data_offsets", brief(entry));
  }
  const Json& dtype = field(entry, "dtype", argument);
  const Json& shape = field(entry, "shape", argument);
  const Json& offsets = field(entry, "data_offsets", argument);

  std::optional<DType> parsed_dtype;
  if (dtype.is_string()) parsed_dtype = dtype_from_name(dtype.get<std::string>());
  if (!parsed_dtype) throw Error(argument, "dtype F64, F32, BF16, F16 or BOOL", brief(dtype));

  if (!shape.is_array()) throw Error(argument, "shape as an array of sizes", brief(shape));
  ReadEntry result{name, *parsed_dtype, {}, 0, 0};
  // Zero sizes count as 1 in the product: Tensor's strides multiply the other sizes even when
  // the tensor is empty, and they must not overflow either.
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t product = 1;
  bool empty = false;
  for (const Json& size : shape) {
    if (size.is_number_integer() && !size.is_number_unsigned()) {
      throw Error(argument, "shape of non-negative sizes", brief(shape));
    }
    if (!size.is_number_unsigned()) {
      throw Error(argument, "shape of integer sizes", brief(shape));
    }
    const auto value = size.get<std::uint64_t>();
    if (value > kMax || (value > 1 && product > kMax / value)) {
      throw Error(argument, "shape whose sizes multiply to at most 2^63 - 1", brief(shape));
    }
    product *= std::max<std::uint64_t>(value, 1);
    empty = empty || value == 0;
    result.shape.push_back(static_cast<std::int64_t>(value));
  }
  const std::uint64_t numel = empty ? 0 : product;
  const std::uint64_t element = dtype_size(result.dtype);
  if (numel > std::numeric_limits<std::uint64_t>::max() / element) {
    throw Error(argument, "shape whose byte count fits in 64 bits", brief(shape));
  }
  const std::uint64_t bytes = numel * element;

  if (!offsets.is_array() || offsets.size() != 2) {
    throw Error(argument, "data_offsets as [begin, end]", brief(offsets));
  }
  result.begin = offset_value(offsets[0], argument);
  result.end = offset_value(offsets[1], argument);
  const std::string actual = offsets_string(result.begin, result.end);
  if (result.begin > result.end || result.end - result.begin != bytes) {
    throw Error(argument,
                "data_offsets spanning " + std::to_string(bytes) + " bytes (" +
                    std::string(safetensors_name(result.dtype)) + " " + shape_string(result.shape) +
                    ")",
                actual);
  }
  if (result.end > data_size) {
    throw Error(argument, "data_offsets within the " + std::to_string(data_size) + " bytes of data",
                actual);
  }
  return result;
}

Header parse_header(std::string_view text, std::uint64_t data_size) {
  const Json json = parse_json(text);
  if (!json.is_object()) throw Error("safetensors header", "a JSON object", brief(json));
  Header header;
  for (const auto& [key, value] : json.items()) {
    if (key != kMetadataKey) {
      header.entries.push_back(parse_entry(key, value, data_size));
      continue;
    }
    if (!value.is_object()) throw Error("__metadata__", "an object of strings", brief(value));
    for (const auto& [meta_key, meta_value] : value.items()) {
      if (!meta_value.is_string()) {
        throw Error("__metadata__", "string values",
                    "'" + shortened(meta_key) + "': " + brief(meta_value));
      }
      header.metadata.emplace(meta_key, meta_value.get<std::string>());
    }
  }

  std::sort(header.entries.begin(), header.entries.end(),
            [](const ReadEntry& a, const ReadEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  std::uint64_t cursor = 0;
  const std::string* previous = nullptr;
  for (const ReadEntry& e : header.entries) {
    if (e.begin != cursor) {
      const std::string where = previous == nullptr ? "the start of the data"
                                                    : "the end of " + tensor_argument(*previous);
      const std::string what = e.begin < cursor
                                   ? " (overlapping the tensor before)"
                                   : " (a gap of " + std::to_string(e.begin - cursor) + " bytes)";
      throw Error(tensor_argument(e.name),
                  "data_offsets beginning at " + std::to_string(cursor) + ", " + where,
                  offsets_string(e.begin, e.end) + what);
    }
    cursor = e.end;
    previous = &e.name;
  }
  if (cursor != data_size) {
    throw Error("safetensors data", std::to_string(cursor) + " bytes (the end of the last tensor)",
                std::to_string(data_size) + " bytes");
  }
  return header;
}

// Booleans are one byte, 0 or 1, in qkv as in the format.
void check_booleans(const ReadEntry& e, const Tensor& t) {
  if (e.dtype != DType::boolean) return;
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (bytes[i] > 1) {
      throw Error(tensor_argument(e.name), "BOOL bytes 0 or 1",
                  std::to_string(bytes[i]) + " at element " + std::to_string(i));
    }
  }
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const NamedTensors& tensors,
                                             const SafetensorsMetadata& metadata) {
  const WritePlan plan = plan_write(tensors, metadata);
  std::vector<std::byte> out;
  out.reserve(plan.prefix.size() + plan.data_bytes);
  write_plan(plan, [&out](const void* data, std::size_t bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + bytes);
  });
  return out;
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata) {
  const WritePlan plan = plan_write(tensors, metadata);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error("path", "a file open for writing", path.string());
  write_plan(plan, [&file](const void* data, std::size_t bytes) {
    file.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  });
  file.close();
  if (!file) throw Error("path", "a file written completely", path.string());
}

SafetensorsContents deserialize_safetensors(std::span<const std::byte> bytes) {
  if (bytes.size() < kLengthBytes) {
    throw Error("safetensors", "at least 8 bytes (the header length)",
                std::to_string(bytes.size()) + " bytes");
  }
  const auto* base = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t length = header_length(base, bytes.size());
  const std::size_t data_start = kLengthBytes + length;
  Header header =
      parse_header(std::string_view(reinterpret_cast<const char*>(base + kLengthBytes), length),
                   bytes.size() - data_start);
  SafetensorsContents contents;
  for (const ReadEntry& e : header.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    std::memcpy(t.data(), base + data_start + e.begin, e.end - e.begin);
    check_booleans(e, t);
    contents.tensors.emplace(e.name, std::move(t));
  }
  contents.metadata = std::move(header.metadata);
  return contents;
}

SafetensorsContents load_safetensors(const std::filesystem::path& path) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  std::ifstream file(path, std::ios::binary);
  if (error || !file) {
    throw Error("path", "a readable file",
                path.string() + (error ? " (" + error.message() + ")" : ""));
  }
  const auto read = [&file, &path](void* data, std::uint64_t bytes) {
    file.read(static_cast<char*>(data), static_cast<std::streamsize>(bytes));
    if (static_cast<std::uint64_t>(file.gcount()) != bytes) {
      throw Error("path", "a file that does not shrink while it is read", path.string());
    }
  };
  if (size < kLengthBytes) {
    throw Error("safetensors", "at least 8 bytes (the header length)",
                std::to_string(size) + " bytes");
  }
  unsigned char prefix[kLengthBytes];
  read(prefix, kLengthBytes);
  const std::uint64_t length = header_length(prefix, size);
  std::string text(length, '\0');
  read(text.data(), length);
  Header header = parse_header(text, size - kLengthBytes - length);
  // The entries are in offset order and leave no gaps, so the data is read front to back.
  SafetensorsContents contents;
  for (const ReadEntry& e : header.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read(t.data(), e.end - e.begin);
    check_booleans(e, t);
    contents.tensors.emplace(e.name, std::move(t));
  }
  contents.metadata = std::move(header.metadata);
  return contents;
}

}  // namespace qkv
