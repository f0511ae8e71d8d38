// Tensor (include/qkv/tensor.hpp, src/core/tensor.cpp): factories, element access, views that
// share storage, copies, conversions, aliasing and error messages. Expected values come from
// index arithmetic written here, from hand-worked lists, or from the double-arithmetic rounding
// in reference_rounding.hpp, never from another Tensor code path.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype_printer.hpp"
#include "core/reference_rounding.hpp"
#include "qkv/dtype.hpp"
#include "qkv/error.hpp"
#include "qkv/half.hpp"
#include "qkv/philox.hpp"
#include "qkv/tensor.hpp"

namespace {

using qkv::DType;
using qkv::Shape;
using qkv::Tensor;

const DType kAllDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::boolean};
const DType kFloatDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16};

std::string dtype_param_name(const testing::TestParamInfo<DType>& info) {
  return std::string(qkv::dtype_name(info.param));
}

// The value a double takes when stored in dtype, by an independent rounding.
double stored_value(DType dtype, double v) {
  switch (dtype) {
    case DType::f64:
      return v;
    case DType::f32:
      return qkv::test::round_to_format(v, qkv::test::kF32Format);
    case DType::bf16:
      return qkv::test::round_to_format(v, qkv::test::kBf16Format);
    case DType::f16:
      return qkv::test::round_to_format(v, qkv::test::kF16Format);
    case DType::boolean:
      return v != 0.0 ? 1.0 : 0.0;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::int64_t count(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

// 0, 1, 2, ... in row-major order (exact in every floating dtype up to 256).
Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  std::vector<double> values(static_cast<std::size_t>(count(shape)));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<double>(k);
  return Tensor::from_values(shape, values, dtype);
}

std::vector<double> range(int begin, int end) {
  std::vector<double> v;
  for (int k = begin; k < end; ++k) v.push_back(k);
  return v;
}

bool aligned_64(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

// Runs fn, which must throw qkv::Error about argument; returns the message.
template <class Fn>
std::string expect_error(Fn&& fn, const std::string& argument) {
  try {
    fn();
  } catch (const qkv::Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-qkv exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw (expected an error about " << argument << ")";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Factories

class Factories : public testing::TestWithParam<DType> {};

TEST_P(Factories, EmptyZerosFullHaveContiguousAlignedStorage) {
  const DType dtype = GetParam();
  for (const Tensor& t : {Tensor::empty({2, 3, 4}, dtype), Tensor::zeros({2, 3, 4}, dtype),
                          Tensor::full({2, 3, 4}, 2.5, dtype)}) {
    EXPECT_TRUE(t.defined());
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.dim(), 3);
    EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
    EXPECT_EQ(t.numel(), 24);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_TRUE(aligned_64(t.data())) << t.data();
  }
  const Tensor zeros = Tensor::zeros({2, 3, 4}, dtype);
  const auto* bytes = static_cast<const unsigned char*>(zeros.data());
  for (std::size_t k = 0; k < 24 * qkv::dtype_size(dtype); ++k) ASSERT_EQ(bytes[k], 0) << k;
  EXPECT_EQ(Tensor::full({2, 3, 4}, 2.5, dtype).to_vector(),
            std::vector<double>(24, stored_value(dtype, 2.5)));
}

TEST_P(Factories, EveryAllocationIs64ByteAligned) {
  const DType dtype = GetParam();
  std::vector<Tensor> keep;  // held so that the allocator cannot hand back one block repeatedly
  for (std::int64_t n = 0; n < 200; ++n) {
    keep.push_back(Tensor::empty({n}, dtype));
    EXPECT_TRUE(aligned_64(keep.back().data())) << "n=" << n;
  }
}

// From 2 MiB up a tensor's storage starts on a huge-page boundary (core/pages.hpp), and the
// factories fill the whole of it: sizes just below, at and above the threshold.
TEST(Tensor, LargeStorageIsHugePageAlignedAndFilled) {
  constexpr std::int64_t kFloats = (std::int64_t{1} << 21) / 4;
  for (const std::int64_t n : {kFloats - 1, kFloats, kFloats + 1, 3 * kFloats + 17}) {
    const Tensor t = Tensor::full({n}, 1.5);
    const auto address = reinterpret_cast<std::uintptr_t>(t.data());
    if (n >= kFloats) {
      EXPECT_EQ(address % (std::uintptr_t{1} << 21), 0u) << "n=" << n;
    } else {
      EXPECT_EQ(address % 64, 0u) << "n=" << n;
    }
    const auto* x = static_cast<const float*>(t.data());
    EXPECT_EQ(x[0], 1.5f);
    EXPECT_EQ(x[n - 1], 1.5f) << "n=" << n;
    const Tensor z = Tensor::zeros({n});
    const auto* y = static_cast<const float*>(z.data());
    EXPECT_EQ(std::count(y, y + n, 0.0f), n) << "n=" << n;
  }
}

// A boolean destination takes the element-by-element conversion: from a 0-d tensor, and into
// rows apart, where floating dtypes go a row at a time (the attention fuzzer's keep-masks; a 0-d
// one once reached for a last dimension it does not have).
TEST(Tensor, CopyFromIntoBooleansOfAnyRank) {
  Tensor scalar = Tensor::zeros({}, DType::boolean);
  scalar.copy_from(Tensor::full({}, 2.0, DType::f64));
  EXPECT_EQ(scalar.at({}), 1.0);
  Tensor base = Tensor::zeros({2, 5}, DType::boolean);
  base.slice(1, 1, 4).copy_from(Tensor::from_values({2, 3}, {0, 1, 0, 3, 0, -1}));
  EXPECT_EQ(base.to_vector(), (std::vector<double>{0, 0, 1, 0, 0, 0, 1, 0, 1, 0}));
}

TEST_P(Factories, ScalarHasNoDimensionsAndOneElement) {
  const DType dtype = GetParam();
  Tensor t = Tensor::full({}, 1.0, dtype);
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_TRUE(t.strides().empty());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at({}), 1.0);
  t.set({}, 0.0);
  EXPECT_EQ(t.to_vector(), std::vector<double>{0.0});
}

TEST_P(Factories, FromValuesIsRowMajor) {
  const DType dtype = GetParam();
  const std::vector<double> values = {0.5, -1, 2, 0, 3.25, -7, 1, 0.125, 6, -0.5, 4, 9};
  const Tensor t = Tensor::from_values({2, 3, 2}, values, dtype);
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      for (std::int64_t k = 0; k < 2; ++k) {
        EXPECT_EQ(t.at({i, j, k}), stored_value(dtype, values[i * 6 + j * 2 + k]))
            << i << "," << j << "," << k;
      }
    }
  }
}

TEST_P(Factories, SetThenAtRoundTripsThroughTheDType) {
  const DType dtype = GetParam();
  Tensor t = Tensor::zeros({3, 5}, dtype);
  const double value = 0.1;
  t.set({2, 4}, value);
  t.set(Shape{0, 1}, -3.0);
  EXPECT_EQ(t.at({2, 4}), stored_value(dtype, value));
  EXPECT_EQ(t.at(Shape{0, 1}), stored_value(dtype, -3.0));
  EXPECT_EQ(t.at({1, 1}), 0.0);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, Factories, testing::ValuesIn(kAllDTypes), dtype_param_name);

TEST(Factories, RandnIsSeededAndDrawsRowMajorFromTheGenerator) {
  qkv::Generator g1(123);
  qkv::Generator g2(123);
  qkv::Generator g3(124);
  const Tensor a = Tensor::randn({4, 5}, g1, DType::f64);
  const Tensor b = Tensor::randn({4, 5}, g2, DType::f64);
  const Tensor c = Tensor::randn({4, 5}, g3, DType::f64);
  EXPECT_EQ(a.shape(), (Shape{4, 5}));
  EXPECT_TRUE(aligned_64(a.data()));
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), c.to_vector());
  // The documented order: element k is the k-th normal of the stream.
  qkv::Generator stream(123);
  const std::vector<double> values = a.to_vector();
  for (std::size_t k = 0; k < values.size(); ++k) EXPECT_EQ(values[k], stream.next_normal()) << k;
  // The tensor consumed exactly 20 draws: the generators continue in step.
  EXPECT_EQ(g1.next_u32(), stream.next_u32());
}

