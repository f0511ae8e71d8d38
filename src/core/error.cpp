#include "qkv/error.hpp"

#include <string>

namespace qkv {

Error::Error(const std::string& message) : std::runtime_error(message) {}

Error::Error(std::string_view argument, std::string_view expected, std::string_view actual)
    : std::runtime_error(std::string(argument) + ": expected " + std::string(expected) + ", got " +
                         std::string(actual)),
      argument_(argument) {}

}  // namespace qkv
