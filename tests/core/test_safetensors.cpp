// safetensors I/O (include/qkv/safetensors.hpp, src/core/safetensors.cpp): round trips of every
// dtype, strides, 0-d and empty tensors and metadata through a buffer and a file; the exact bytes
// written, checked against a layout worked out by hand; a file written by Python's safetensors
// package; and every kind of malformed input, hand-crafted byte by byte, each refused with a
// qkv::Error naming what is wrong. The exhaustive truncation and corruption test is what
// AddressSanitizer watches for out-of-bounds reads.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype_printer.hpp"
#include "qkv/dtype.hpp"
#include "qkv/error.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/tensor.hpp"

namespace {

using qkv::DType;
using qkv::NamedTensors;
using qkv::Shape;
using qkv::Tensor;

using Bytes = std::vector<std::byte>;

// The 8-byte little-endian length, then header, then data: a file made by hand.
Bytes make_file(const std::string& header, const std::string& data = "") {
  Bytes out;
  std::uint64_t length = header.size();
  for (int i = 0; i < 8; ++i, length >>= 8) out.push_back(static_cast<std::byte>(length & 0xff));
  for (const char c : header + data) out.push_back(static_cast<std::byte>(c));
  return out;
}

Bytes make_file_with_length(std::uint64_t length, const std::string& rest) {
  Bytes out;
  for (int i = 0; i < 8; ++i, length >>= 8) out.push_back(static_cast<std::byte>(length & 0xff));
  for (const char c : rest) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::string as_string(const Bytes& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Runs fn, which must throw qkv::Error about argument with every piece in its message.
template <class Fn>
void expect_error(Fn&& fn, const std::string& argument, const std::vector<std::string>& pieces) {
  try {
    fn();
  } catch (const qkv::Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    for (const std::string& piece : pieces) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos)
          << "'" << piece << "' not in: " << e.what();
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-qkv exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw (expected an error about " << argument << ")";
}

void expect_load_error(const Bytes& bytes, const std::string& argument,
                       const std::vector<std::string>& pieces) {
  SCOPED_TRACE(as_string(bytes).substr(std::min<std::size_t>(bytes.size(), 8)));
  expect_error([&] { qkv::deserialize_safetensors(bytes); }, argument, pieces);
}

// The raw bytes of a contiguous tensor.
std::string raw(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data()), t.numel() * qkv::dtype_size(t.dtype()));
}

// Values a dtype stores exactly, with signs, fractions and (for floats) a zero of each sign.
std::vector<double> sample_values(DType dtype, std::int64_t n) {
  std::vector<double> values;
  for (std::int64_t k = 0; k < n; ++k) {
    values.push_back(dtype == DType::boolean ? static_cast<double>(k % 3 == 0)
                                             : (k % 2 == 0 ? 1.0 : -1.0) * (0.25 * k + 0.5));
  }
  if (dtype != DType::boolean && n > 1) values[1] = -0.0;
  return values;
}

std::filesystem::path temp_file(const std::string& name) {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info->name();
  std::replace(test.begin(), test.end(), '/', '_');  // parameterized names hold a slash
  return std::filesystem::temp_directory_path() / ("qkv_" + test + "_" + name + ".safetensors");
}

const DType kAllDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::boolean};

// ---------------------------------------------------------------------------------------------
// Round trips

class SafetensorsRoundTrip : public testing::TestWithParam<DType> {};

TEST_P(SafetensorsRoundTrip, BufferAndFileGiveBackTheSameBytes) {
  const DType dtype = GetParam();
  const NamedTensors tensors = {
      {"matrix", Tensor::from_values({3, 4}, sample_values(dtype, 12), dtype)},
      {"scalar", Tensor::from_values({}, {1.0}, dtype)},
      {"empty", Tensor::zeros({2, 0, 3}, dtype)},
      {"vector", Tensor::from_values({5}, sample_values(dtype, 5), dtype)},
  };
  const qkv::SafetensorsMetadata metadata = {{"format", "np"}, {"note", "qkv \xc3\xa9t\xc3\xa9"}};
  const std::filesystem::path path = temp_file(std::string(qkv::dtype_name(dtype)));
  qkv::save_safetensors(path, tensors, metadata);
  const Bytes buffer = qkv::serialize_safetensors(tensors, metadata);
  std::ifstream file(path, std::ios::binary);
  const std::string on_disk{std::istreambuf_iterator<char>(file), {}};
  EXPECT_EQ(on_disk, as_string(buffer));

  for (const qkv::SafetensorsContents& loaded :
       {qkv::deserialize_safetensors(buffer), qkv::load_safetensors(path)}) {
    EXPECT_EQ(loaded.metadata, metadata);
    ASSERT_EQ(loaded.tensors.size(), tensors.size());
    for (const auto& [name, original] : tensors) {
      SCOPED_TRACE(name);
      const Tensor& t = loaded.tensors.at(name);
      EXPECT_EQ(t.dtype(), dtype);
      EXPECT_EQ(t.shape(), original.shape());
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(raw(t), raw(original));
    }
  }
  std::filesystem::remove(path);
}

