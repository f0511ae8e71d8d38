// DType (include/qkv/dtype.hpp): sizes agree with the C++ storage types, names and classes.

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "qkv/dtype.hpp"
#include "qkv/half.hpp"

namespace {

struct DTypeCase {
  qkv::DType dtype;
  std::size_t size;
  const char* name;
  bool floating;
};

void PrintTo(const DTypeCase& c, std::ostream* os) {
  *os << c.name << " (" << c.size << " bytes" << (c.floating ? ", floating" : "") << ")";
}

const DTypeCase kCases[] = {
    {qkv::DType::f64, sizeof(double), "f64", true},
    {qkv::DType::f32, sizeof(float), "f32", true},
    {qkv::DType::bf16, sizeof(qkv::bf16), "bf16", true},
    {qkv::DType::f16, sizeof(qkv::f16), "f16", true},
    {qkv::DType::boolean, sizeof(std::uint8_t), "bool", false},
};

class DTypeProperties : public testing::TestWithParam<DTypeCase> {};

TEST_P(DTypeProperties, SizeNameAndClass) {
  const DTypeCase& c = GetParam();
  EXPECT_EQ(qkv::dtype_size(c.dtype), c.size);
  EXPECT_EQ(qkv::dtype_name(c.dtype), c.name);
  EXPECT_EQ(qkv::is_floating(c.dtype), c.floating);
}

INSTANTIATE_TEST_SUITE_P(All, DTypeProperties, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<DTypeCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(DType, HalfStorageIsTwoBytes) {
  EXPECT_EQ(sizeof(qkv::bf16), 2u);
  EXPECT_EQ(sizeof(qkv::f16), 2u);
}

}  // namespace