TEST(Factories, RandnInLowPrecisionIsTheRoundedDraw) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(qkv::dtype_name(dtype)));
    qkv::Generator g(5);
    qkv::Generator stream(5);
    const std::vector<double> values = Tensor::randn({64}, g, dtype).to_vector();
    for (std::size_t k = 0; k < values.size(); ++k) {
      EXPECT_EQ(values[k], stored_value(dtype, stream.next_normal())) << k;
    }
  }
}

class Uniform : public testing::TestWithParam<DType> {};

TEST_P(Uniform, StaysWithinLowHighAndIsSeeded) {
  const DType dtype = GetParam();
  // Bounds a rounding can reach from below: [0, 1), [1, 2) (in f64 too: 1 + (1 - 2^-53) ties
  // to 2), and bounds that are not representable in the low-precision types.
  const std::pair<double, double> bounds[] = {{0.0, 1.0}, {1.0, 2.0}, {-2.0, 3.0}, {-0.3, 0.1}};
  for (const auto& [low, high] : bounds) {
    SCOPED_TRACE("low=" + std::to_string(low) + " high=" + std::to_string(high));
    qkv::Generator g(11);
    const Tensor t = Tensor::uniform({200000}, low, high, g, dtype);
    EXPECT_EQ(t.dtype(), dtype);
    double sum = 0;
    int outside = 0;
    for (const double v : t.to_vector()) {
      if (!(v >= low && v < high) && outside++ < 5) ADD_FAILURE() << "value " << v;
      sum += v;
    }
    EXPECT_EQ(outside, 0);
    // Mean within 5 standard errors, plus the rounding of the dtype (at most half an ulp of
    // the largest magnitude, 2^-9 relative for bf16).
    const double sd = (high - low) / std::sqrt(12.0 * 200000);
    const double rounding = std::max(std::fabs(low), std::fabs(high)) * 0x1p-8;
    EXPECT_NEAR(sum / 200000, (low + high) / 2, 5 * sd + rounding);
    qkv::Generator again(11);
    EXPECT_EQ(Tensor::uniform({200000}, low, high, again, dtype).to_vector(), t.to_vector());
  }
}

