// qkv::Error (include/qkv/error.hpp): the "argument: expected X, got Y" message and argument().

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "qkv/error.hpp"

namespace {

TEST(Error, ThreePartMessageNamesArgumentExpectedAndActual) {
  const qkv::Error e("k", "head dim 64 (from q)", "80");
  EXPECT_STREQ(e.what(), "k: expected head dim 64 (from q), got 80");
  EXPECT_EQ(e.argument(), "k");
}

TEST(Error, EmptyPartsKeepTheFormat) {
  const qkv::Error e("", "", "");
  EXPECT_STREQ(e.what(), ": expected , got ");
  EXPECT_EQ(e.argument(), "");
}

TEST(Error, PlainMessageHasNoArgument) {
  const qkv::Error e("something went wrong");
  EXPECT_STREQ(e.what(), "something went wrong");
  EXPECT_EQ(e.argument(), "");
}

TEST(Error, IsARuntimeErrorAndCopiesItsArgument) {
  try {
    throw qkv::Error("dropout_p", "a probability in [0, 1)", "1.5");
  } catch (const std::runtime_error& base) {
    EXPECT_STREQ(base.what(), "dropout_p: expected a probability in [0, 1), got 1.5");
    const auto* error = dynamic_cast<const qkv::Error*>(&base);
    ASSERT_NE(error, nullptr);
    const qkv::Error copy = *error;
    EXPECT_EQ(copy.argument(), "dropout_p");
    EXPECT_STREQ(copy.what(), base.what());
  }
}

TEST(Error, CatchableAsStdException) {
  bool caught = false;
  try {
    throw qkv::Error("q", "4 dimensions", "3");
  } catch (const std::exception& e) {
    caught = std::string(e.what()) == "q: expected 4 dimensions, got 3";
  }
  EXPECT_TRUE(caught);
}

}  // namespace
