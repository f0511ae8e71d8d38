#pragma once

// The lists of a fuzz case's description (attention_case.cpp, mods_case.cpp): "[1, 2, 3]".

#include <sstream>
#include <string>
#include <vector>

namespace qkv::fuzz {

template <class T>
std::string list(const std::vector<T>& values) {
  std::ostringstream text;
  text << '[';
  for (std::size_t i = 0; i < values.size(); ++i) text << (i ? ", " : "") << values[i];
  text << ']';
  return text.str();
}

}  // namespace qkv::fuzz