TEST_P(Uniform, FirstDrawsFollowTheGenerator) {
  const DType dtype = GetParam();
  qkv::Generator g(3);
  qkv::Generator stream(3);
  const std::vector<double> values = Tensor::uniform({16}, -1.0, 1.0, g, dtype).to_vector();
  for (std::size_t k = 0; k < values.size(); ++k) {
    EXPECT_EQ(values[k], stored_value(dtype, -1.0 + 2.0 * stream.next_uniform())) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(FloatDTypes, Uniform, testing::ValuesIn(kFloatDTypes), dtype_param_name);

// ---------------------------------------------------------------------------------------------
// Element access

TEST(ElementAccess, OutOfBoundsAndWrongRankThrowAndWriteNothing) {
  Tensor t = Tensor::full({2, 3}, 7.0);
  expect_error([&] { (void)t.at({2, 0}); }, "index");
  expect_error([&] { (void)t.at({0, -1}); }, "index");
  expect_error([&] { (void)t.at({0, 3}); }, "index");
  expect_error([&] { (void)t.at({0}); }, "index");
  expect_error([&] { (void)t.at(Shape{0, 0, 0}); }, "index");
  expect_error([&] { t.set({-1, 0}, 1.0); }, "index");
  expect_error([&] { t.set(Shape{1, 3}, 1.0); }, "index");
  EXPECT_EQ(t.to_vector(), std::vector<double>(6, 7.0));
}

TEST(ElementAccess, SizeAndStrideCountNegativeDimensionsFromTheEnd) {
  const Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(t.stride(0), 12);
  expect_error([&] { (void)t.size(3); }, "dim");
  expect_error([&] { (void)t.stride(-4); }, "dim");
}

TEST(ElementAccess, DataAsChecksTheType) {
  const Tensor t = Tensor::zeros({4}, DType::f16);
  EXPECT_EQ(static_cast<void*>(t.data_as<qkv::f16>()), t.data());
  expect_error([&] { (void)t.data_as<float>(); }, "tensor");
  expect_error([&] { (void)t.data_as<qkv::bf16>(); }, "tensor");
  EXPECT_NO_THROW((void)Tensor::zeros({1}, DType::boolean).data_as<std::uint8_t>());
  EXPECT_NO_THROW((void)Tensor::zeros({1}, DType::f64).data_as<double>());
}

TEST(ElementAccess, ToVectorFollowsTheLogicalOrderOfAView) {
  const Tensor t = iota({2, 3});
  EXPECT_EQ(t.to_vector(), range(0, 6));
  EXPECT_EQ(t.transpose(0, 1).to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

// ---------------------------------------------------------------------------------------------
// Copies and conversions

TEST(Copies, ContiguousIsTheSameTensorWhenAlreadyContiguous) {
  Tensor t = iota({3, 4});
  Tensor c = t.contiguous();
  EXPECT_EQ(c.data(), t.data());
  c.set({1, 1}, -1.0);
  EXPECT_EQ(t.at({1, 1}), -1.0);
}

TEST(Copies, ContiguousCopiesAStridedView) {
  const Tensor t = iota({3, 4});
  const Tensor view = t.transpose(0, 1);
  Tensor c = view.contiguous();
  EXPECT_NE(c.data(), t.data());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(c.strides(), (Shape{3, 1}));
  EXPECT_EQ(c.to_vector(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  c.set({0, 1}, -1.0);
  EXPECT_EQ(t.at({1, 0}), 4.0);
}

TEST(Copies, CloneIsAnIndependentContiguousCopy) {
  Tensor t = iota({2, 3}, DType::f64);
  Tensor c = t.clone();
  EXPECT_NE(c.data(), t.data());
  EXPECT_TRUE(aligned_64(c.data()));
  EXPECT_EQ(c.dtype(), DType::f64);
  EXPECT_EQ(c.to_vector(), range(0, 6));
  c.set({0, 0}, 100.0);
  t.set({1, 2}, -100.0);
  EXPECT_EQ(t.at({0, 0}), 0.0);
  EXPECT_EQ(c.at({1, 2}), 5.0);
  const Tensor strided = t.slice(1, 0, 3, 2).clone();
  EXPECT_TRUE(strided.is_contiguous());
  EXPECT_EQ(strided.to_vector(), (std::vector<double>{0, 2, 3, -100}));
}

struct ConversionCase {
  DType from;
  DType to;
};

void PrintTo(const ConversionCase& c, std::ostream* os) {
  *os << qkv::dtype_name(c.from) << " -> " << qkv::dtype_name(c.to);
}

std::vector<ConversionCase> all_conversions() {
  std::vector<ConversionCase> cases;
  for (const DType from : kAllDTypes) {
    for (const DType to : kAllDTypes) cases.push_back({from, to});
  }
  return cases;
}

class Conversion : public testing::TestWithParam<ConversionCase> {};

TEST_P(Conversion, ToRoundsTheStoredValueIntoTheTarget) {
  const auto [from, to] = GetParam();
  // Values that round differently in each format, overflow f16 (70000), sit below the f16
  // subnormals (1e-9), and are exact everywhere (0, 1, -2).
  const std::vector<double> values = {0,     1,       -2,   0.1,  1.0 / 3,  1000.7,
                                      -1e-3, 70000.5, 1e-9, -0.0, 3.140625, 257};
  const Tensor source = Tensor::from_values({3, 4}, values, from);
  const Tensor converted = source.to(to);
  EXPECT_EQ(converted.dtype(), to);
  EXPECT_EQ(converted.shape(), (Shape{3, 4}));
  EXPECT_TRUE(converted.is_contiguous());
  if (from == to) {
    EXPECT_EQ(converted.data(), source.data());
  } else {
    EXPECT_NE(converted.data(), source.data());
  }
  const std::vector<double> got = converted.to_vector();
  for (std::size_t k = 0; k < values.size(); ++k) {
    EXPECT_EQ(got[k], stored_value(to, stored_value(from, values[k])))
        << "value " << values[k] << " at " << k;
  }
  // Converting a strided view converts the viewed elements in logical order (and, to the same
  // dtype, is that very view).
  const Tensor transposed = source.transpose(0, 1).to(to);
  EXPECT_EQ(transposed.is_contiguous(), from != to);
  EXPECT_EQ(transposed.at({3, 2}), stored_value(to, stored_value(from, values[11])));
  EXPECT_EQ(transposed.at({1, 2}), stored_value(to, stored_value(from, values[9])));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, Conversion, testing::ValuesIn(all_conversions()),
                         [](const testing::TestParamInfo<ConversionCase>& info) {
                           return std::string(qkv::dtype_name(info.param.from)) + "_to_" +
                                  std::string(qkv::dtype_name(info.param.to));
                         });

TEST(Copies, CopyFromAcrossDTypesAndStrides) {
  for (const DType dst_dtype : kAllDTypes) {
    for (const DType src_dtype : kAllDTypes) {
      SCOPED_TRACE(std::string(qkv::dtype_name(src_dtype)) + " -> " +
                   std::string(qkv::dtype_name(dst_dtype)));
      // src: every other column of a [4, 6] (quarters, exact in every type); dst: a transposed
      // view of a [3, 4].
      std::vector<double> values;
      for (int k = 0; k < 24; ++k) values.push_back(0.25 * (k % 7));
      const Tensor src_base = Tensor::from_values({4, 6}, values, src_dtype);
      const Tensor src = src_base.slice(1, 0, 6, 2);
      Tensor dst_base = Tensor::full({3, 4}, -9.0, dst_dtype);
      Tensor dst = dst_base.transpose(0, 1);
      dst.copy_from(src);
      for (std::int64_t i = 0; i < 4; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          EXPECT_EQ(dst_base.at({j, i}),
                    stored_value(dst_dtype, stored_value(src_dtype, values[i * 6 + j * 2])))
              << i << "," << j;
        }
      }
    }
  }
}

// A contiguous copy across dtypes converts whole runs at once (core/convert.cpp, threads from 2^14
// elements): it must give the bits the element-by-element path gives, which a copy into a
// transposed view takes, on every bit pattern class: normals, subnormals, both zeros, infinities,
// NaNs (quiet and signalling), f16's overflow and f64 values between two f32 neighbours.
TEST(Copies, ContiguousConversionRunsEqualTheElementPath) {
  constexpr std::int64_t kRows = 3, kCols = 70001;  // 210003 elements: past the threaded size
  std::vector<double> values(static_cast<std::size_t>(kRows * kCols));
  std::uint64_t state = 0x9e3779b97f4a7c15u;
  for (std::size_t k = 0; k < values.size(); ++k) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    const auto bits32 = static_cast<std::uint32_t>(state >> 32);
    switch (k % 8) {
      case 0:  // any f32 bit pattern: NaNs, infinities and subnormals among them
        values[k] = static_cast<double>(std::bit_cast<float>(bits32));
        break;
      case 1:  // any bf16 pattern
        values[k] = qkv::bf16_bits_to_f32(static_cast<std::uint16_t>(bits32 >> 16));
        break;
      case 2:  // any f16 pattern
        values[k] = qkv::f16_bits_to_f32(static_cast<std::uint16_t>(bits32 >> 16));
        break;
      case 3:  // f64 with bits below f32's last
        values[k] = std::ldexp(static_cast<double>(state >> 11), -40);
        break;
      case 4:
        values[k] = (k % 16 == 4) ? -0.0 : 65519.99;
        break;
      default:  // around f16's largest and smallest values
        values[k] = std::ldexp(static_cast<double>(bits32 % 4096) - 2048.0, -24 + int(k % 40));
    }
  }
  for (const DType from : kFloatDTypes) {
    for (const DType to : kFloatDTypes) {
      SCOPED_TRACE(std::string(qkv::dtype_name(from)) + " -> " + std::string(qkv::dtype_name(to)));
      Tensor source = Tensor::empty({kRows, kCols}, from);
      for (std::int64_t r = 0; r < kRows; ++r) {
        for (std::int64_t c = 0; c < kCols; ++c) {
          source.set({r, c}, values[static_cast<std::size_t>(r * kCols + c)]);
        }
      }
      Tensor fast = Tensor::empty({kRows, kCols}, to);
      fast.copy_from(source);
      Tensor slow_base = Tensor::empty({kCols, kRows}, to);
      slow_base.transpose(0, 1).copy_from(source);
      const Tensor slow = slow_base.transpose(0, 1).contiguous();
      // Rows apart (a wider row stride, the last dimension contiguous): a run per row.
      Tensor by_rows_base = Tensor::empty({kRows, kCols + 3}, to);
      by_rows_base.slice(1, 0, kCols).copy_from(source);
      const Tensor by_rows = by_rows_base.slice(1, 0, kCols).contiguous();
      EXPECT_EQ(std::memcmp(fast.data(), by_rows.data(), qkv::dtype_size(to) * kRows * kCols), 0);
      // The same bits, but for NaNs, which only have to stay NaNs (a signalling NaN's quiet bit
      // is set by whichever instruction first moves it through a wider format).
      const std::size_t size = qkv::dtype_size(to);
      std::int64_t differ = 0;
      for (std::int64_t r = 0; r < kRows; ++r) {
        for (std::int64_t c = 0; c < kCols; ++c) {
          const std::size_t at = static_cast<std::size_t>(r * kCols + c) * size;
          if (std::memcmp(static_cast<const std::byte*>(fast.data()) + at,
                          static_cast<const std::byte*>(slow.data()) + at, size) == 0) {
            continue;
          }
          if (!(std::isnan(fast.at({r, c})) && std::isnan(slow.at({r, c})))) ++differ;
        }
      }
      EXPECT_EQ(differ, 0);
    }
  }
}

TEST(Copies, CopyFromShiftedOverlappingViewReadsTheOldValues) {
  for (const DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(qkv::dtype_name(dtype)));
    const std::int64_t n = 6;
    Tensor right = iota({n}, dtype);
    right.slice(0, 1, n).copy_from(right.slice(0, 0, n - 1));
    Tensor left = iota({n}, dtype);
    left.slice(0, 0, n - 1).copy_from(left.slice(0, 1, n));
    std::vector<double> shifted_right = {0, 0, 1, 2, 3, 4};
    std::vector<double> shifted_left = {1, 2, 3, 4, 5, 5};
    for (double& v : shifted_right) v = stored_value(dtype, v);
    for (double& v : shifted_left) v = stored_value(dtype, v);
    EXPECT_EQ(right.to_vector(), shifted_right);
    EXPECT_EQ(left.to_vector(), shifted_left);
  }
}

TEST(Copies, CopyFromOwnTransposeTransposesInPlace) {
  Tensor t = iota({3, 3});
  t.copy_from(t.transpose(0, 1));
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
}

TEST(Copies, CopyFromOverlappingViewOfAnotherDType) {
  // Two views of one buffer as different types: the f32 values 1.0f and 2.0f share bytes with
  // the upper halves read as bf16, so a copy between them must read before writing.
  alignas(8) float buffer[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  Tensor as_f32 = Tensor::from_blob(buffer, {4}, {1}, DType::f32);
  Tensor as_bf16 = Tensor::from_blob(buffer, {4}, {1}, DType::bf16);
  EXPECT_TRUE(as_f32.overlaps(as_bf16));
  const std::vector<double> before = as_bf16.to_vector();
  as_f32.copy_from(as_bf16);
  EXPECT_EQ(as_f32.to_vector(), before);
}

// from_blob without strides views row-major memory: the strides of a contiguous tensor, the
// caller's values in place, and writes that reach the caller's buffer.
TEST(Copies, FromBlobWithoutStridesIsRowMajor) {
  double buffer[6] = {0, 1, 2, 3, 4, 5};
  Tensor t = Tensor::from_blob(buffer, {2, 3}, DType::f64);
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at({1, 0}), 3.0);
  t.set({0, 2}, 7.0);
  EXPECT_EQ(buffer[2], 7.0);
  EXPECT_THROW(Tensor::from_blob(nullptr, {2}, DType::f32), qkv::Error);
}

TEST(Copies, CopyFromBroadcastSource) {
  Tensor dst = Tensor::zeros({2, 3}, DType::f64);
  dst.copy_from(Tensor::from_values({3}, {1, 2, 3}).expand({2, 3}));
  EXPECT_EQ(dst.to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST(Copies, CopyFromShapeMismatchThrowsAndWritesNothing) {
  Tensor dst = Tensor::full({2, 3}, 7.0);
  const std::string message = expect_error([&] { dst.copy_from(Tensor::zeros({3, 2})); }, "src");
  EXPECT_EQ(message, "src: expected shape [2, 3], got [3, 2]");
  expect_error([&] { dst.copy_from(Tensor::zeros({6})); }, "src");
  expect_error([&] { dst.copy_from(Tensor()); }, "src");
  EXPECT_EQ(dst.to_vector(), std::vector<double>(6, 7.0));
}

TEST(Copies, FillWritesOnlyTheViewedElements) {
  Tensor t = Tensor::zeros({3, 4});
  t.transpose(0, 1).slice(0, 0, 4, 2).fill(1.0);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}));
}

// ---------------------------------------------------------------------------------------------
// Views

TEST(Views, PermuteMovesShapeAndStridesAndSharesStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.data(), t.data());
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      for (std::int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(p.at({k, i, j}), static_cast<double>(i * 12 + j * 4 + k));
      }
    }
  }
  p.set({3, 1, 2}, -1.0);
  EXPECT_EQ(t.at({1, 2, 3}), -1.0);
  EXPECT_EQ(t.permute({-1, 0, 1}).strides(), (Shape{1, 12, 4}));
  expect_error([&] { (void)t.permute({0, 0, 1}); }, "dims");
  expect_error([&] { (void)t.permute({0, 1}); }, "dims");
  expect_error([&] { (void)t.permute({0, 1, 3}); }, "dims");
}