TEST_P(SafetensorsRoundTrip, StridedInputIsWrittenContiguous) {
  const DType dtype = GetParam();
  const Tensor base = Tensor::from_values({4, 6}, sample_values(dtype, 24), dtype);
  const NamedTensors tensors = {
      {"transposed", base.transpose(0, 1)},
      {"sliced", base.slice(1, 1, 6, 2)},
      {"expanded", base.slice(0, 0, 1).expand({3, 6})},
  };
  const qkv::SafetensorsContents loaded =
      qkv::deserialize_safetensors(qkv::serialize_safetensors(tensors));
  for (const auto& [name, view] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& t = loaded.tensors.at(name);
    EXPECT_TRUE(t.is_contiguous());
    ASSERT_EQ(t.shape(), view.shape());
    for (std::int64_t i = 0; i < t.size(0); ++i) {
      for (std::int64_t j = 0; j < t.size(1); ++j) EXPECT_EQ(t.at({i, j}), view.at({i, j}));
    }
  }
  EXPECT_EQ(loaded.tensors.at("transposed").at({5, 0}), sample_values(dtype, 24)[5]);
}

INSTANTIATE_TEST_SUITE_P(EveryDType, SafetensorsRoundTrip, testing::ValuesIn(kAllDTypes),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(qkv::dtype_name(info.param));
                         });

