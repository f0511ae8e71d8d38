#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "qkv/error.hpp"

namespace qkv::testing {

// call() must throw qkv::Error with `part` in its message (the argument it names, say).
inline void expect_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no qkv::Error for " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace qkv::testing