TEST(Views, TransposeSwapsTwoDimensions) {
  Tensor t = iota({2, 3, 4});
  Tensor v = t.transpose(0, 2);
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(v.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(v.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(v.at({3, 1, 1}), 1 * 12 + 1 * 4 + 3.0);
  EXPECT_EQ(t.transpose(-1, -2).shape(), (Shape{2, 4, 3}));
  v.set({0, 2, 1}, 55.0);
  EXPECT_EQ(t.at({1, 2, 0}), 55.0);
  expect_error([&] { (void)t.transpose(3, 0); }, "a");
  expect_error([&] { (void)t.transpose(0, -4); }, "b");
}

struct SliceCase {
  std::int64_t start;
  std::int64_t end;
  std::int64_t step;
  std::vector<double> expected;  // worked out from Python's range semantics on 0..9
};

void PrintTo(const SliceCase& c, std::ostream* os) {
  *os << "[" << c.start << ":" << c.end << ":" << c.step << "] of 0..9";
}

class Slice : public testing::TestWithParam<SliceCase> {};

TEST_P(Slice, MatchesPythonSemanticsAndSharesStorage) {
  const SliceCase& c = GetParam();
  Tensor t = iota({10}, DType::f64);
  Tensor s = t.slice(0, c.start, c.end, c.step);
  EXPECT_EQ(s.shape(), (Shape{static_cast<std::int64_t>(c.expected.size())}));
  EXPECT_EQ(s.numel(), static_cast<std::int64_t>(c.expected.size()));
  EXPECT_EQ(s.to_vector(), c.expected);
  if (!c.expected.empty()) {
    EXPECT_EQ(s.stride(0), c.step);
    EXPECT_EQ(s.data(), static_cast<double*>(t.data()) + static_cast<int>(c.expected[0]));
    s.set({0}, -1.0);
    EXPECT_EQ(t.at({static_cast<std::int64_t>(c.expected[0])}), -1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Slice,
    testing::Values(SliceCase{0, 10, 1, range(0, 10)}, SliceCase{1, 8, 3, {1, 4, 7}},
                    SliceCase{-3, -1, 1, {7, 8}}, SliceCase{-100, 100, 1, range(0, 10)},
                    SliceCase{5, 2, 1, {}}, SliceCase{8, 100, 5, {8}}, SliceCase{-1, 10, 1, {9}},
                    SliceCase{0, -9, 2, {0}}, SliceCase{10, 12, 1, {}}, SliceCase{3, 3, 1, {}},
                    SliceCase{0, 10, 4, {0, 4, 8}}, SliceCase{2, 7, 100, {2}}));

TEST(Views, SliceAlongAnInnerDimensionWithStep) {
  Tensor t = iota({3, 4});
  Tensor s = t.slice(1, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.strides(), (Shape{4, 2}));
  EXPECT_EQ(s.to_vector(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  s.set({2, 1}, 100.0);
  EXPECT_EQ(t.at({2, 3}), 100.0);
  EXPECT_EQ(t.slice(-1, -2, 4).to_vector(), (std::vector<double>{2, 3, 6, 7, 10, 100}));
  expect_error([&] { (void)t.slice(1, 0, 4, 0); }, "step");
  expect_error([&] { (void)t.slice(1, 0, 4, -1); }, "step");
  expect_error([&] { (void)t.slice(2, 0, 1); }, "dim");
}

TEST(Views, ViewsKeepTheStorageAlive) {
  Tensor view;
  {
    Tensor t = iota({10});
    view = t.slice(0, 2, 5);
  }
  EXPECT_EQ(view.to_vector(), (std::vector<double>{2, 3, 4}));
}

TEST(Views, ReshapeOfContiguousIsAView) {
  Tensor t = iota({2, 3, 4});
  Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.strides(), (Shape{4, 1}));
  EXPECT_EQ(r.to_vector(), range(0, 24));
  r.set({5, 3}, -1.0);
  EXPECT_EQ(t.at({1, 2, 3}), -1.0);
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(t.reshape({4, -1}).shape(), (Shape{4, 6}));
  EXPECT_EQ(t.reshape({1, 24, 1}).data(), t.data());
  EXPECT_EQ(t.view({2, 12}).data(), t.data());
  expect_error([&] { (void)t.reshape({5, -1}); }, "shape");
  expect_error([&] { (void)t.reshape({-1, -1}); }, "shape");
  expect_error([&] { (void)t.reshape({2, 2}); }, "shape");
  expect_error([&] { (void)t.reshape({-2, -12}); }, "shape");
}

TEST(Views, ReshapeOfTransposedCopies) {
  Tensor t = iota({3, 4});
  const Tensor transposed = t.transpose(0, 1);
  Tensor r = transposed.reshape({12});
  EXPECT_NE(r.data(), t.data());
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.to_vector(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  r.set({0}, -1.0);
  EXPECT_EQ(t.at({0, 0}), 0.0);
  const std::string message = expect_error([&] { (void)transposed.view({12}); }, "shape");
  EXPECT_NE(message.find("got [12]"), std::string::npos) << message;
}

TEST(Views, ReshapeOfStridedButSplittableIsAView) {
  // Every other row of a [4, 6]: strides [12, 1]; the rows can be split, not merged.
  Tensor t = iota({4, 6});
  const Tensor rows = t.slice(0, 0, 4, 2);
  Tensor r = rows.reshape({2, 2, 3});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.strides(), (Shape{12, 3, 1}));
  r.set({1, 1, 2}, -5.0);
  EXPECT_EQ(t.at({2, 5}), -5.0);
  expect_error([&] { (void)rows.view({12}); }, "shape");
  const Tensor merged = rows.reshape({12});
  EXPECT_NE(merged.data(), t.data());
  EXPECT_EQ(merged.to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, -5}));
}

TEST(Views, ViewOfPermutedKeepsContiguousRuns) {
  // [B, T, H, D] -> [B, H, T, D] view: T and H swap; D stays contiguous and can be split.
  Tensor t = iota({2, 3, 4, 6});
  const Tensor bhtd = t.permute({0, 2, 1, 3});
  const Tensor split = bhtd.view({2, 4, 3, 2, 3});
  EXPECT_EQ(split.data(), t.data());
  EXPECT_EQ(split.strides(), (Shape{72, 6, 24, 3, 1}));
  EXPECT_EQ(split.at({1, 2, 1, 1, 2}), 72 + 24 + 2 * 6 + 3 + 2.0);
  expect_error([&] { (void)bhtd.view({2, 12, 6}); }, "shape");
}

TEST(Views, ExpandBroadcastsWithStrideZero) {
  Tensor t = Tensor::from_values({3, 1}, {1, 2, 3});
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(e.data(), t.data());
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.numel(), 24);
  EXPECT_FALSE(e.is_contiguous());
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(e.at({b, i, j}), i + 1.0);
    }
  }
  e.set({1, 2, 3}, 9.0);
  EXPECT_EQ(t.at({2, 0}), 9.0);
  EXPECT_EQ(e.at({0, 2, 0}), 9.0);
  const Tensor copy = e.contiguous();
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_EQ(copy.numel(), 24);
  expect_error([&] { (void)e.view({24}); }, "shape");
  EXPECT_EQ(e.reshape({24}).to_vector(), copy.to_vector());
  expect_error([&] { (void)t.expand({3}); }, "shape");
  expect_error([&] { (void)t.expand({4, 1}); }, "shape");
  expect_error([&] { (void)t.expand({-1, 3, 1}); }, "shape");
  EXPECT_EQ(t.expand({3, 1}).strides(), t.strides());
}

