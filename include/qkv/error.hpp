#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace qkv {

// The one exception type of qkv. Its message names the argument, what was expected and what
// came: "k: expected head dim 64 (from q), got 80".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
  Error(std::string_view argument, std::string_view expected, std::string_view actual);

  // The argument the message is about ("" when the error is not about one argument).
  const std::string& argument() const noexcept { return argument_; }

 private:
  std::string argument_;
};

}  // namespace qkv