TEST(Safetensors, NoTensorsAndNoMetadata) {
  const Bytes bytes = qkv::serialize_safetensors({});
  EXPECT_EQ(as_string(bytes), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  const qkv::SafetensorsContents loaded = qkv::deserialize_safetensors(bytes);
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_TRUE(loaded.metadata.empty());
}

// ---------------------------------------------------------------------------------------------
// The bytes written, worked out by hand from the format

TEST(Safetensors, WritesTheExactLayout) {
  const NamedTensors tensors = {
      {"a", Tensor::from_values({2}, {1.0, 2.0}, DType::f32)},
      {"b", Tensor::from_values({}, {-2.0}, DType::f64)},
      {"c", Tensor::from_values({1, 1}, {1.0}, DType::boolean)},
      {"d", Tensor::from_values({3}, {1.0, -2.0, 0.5}, DType::bf16)},
      {"e", Tensor::zeros({0}, DType::f16)},
  };
  // Largest elements first, then by name; data offsets follow without gaps.
  const std::string json = R"({"__metadata__":{"k":"v"},)"
                           R"("b":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                           R"("d":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                           R"("e":{"dtype":"F16","shape":[0],"data_offsets":[22,22]},)"
                           R"("c":{"dtype":"BOOL","shape":[1,1],"data_offsets":[22,23]}})";
  ASSERT_EQ(json.size(), 301u);
  const std::string padded = json + std::string(3, ' ');                 // 304 = 38 * 8
  const std::string data = std::string("\0\0\0\0\0\0\0\xc0", 8) +        // -2.0 as binary64
                           std::string("\0\0\x80\x3f\0\0\0\x40", 8) +    // 1.0f, 2.0f
                           std::string("\x80\x3f\x00\xc0\x00\x3f", 6) +  // bf16 1.0, -2.0, 0.5
                           std::string("\x01", 1);                       // true
  const Bytes expected = make_file(padded, data);
  EXPECT_EQ(as_string(qkv::serialize_safetensors(tensors, {{"k", "v"}})), as_string(expected));
}

// Written by safetensors 0.8.0 (safetensors.numpy.save_file with an ml_dtypes bfloat16 array).
TEST(Safetensors, ReadsAFileFromPythonSafetensors) {
  const std::string header =
      R"({"__metadata__":{"k":"v"},"f":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]}})";
  const std::string data("\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x80\x3f\x20\xc0\x49\x40",
                         18);
  const qkv::SafetensorsContents loaded = qkv::deserialize_safetensors(make_file(header, data));
  EXPECT_EQ(loaded.metadata, (qkv::SafetensorsMetadata{{"k", "v"}}));
  EXPECT_EQ(loaded.tensors.at("f").dtype(), DType::f32);
  EXPECT_EQ(loaded.tensors.at("f").to_vector(), (std::vector<double>{0.0, 1.0, 2.0}));
  EXPECT_EQ(loaded.tensors.at("b").dtype(), DType::bf16);
  EXPECT_EQ(loaded.tensors.at("b").to_vector(), (std::vector<double>{1.0, -2.5, 3.140625}));
}

TEST(Safetensors, AcceptsUnpaddedHeadersExtraFieldsAndAnyKeyOrder) {
  const std::string header =
      R"( {"z":{"data_offsets":[0,2],"extra":[1,{"x":2}],"shape":[1],"dtype":"F16"}} )";
  const qkv::SafetensorsContents loaded =
      qkv::deserialize_safetensors(make_file(header, std::string("\x00\x3c", 2)));
  EXPECT_EQ(loaded.tensors.at("z").to_vector(), std::vector<double>{1.0});
}

// ---------------------------------------------------------------------------------------------
// Malformed input

const std::string kF32Entry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
const std::string kEightBytes(8, '\0');

TEST(SafetensorsErrors, TooShortForTheLength) {
  expect_load_error(Bytes(5), "safetensors", {"at least 8 bytes", "got 5 bytes"});
  expect_load_error(Bytes(), "safetensors", {"got 0 bytes"});
}

TEST(SafetensorsErrors, HeaderLengthBeyondTheInput) {
  expect_load_error(make_file_with_length(20, "{}"), "safetensors header length",
                    {"at most 2 (the bytes after it)", "got 20"});
  expect_load_error(make_file_with_length(~std::uint64_t{0}, "{}"), "safetensors header length",
                    {"at most 100000000", "got 18446744073709551615"});
}

TEST(SafetensorsErrors, BadJson) {
  expect_load_error(make_file(R"({"a":)"), "safetensors header", {"expected valid JSON"});
  expect_load_error(make_file(R"({"a":1} x)"), "safetensors header", {"expected valid JSON"});
  expect_load_error(make_file("{\"\xff\":1}"), "safetensors header", {"expected valid JSON"});
  expect_load_error(make_file(""), "safetensors header", {"expected valid JSON"});
  expect_load_error(make_file(R"([1, 2])"), "safetensors header",
                    {"expected a JSON object", "got [1,2]"});
}

TEST(SafetensorsErrors, DeepNesting) {
  const std::string deep =
      R"({"a":{"dtype":"F32","x":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  expect_load_error(make_file(deep), "safetensors header", {"nested at most 64 deep"});
}

TEST(SafetensorsErrors, DuplicateNames) {
  expect_load_error(make_file("{\"a\":{" + kF32Entry + "},\"a\":{" + kF32Entry + "}}", kEightBytes),
                    "safetensors header", {"unique keys", "got 'a' twice"});
  expect_load_error(make_file(R"({"a":{"dtype":"F32","dtype":"F32"}})"), "safetensors header",
                    {"got 'dtype' twice"});
}

TEST(SafetensorsErrors, MissingFields) {
  expect_load_error(make_file(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", kEightBytes),
                    "tensor 'w'", {"a field \"dtype\"", "got none"});
  expect_load_error(make_file(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", kEightBytes),
                    "tensor 'w'", {"a field \"shape\""});
  expect_load_error(make_file(R"({"w":{"dtype":"F32","shape":[2]}})", kEightBytes), "tensor 'w'",
                    {"a field \"data_offsets\""});
  expect_load_error(make_file(R"({"w":[1, 2]})"), "tensor 'w'",
                    {"an object with dtype, shape and data_offsets", "got [1,2]"});
}

TEST(SafetensorsErrors, UnsupportedDTypesNameTheTensor) {
  for (const std::string dtype : {"I64", "I32", "U8", "I8", "U16", "F8_E4M3", "F8_E5M2", "f32"}) {
    expect_load_error(
        make_file(R"({"ids":{"dtype":")" + dtype + R"(","shape":[1],"data_offsets":[0,8]}})",
                  kEightBytes),
        "tensor 'ids'", {"expected dtype F64, F32, BF16, F16 or BOOL", "got \"" + dtype + "\""});
  }
  expect_load_error(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "1234"),
                    "tensor 'w'", {"got 4"});
}

TEST(SafetensorsErrors, BadShapes) {
  const auto with_shape = [](const std::string& shape) {
    return make_file(R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})",
                     kEightBytes);
  };
  expect_load_error(with_shape("2"), "tensor 'w'", {"shape as an array", "got 2"});
  expect_load_error(with_shape("[2, -1]"), "tensor 'w'", {"non-negative sizes", "got [2,-1]"});
  expect_load_error(with_shape("[2.0]"), "tensor 'w'", {"integer sizes", "got [2.0]"});
  expect_load_error(with_shape("[\"2\"]"), "tensor 'w'", {"integer sizes"});
  expect_load_error(with_shape("[9223372036854775808]"), "tensor 'w'", {"at most 2^63 - 1"});
  expect_load_error(with_shape("[4294967296, 4294967296]"), "tensor 'w'", {"at most 2^63 - 1"});
  // Empty, but strides would still multiply the other sizes.
  expect_load_error(with_shape("[0, 4294967296, 4294967296]"), "tensor 'w'", {"at most 2^63 - 1"});
  // The element count fits, the byte count does not.
  expect_load_error(with_shape("[4611686018427387904]"), "tensor 'w'",
                    {"byte count fits in 64 bits"});
  expect_load_error(with_shape("[99999999999999999999]"), "tensor 'w'", {"integer sizes"});
}

TEST(SafetensorsErrors, ShapeAndDTypeDisagreeWithTheOffsets) {
  expect_load_error(make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                              std::string(20, '\0')),
                    "tensor 'w'", {"data_offsets spanning 24 bytes (F32 [2, 3])", "got [0, 20]"});
  expect_load_error(
      make_file(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", kEightBytes),
      "tensor 'w'", {"spanning 4 bytes (F16 [2])"});
  expect_load_error(
      make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", kEightBytes),
      "tensor 'w'", {"got [8, 0]"});
}

TEST(SafetensorsErrors, MalformedOffsets) {
  const auto with_offsets = [](const std::string& offsets) {
    return make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}",
                     kEightBytes);
  };
  expect_load_error(with_offsets("[0]"), "tensor 'w'", {"data_offsets as [begin, end]"});
  expect_load_error(with_offsets("[0, 8, 16]"), "tensor 'w'", {"data_offsets as [begin, end]"});
  expect_load_error(with_offsets("{\"begin\":0}"), "tensor 'w'", {"data_offsets as [begin, end]"});
  expect_load_error(with_offsets("[-8, 0]"), "tensor 'w'", {"non-negative integers", "got -8"});
  expect_load_error(with_offsets("[0, 8.0]"), "tensor 'w'", {"non-negative integers"});
}