TEST(Views, UnsqueezeInsertsASizeOneDimension) {
  Tensor t = iota({2, 3});
  struct Expected {
    std::int64_t d;
    Shape shape;
  };
  for (const Expected& x : {Expected{0, {1, 2, 3}}, Expected{1, {2, 1, 3}}, Expected{2, {2, 3, 1}},
                            Expected{-1, {2, 3, 1}}, Expected{-3, {1, 2, 3}}}) {
    SCOPED_TRACE("unsqueeze(" + std::to_string(x.d) + ")");
    const Tensor u = t.unsqueeze(x.d);
    EXPECT_EQ(u.shape(), x.shape);
    EXPECT_EQ(u.data(), t.data());
    EXPECT_TRUE(u.is_contiguous());
    EXPECT_EQ(u.to_vector(), range(0, 6));
    EXPECT_EQ(u.view({6}).data(), t.data());
  }
  EXPECT_EQ(t.unsqueeze(1).expand({2, 5, 3}).at({1, 4, 2}), 5.0);
  expect_error([&] { (void)t.unsqueeze(3); }, "dim");
  expect_error([&] { (void)t.unsqueeze(-4); }, "dim");
}

// ---------------------------------------------------------------------------------------------
// Borrowed memory

TEST(FromBlob, WrapsCallerMemoryWithNegativeStrides) {
  float buffer[6] = {0, 1, 2, 3, 4, 5};
  Tensor t = Tensor::from_blob(buffer + 5, {2, 3}, {-3, -1}, DType::f32);
  EXPECT_EQ(t.data(), buffer + 5);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_vector(), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(t.at({1, 2}), 0.0);
  t.set({0, 0}, 50.0);
  EXPECT_EQ(buffer[5], 50.0f);
  t.set({1, 1}, 10.0);
  EXPECT_EQ(buffer[1], 10.0f);
  const Tensor c = t.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), (std::vector<double>{50, 4, 3, 2, 10, 0}));
  EXPECT_EQ(t.transpose(0, 1).contiguous().to_vector(), (std::vector<double>{50, 2, 4, 10, 3, 0}));
  EXPECT_EQ(t.describe(), "f32[2, 3] (strided [-3, -1])");
}

