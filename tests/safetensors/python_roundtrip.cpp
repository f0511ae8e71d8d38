// test_safetensors_python: qkv and Python's safetensors package read each other's files.
//   safetensors_python_roundtrip PYTHON SCRIPT WORK_DIR
// 1. writes WORK_DIR/from_qkv.safetensors: every dtype, a strided view, 0-d and empty tensors,
//    metadata, with values given by formulas that roundtrip.py recomputes;
// 2. runs PYTHON SCRIPT from_qkv.safetensors from_python.safetensors, which checks that file
//    with safetensors.numpy and writes the second from numpy arrays;
// 3. loads from_python.safetensors and checks it against the same formulas computed here.
// Exits 77 (CTest's SKIP_RETURN_CODE) when PYTHON does not exist: ./qkv.sh setup creates it.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "qkv/dtype.hpp"
#include "qkv/error.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/tensor.hpp"

namespace {

using qkv::DType;
using qkv::Shape;
using qkv::Tensor;

constexpr int kSkip = 77;

int failures = 0;

void check(bool condition, const std::string& message) {
  if (!condition) {
    std::cout << "python_roundtrip: " << message << "\n";
    ++failures;
  }
}

// shape: any; value(k) is the element at row-major index k.
Tensor make(const Shape& shape, DType dtype, const std::function<double(std::int64_t)>& value) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  std::vector<double> values;
  for (std::int64_t k = 0; k < n; ++k) values.push_back(value(k));
  return Tensor::from_values(shape, values, dtype);
}