TEST(SafetensorsErrors, OffsetsOutOfRange) {
  expect_load_error(make_file("{\"w\":{" + kF32Entry + "}}", "1234"), "tensor 'w'",
                    {"within the 4 bytes of data", "got [0, 8]"});
  expect_load_error(
      make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})"),
      "tensor 'w'", {"spanning 8 bytes"});
  expect_load_error(make_file(R"({"w":{"dtype":"F32","shape":[0],)"
                              R"("data_offsets":[18446744073709551615,18446744073709551615]}})"),
                    "tensor 'w'", {"within the 0 bytes of data"});
}

TEST(SafetensorsErrors, OverlapsAndGaps) {
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_load_error(
      make_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                std::string(12, '\0')),
      "tensor 'b'", {"beginning at 8, the end of tensor 'a'", "got [4, 12] (overlapping"});
  expect_load_error(make_file("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                              std::string(8, '\0')),
                    "tensor 'b'", {"beginning at 8", "got [0, 8] (overlapping"});
  expect_load_error(
      make_file("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                std::string(16, '\0')),
      "tensor 'b'", {"beginning at 8, the end of tensor 'a'", "got [12, 16] (a gap of 4 bytes)"});
  expect_load_error(
      make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
      "tensor 'a'", {"beginning at 0, the start of the data", "(a gap of 4 bytes)"});
  expect_load_error(make_file("{" + a + R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                              std::string(8, '\0')),
                    "tensor 'b'", {"(overlapping"});
}

TEST(SafetensorsErrors, BytesAfterTheLastTensor) {
  expect_load_error(make_file("{\"w\":{" + kF32Entry + "}}", std::string(9, '\0')),
                    "safetensors data", {"8 bytes (the end of the last tensor)", "got 9 bytes"});
  expect_load_error(make_file("{}", "x"), "safetensors data", {"expected 0 bytes"});
}

TEST(SafetensorsErrors, BadMetadata) {
  expect_load_error(make_file(R"({"__metadata__":["a"]})"), "__metadata__",
                    {"an object of strings", "got [\"a\"]"});
  expect_load_error(make_file(R"({"__metadata__":{"epoch":3}})"), "__metadata__",
                    {"string values", "got 'epoch': 3"});
}

TEST(SafetensorsErrors, BooleanBytesOtherThanZeroOrOne) {
  const Bytes bytes = make_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                std::string("\x01\x00\x02", 3));
  expect_load_error(bytes, "tensor 'm'", {"BOOL bytes 0 or 1", "got 2 at element 2"});
}