TEST(FromBlob, CopyFromWritesOnlyTheViewedElements) {
  double buffer[12];
  for (double& b : buffer) b = -1.0;  // sentinels
  Tensor t = Tensor::from_blob(buffer, {3, 2}, {4, 2}, DType::f64);
  t.copy_from(Tensor::from_values({3, 2}, {1, 2, 3, 4, 5, 6}, DType::f32));
  const double expected[12] = {1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6, -1};
  for (int k = 0; k < 12; ++k) EXPECT_EQ(buffer[k], expected[k]) << k;
}

TEST(FromBlob, ReversedCopyOfItself) {
  float buffer[5] = {0, 1, 2, 3, 4};
  Tensor forward = Tensor::from_blob(buffer, {5}, {1}, DType::f32);
  const Tensor backward = Tensor::from_blob(buffer + 4, {5}, {-1}, DType::f32);
  EXPECT_TRUE(forward.overlaps(backward));
  forward.copy_from(backward);
  const float expected[5] = {4, 3, 2, 1, 0};
  for (int k = 0; k < 5; ++k) EXPECT_EQ(buffer[k], expected[k]) << k;
}

TEST(FromBlob, RejectsBadArguments) {
  float buffer[4] = {};
  expect_error([&] { (void)Tensor::from_blob(buffer, {2, 2}, {2}, DType::f32); }, "strides");
  expect_error([&] { (void)Tensor::from_blob(nullptr, {2}, {1}, DType::f32); }, "data");
  expect_error([&] { (void)Tensor::from_blob(buffer, {-2}, {1}, DType::f32); }, "shape");
  EXPECT_EQ(Tensor::from_blob(nullptr, {0, 3}, {3, 1}, DType::f32).numel(), 0);
}