// The same formulas as EXPECTED_FROM_QKV in roundtrip.py.
qkv::NamedTensors tensors_for_python() {
  // [5, 3] transposed: element (i, j) of the [3, 5] view is element 5 i + j in row-major order.
  Tensor base = Tensor::empty({5, 3}, DType::f32);
  for (std::int64_t i = 0; i < 3; ++i) {
    for (std::int64_t j = 0; j < 5; ++j)
      base.set({j, i}, static_cast<double>(5 * i + j) / 3.0 - 2.0);
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double special[] = {-0.0, kInf, -kInf, 65504.0, std::ldexp(1.0, -24)};
  return {
      {"f64", make({2, 3, 4}, DType::f64, [](std::int64_t k) { return (k - 11) / 7.0; })},
      {"f32_strided", base.transpose(0, 1)},
      {"bf16", make({4, 4}, DType::bf16, [](std::int64_t k) { return (k - 8) * 1.01; })},
      {"f16", make({6}, DType::f16, [](std::int64_t k) { return (k - 2.5) / 3.0; })},
      {"f16_special", make({5}, DType::f16, [&](std::int64_t k) { return special[k]; })},
      {"mask", make({7}, DType::boolean, [](std::int64_t k) { return k % 3 == 0 ? 1.0 : 0.0; })},
      {"scalar", make({}, DType::f64, [](std::int64_t) { return std::numbers::pi; })},
      {"empty", Tensor::zeros({2, 0, 3}, DType::f32)},
  };
}

// bfloat16 bits of a float, rounded to nearest even (no NaN here).
std::uint16_t bf16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Checks one tensor of from_python.safetensors bit for bit; expected(k) gives the raw bits of
// element k (as written by numpy) widened to 64 bits.
void check_tensor(const qkv::SafetensorsContents& loaded, const std::string& name, DType dtype,
                  const Shape& shape, const std::function<std::uint64_t(std::int64_t)>& expected) {
  const auto it = loaded.tensors.find(name);
  if (it == loaded.tensors.end()) {
    check(false, name + ": missing");
    return;
  }
  const Tensor& t = it->second;
  check(t.dtype() == dtype, name + ": dtype " + std::string(qkv::dtype_name(t.dtype())));
  check(t.shape() == shape, name + ": shape " + qkv::shape_string(t.shape()));
  if (t.dtype() != dtype || t.shape() != shape) return;
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  const std::size_t size = qkv::dtype_size(dtype);
  for (std::int64_t k = 0; k < t.numel(); ++k) {
    std::uint64_t bits = 0;
    for (std::size_t b = size; b-- > 0;) bits = (bits << 8) | bytes[k * size + b];
    check(bits == expected(k), name + ": element " + std::to_string(k) + " has bits " +
                                   std::to_string(bits) + ", expected " +
                                   std::to_string(expected(k)));
  }
}

// The same arrays as write_python_file in roundtrip.py.
void check_python_file(const std::filesystem::path& path) {
  const qkv::SafetensorsContents loaded = qkv::load_safetensors(path);
  check(loaded.tensors.size() == 7,
        "expected 7 tensors, got " + std::to_string(loaded.tensors.size()));
  check(loaded.metadata == qkv::SafetensorsMetadata{{"written_by", "python"}}, "metadata");
  check_tensor(loaded, "p_f64", DType::f64, {3, 2},
               [](std::int64_t k) { return std::bit_cast<std::uint64_t>(k / 7.0 - 0.3); });
  check_tensor(loaded, "p_f32", DType::f32, {2, 3, 4}, [](std::int64_t k) {
    return std::bit_cast<std::uint32_t>(static_cast<float>(k) / 3.0f);
  });
  check_tensor(loaded, "p_bf16", DType::bf16, {10},
               [](std::int64_t k) { return bf16_bits(static_cast<float>(k - 3) * 0.3f); });
  // k / 4 - 1.25 is exact in binary16: sign, exponent and mantissa written out by hand.
  const std::uint16_t f16[] = {0xbd00, 0xbc00, 0xba00, 0xb800, 0xb400, 0x0000, 0x3400, 0x3800};
  check_tensor(loaded, "p_f16", DType::f16, {8}, [&](std::int64_t k) { return f16[k]; });
  check_tensor(loaded, "p_bool", DType::boolean, {2, 2, 2},
               [](std::int64_t k) { return static_cast<std::uint64_t>(k % 2); });
  check_tensor(loaded, "p_scalar", DType::f32, {},
               [](std::int64_t) { return std::bit_cast<std::uint32_t>(2.5f); });
  check_tensor(loaded, "p_empty", DType::f64, {0, 4}, [](std::int64_t) { return 0; });
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: safetensors_python_roundtrip PYTHON SCRIPT WORK_DIR\n";
    return 2;
  }
  const std::filesystem::path python = argv[1];
  const std::filesystem::path work = argv[3];
  if (!std::filesystem::exists(python)) {
    std::cout << "SKIPPED: no Python at " << python.string()
              << "; `./qkv.sh setup` creates build/venv with tests/requirements.txt (or pass "
                 "-DQKV_PYTHON=<python with safetensors, numpy, ml_dtypes> to cmake)\n";
    return kSkip;
  }
  std::filesystem::create_directories(work);
  const std::filesystem::path from_qkv = work / "from_qkv.safetensors";
  const std::filesystem::path from_python = work / "from_python.safetensors";
  std::filesystem::remove(from_python);
  try {
    qkv::save_safetensors(from_qkv, tensors_for_python(),
                          {{"written_by", "qkv"}, {"note", "\xc3\xa9t\xc3\xa9"}});
    const std::string command = quoted(python.string()) + " " + quoted(argv[2]) + " " +
                                quoted(from_qkv.string()) + " " + quoted(from_python.string());
    std::cout << command << "\n" << std::flush;
    if (std::system(command.c_str()) != 0) {
      std::cout << "python_roundtrip: " << argv[2] << " failed\n";
      return 1;
    }
    check_python_file(from_python);
  } catch (const qkv::Error& e) {
    std::cout << "python_roundtrip: " << e.what() << "\n";
    return 1;
  }
  std::cout << "python_roundtrip: checked " << from_python.string() << ", " << failures
            << " failures\n";
  return failures == 0 ? 0 : 1;
}
