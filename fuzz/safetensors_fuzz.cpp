// libFuzzer target for the safetensors reader (README, "Fuzzing"). The input is a file's bytes.
// Whatever they are, deserialize_safetensors and load_safetensors must either return or throw
// qkv::Error: any other exception, a crash, a leak or a read out of bounds (AddressSanitizer) is
// a finding. The two readers (one over memory, one reading the file piece by piece) must agree,
// and what loads must round-trip: serialized and read back it gives the same names, dtypes,
// shapes, bytes and metadata, and serializing that again gives the same bytes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qkv/dtype.hpp"
#include "qkv/error.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/tensor.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", what.c_str());
  std::abort();
}

// Where load_safetensors reads the input from: one file per fuzzing process, in memory where
// /dev/shm exists. Rewriting a small file there took 18 us; in /tmp on the development VM's ext4
// (mounted with discard) 4.1 ms, which held the target to ~250 inputs per second.
const std::filesystem::path& scratch_file() {
  static const std::filesystem::path path =
      (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                 : std::filesystem::temp_directory_path()) /
      ("qkv_safetensors_fuzz." + std::to_string(::getpid()) + ".safetensors");
  return path;
}

void remove_scratch_file() {
  std::error_code ignored;
  std::filesystem::remove(scratch_file(), ignored);
}

std::optional<qkv::SafetensorsContents> deserialize(std::span<const std::byte> bytes) {
  try {
    return qkv::deserialize_safetensors(bytes);
  } catch (const qkv::Error&) {
    return std::nullopt;
  }
}

std::optional<qkv::SafetensorsContents> load(std::span<const std::byte> bytes) {
  {
    std::ofstream file(scratch_file(), std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    if (!file) finding("cannot write " + scratch_file().string());
  }
  try {
    return qkv::load_safetensors(scratch_file());
  } catch (const qkv::Error&) {
    return std::nullopt;
  }
}

// Names, dtypes, shapes, bytes and metadata all equal; `what` says which two are compared.
void expect_same(const qkv::SafetensorsContents& a, const qkv::SafetensorsContents& b,
                 const char* what) {
  if (a.metadata != b.metadata) finding(std::string(what) + ": the metadata differ");
  if (a.tensors.size() != b.tensors.size()) {
    finding(std::string(what) + ": " + std::to_string(a.tensors.size()) + " tensors against " +
            std::to_string(b.tensors.size()));
  }
  for (const auto& [name, x] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end()) finding(std::string(what) + ": tensor '" + name + "' missing");
    const qkv::Tensor& y = it->second;
    if (x.dtype() != y.dtype() || x.shape() != y.shape() || !x.is_contiguous() ||
        !y.is_contiguous()) {
      finding(std::string(what) + ": tensor '" + name + "' is " + x.describe() + " and " +
              y.describe());
    }
    const auto bytes = static_cast<std::size_t>(x.numel()) * qkv::dtype_size(x.dtype());
    if (bytes > 0 && std::memcmp(x.data(), y.data(), bytes) != 0) {
      finding(std::string(what) + ": the bytes of tensor '" + name + "' differ");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::atexit(remove_scratch_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const std::optional<qkv::SafetensorsContents> from_memory = deserialize(bytes);
  const std::optional<qkv::SafetensorsContents> from_file = load(bytes);
  if (from_memory.has_value() != from_file.has_value()) {
    finding(from_memory ? "deserialize_safetensors accepts what load_safetensors refuses"
                        : "load_safetensors accepts what deserialize_safetensors refuses");
  }
  if (!from_memory) return 0;
  expect_same(*from_memory, *from_file, "deserialize_safetensors and load_safetensors");

  std::vector<std::byte> written;
  try {
    written = qkv::serialize_safetensors(from_memory->tensors, from_memory->metadata);
  } catch (const qkv::Error& e) {
    finding(std::string("serialize_safetensors refuses what was loaded: ") + e.what());
  }
  const std::optional<qkv::SafetensorsContents> again = deserialize(written);
  if (!again) finding("serialize_safetensors wrote what deserialize_safetensors refuses");
  expect_same(*from_memory, *again, "the loaded and the round-tripped contents");
  if (qkv::serialize_safetensors(again->tensors, again->metadata) != written) {
    finding("serializing the round-tripped contents gives other bytes");
  }
  return 0;
}