// ---------------------------------------------------------------------------------------------
// Aliasing

TEST(Overlaps, DisjointAndOverlappingRanges) {
  const Tensor t = iota({10});
  const Tensor low = t.slice(0, 0, 5);
  const Tensor high = t.slice(0, 5, 10);
  const Tensor middle = t.slice(0, 4, 6);
  EXPECT_FALSE(low.overlaps(high));
  EXPECT_FALSE(high.overlaps(low));
  EXPECT_TRUE(low.overlaps(low));
  EXPECT_TRUE(t.overlaps(low));
  EXPECT_TRUE(high.overlaps(t));
  EXPECT_TRUE(middle.overlaps(low));
  EXPECT_TRUE(middle.overlaps(high));
  EXPECT_FALSE(t.overlaps(Tensor::zeros({10})));
  EXPECT_FALSE(t.slice(0, 3, 3).overlaps(t));
  EXPECT_FALSE(t.overlaps(t.slice(0, 3, 3)));
  EXPECT_TRUE(t.overlaps(t.transpose(0, 0)));
  // Interleaved views share a span, so the conservative test says they may alias.
  EXPECT_TRUE(t.slice(0, 0, 10, 2).overlaps(t.slice(0, 1, 10, 2)));
}

TEST(Overlaps, ByteRangesOfBorrowedMemory) {
  alignas(8) float buffer[8] = {};
  const Tensor a = Tensor::from_blob(buffer, {4}, {1}, DType::f32);
  const Tensor b = Tensor::from_blob(buffer + 4, {4}, {1}, DType::f32);
  const Tensor reversed = Tensor::from_blob(buffer + 7, {4}, {-1}, DType::f32);
  // A double at buffer[2] covers the bytes of buffer[2] and buffer[3]; one at buffer[4] none
  // of a's.
  const Tensor wide = Tensor::from_blob(buffer + 2, {1}, {1}, DType::f64);
  const Tensor wide_after = Tensor::from_blob(buffer + 4, {1}, {1}, DType::f64);
  EXPECT_FALSE(a.overlaps(b));
  EXPECT_TRUE(b.overlaps(reversed));
  EXPECT_FALSE(a.overlaps(reversed));
  EXPECT_TRUE(a.overlaps(wide));
  EXPECT_FALSE(a.overlaps(wide_after));
  EXPECT_TRUE(b.overlaps(wide_after));
}

// ---------------------------------------------------------------------------------------------
// Edge cases

TEST(EdgeCases, UndefinedTensor) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_EQ(t.describe(), "undefined");
  EXPECT_TRUE(Tensor::zeros({1}).defined());
  expect_error([&] { t.copy_from(Tensor::zeros({})); }, "src");
  expect_error([&] { (void)t.at({}); }, "tensor");
  expect_error([&] { t.set({}, 1.0); }, "tensor");
}

// A shape whose element count overflows 64 bits was accepted with numel() wrapped to 0 and 64
// bytes behind it, so a later set() wrote out of bounds.
TEST(EdgeCases, ShapesPastTwoToTheSixtyElementsAreRefused) {
  const std::int64_t big = std::int64_t{1} << 32;
  expect_error([&] { (void)Tensor::empty({big, big}); }, "shape");
  expect_error([&] { (void)Tensor::zeros({big, big, 2}, DType::f64); }, "shape");
  float x = 0;
  expect_error([&] { (void)Tensor::from_blob(&x, {big, big}, {0, 0}, DType::f32); }, "shape");
  EXPECT_EQ(Tensor::empty({big, big, 0}).numel(), 0);  // an empty product stays valid
}