TEST(SafetensorsErrors, LongNamesAreShortenedInMessages) {
  const std::string name(1000, 'n');
  try {
    qkv::deserialize_safetensors(make_file("{\"" + name + "\":{}}"));
    ADD_FAILURE() << "did not throw";
  } catch (const qkv::Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
  }
}

TEST(SafetensorsErrors, FileErrors) {
  const std::filesystem::path missing = temp_file("missing");
  expect_error([&] { qkv::load_safetensors(missing); }, "path",
               {"a readable file", missing.string()});
  // The same validation as a buffer: a header length beyond the file.
  const std::filesystem::path path = temp_file("truncated");
  const Bytes bytes = make_file_with_length(100, "{}");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 10);
  expect_error([&] { qkv::load_safetensors(path); }, "safetensors header length",
               {"at most 2 (the bytes after it)"});
  std::ofstream(path, std::ios::binary).write("abc", 3);
  expect_error([&] { qkv::load_safetensors(path); }, "safetensors", {"got 3 bytes"});
  std::filesystem::remove(path);
  expect_error([&] { qkv::save_safetensors(missing / "no" / "dir", {}); }, "path",
               {"a file open for writing"});
}

TEST(SafetensorsErrors, SaveRefusesWhatTheFormatCannotHold) {
  const Tensor t = Tensor::zeros({2});
  expect_error(
      [&] {
        qkv::serialize_safetensors({{"__metadata__", t}});
      },
      "tensors", {"no tensor named __metadata__"});
  expect_error(
      [&] {
        qkv::serialize_safetensors({{"w", Tensor()}});
      },
      "tensor 'w'", {"a defined tensor", "got undefined"});
  expect_error([&] { qkv::serialize_safetensors({{"\xff", t}}); }, "tensors", {"UTF-8"});
  expect_error([&] { qkv::serialize_safetensors({}, {{"k", "\xc3"}}); }, "tensors", {"UTF-8"});
  const std::filesystem::path path = temp_file("refused");
  expect_error([&] { qkv::save_safetensors(path, {{"w", Tensor()}}); }, "tensor 'w'", {});
  EXPECT_FALSE(std::filesystem::exists(path)) << "nothing is written on error";
}

// Every prefix of a valid file and every single-byte corruption of it either loads or throws
// qkv::Error: never a crash, never another exception, never a read out of bounds.
TEST(SafetensorsErrors, EveryTruncationAndCorruptionIsRefusedCleanly) {
  const NamedTensors tensors = {
      {"a", Tensor::from_values({2, 2}, {1, 2, 3, 4}, DType::f32)},
      {"m", Tensor::from_values({3}, {1, 0, 1}, DType::boolean)},
      {"s", Tensor::from_values({}, {0.5}, DType::f16)},
  };
  const Bytes valid = qkv::serialize_safetensors(tensors, {{"k", "v"}});
  const auto attempt = [](const Bytes& bytes) {
    try {
      qkv::deserialize_safetensors(bytes);
    } catch (const qkv::Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-qkv exception: " << e.what() << " for " << as_string(bytes);
    }
  };
  for (std::size_t n = 0; n < valid.size(); ++n) {
    attempt(Bytes(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(n)));
  }
  for (std::size_t k = 0; k < valid.size(); ++k) {
    for (const unsigned char value :
         {0x00, 0x01, 0x02, 0x20, 0x22, 0x2c, 0x30, 0x39, 0x5b, 0x5d, 0x7b, 0x7d, 0x80, 0xff}) {
      Bytes corrupted = valid;
      corrupted[k] = static_cast<std::byte>(value);
      attempt(corrupted);
    }
  }
}

}  // namespace