TEST(EdgeCases, ZeroSizeTensors) {
  Tensor t = Tensor::zeros({0, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(aligned_64(t.data()));
  EXPECT_TRUE(t.to_vector().empty());
  EXPECT_EQ(t.clone().shape(), (Shape{0, 3}));
  EXPECT_EQ(t.to(DType::f16).shape(), (Shape{0, 3}));
  EXPECT_EQ(t.reshape({3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{0}));
  EXPECT_EQ(t.transpose(0, 1).contiguous().shape(), (Shape{3, 0}));
  EXPECT_EQ(t.expand({2, 0, 3}).numel(), 0);
  expect_error([&] { (void)t.reshape({0, -1}); }, "shape");
  expect_error([&] { (void)t.at({0, 0}); }, "index");
  t.fill(1.0);
  t.copy_from(Tensor::zeros({0, 3}, DType::f64));
  const Tensor empty_slice = iota({4, 5}).slice(1, 2, 2);
  EXPECT_EQ(empty_slice.shape(), (Shape{4, 0}));
  EXPECT_TRUE(empty_slice.to_vector().empty());
  EXPECT_EQ(Tensor::from_values({0}, {}).numel(), 0);
}

TEST(Describe, NamesDTypeShapeAndStrides) {
  EXPECT_EQ(Tensor::empty({2, 3, 4}).describe(), "f32[2, 3, 4]");
  EXPECT_EQ(Tensor::zeros({}, DType::f64).describe(), "f64[]");
  EXPECT_EQ(Tensor::zeros({0}, DType::bf16).describe(), "bf16[0]");
  EXPECT_EQ(Tensor::zeros({2}, DType::boolean).describe(), "bool[2]");
  EXPECT_EQ(Tensor::zeros({7, 1}, DType::f16).describe(), "f16[7, 1]");
  EXPECT_EQ(Tensor::zeros({3, 4}).transpose(0, 1).describe(), "f32[4, 3] (strided [1, 4])");
  EXPECT_EQ(qkv::shape_string({2, 3}), "[2, 3]");
  EXPECT_EQ(qkv::shape_string({}), "[]");
}

// ---------------------------------------------------------------------------------------------
// Error messages: argument() and "argument: expected X, got Y"

struct ErrorCase {
  const char* name;
  std::function<void()> action;
  const char* argument;
  const char* actual;
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.name << " (argument " << c.argument << ", got " << c.actual << ")";
}

class ErrorMessages : public testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorMessages, NameArgumentExpectedAndActual) {
  const ErrorCase& c = GetParam();
  const std::string message = expect_error(c.action, c.argument);
  const std::string prefix = std::string(c.argument) + ": expected ";
  const std::string suffix = std::string(", got ") + c.actual;
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
  ASSERT_GE(message.size(), suffix.size()) << message;
  EXPECT_EQ(message.substr(message.size() - suffix.size()), suffix) << message;
}

INSTANTIATE_TEST_SUITE_P(
    TensorOps, ErrorMessages,
    testing::Values(
        ErrorCase{"full_negative_size",
                  [] {
                    (void)Tensor::full({2, -1}, 0);
                  },
                  "shape", "[2, -1]"},
        ErrorCase{"empty_negative_size", [] { (void)Tensor::empty({-3}); }, "shape", "[-3]"},
        ErrorCase{"from_values_count",
                  [] {
                    (void)Tensor::from_values({2, 2}, {1, 2, 3});
                  },
                  "values", "3"},
        ErrorCase{"at_out_of_range",
                  [] {
                    (void)Tensor::zeros({2, 3}).at({2, 0});
                  },
                  "index", "2"},
        ErrorCase{"at_wrong_rank",
                  [] {
                    (void)Tensor::zeros({2, 3}).at({1});
                  },
                  "index", "1"},
        ErrorCase{"view_impossible",
                  [] {
                    (void)Tensor::zeros({2, 3}).transpose(0, 1).view({6});
                  },
                  "shape", "[6]"},
        ErrorCase{"reshape_count",
                  [] {
                    (void)Tensor::zeros({2, 3}).reshape({4});
                  },
                  "shape", "[4]"},
        ErrorCase{"permute_repeat",
                  [] {
                    (void)Tensor::zeros({2, 3}).permute({1, 1});
                  },
                  "dims", "[1, 1]"},
        ErrorCase{"slice_step", [] { (void)Tensor::zeros({4}).slice(0, 0, 4, 0); }, "step", "0"},
        ErrorCase{"size_dim",
                  [] {
                    (void)Tensor::zeros({2, 3, 4}).size(3);
                  },
                  "dim", "3"},
        ErrorCase{"expand_incompatible",
                  [] {
                    (void)Tensor::zeros({3, 2}).expand({3, 4});
                  },
                  "shape", "[3, 4]"},
        ErrorCase{"data_as_wrong_type",
                  [] { (void)Tensor::zeros({1}, DType::f16).data_as<float>(); }, "tensor", "f16"},
        ErrorCase{"uniform_bounds",
                  [] {
                    qkv::Generator g;
                    (void)Tensor::uniform({2}, 1.0, 1.0, g);
                  },
                  "high", "1.000000"},
        ErrorCase{"copy_from_shape", [] { Tensor::zeros({2}).copy_from(Tensor::zeros({3})); },
                  "src", "[3]"},
        ErrorCase{"from_blob_strides",
                  [] {
                    float x = 0;
                    (void)Tensor::from_blob(&x, {1}, {}, DType::f32);
                  },
                  "strides", "0"}),
    [](const testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

}  // namespace

namespace {
// Every operation that reads or writes elements refuses an undefined tensor with qkv::Error
// instead of touching its null storage (the recurrent translator's test once called to_vector()
// on the empty cross-attention of a model without attention, and crashed).
TEST(Tensor, UndefinedTensorRefusesElementAccess) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW(t.to_vector(), qkv::Error);
  EXPECT_THROW(t.clone(), qkv::Error);
  EXPECT_THROW(t.contiguous(), qkv::Error);
  EXPECT_THROW(t.to(DType::f64), qkv::Error);
  EXPECT_THROW(t.fill(1.0), qkv::Error);
  EXPECT_THROW(t.at({}), qkv::Error);
  EXPECT_THROW(t.reshape({1}), qkv::Error);
  EXPECT_THROW(t.view({1}), qkv::Error);
  EXPECT_THROW(t.permute({}), qkv::Error);
  EXPECT_THROW(t.expand({2}), qkv::Error);
  EXPECT_THROW(t.unsqueeze(0), qkv::Error);
  EXPECT_THROW(t.slice(0, 0, 1), qkv::Error);
  EXPECT_THROW(t.transpose(0, 0), qkv::Error);
  EXPECT_THROW(t.size(0), qkv::Error);
}
}  // namespace
