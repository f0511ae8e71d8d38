#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/models/corpus.hpp"
#include "qkv/models/decode.hpp"

namespace qkv::cli {

// The row labels of a translation's cross-attention [H, T, S]: the token each row emitted, by
// name even where Vocabulary::decode skips it (<pad> and <bos>, which an untrained model emits),
// then <eos> when it was reached: one label per row.
inline std::vector<std::string> row_labels(const models::Translation& t,
                                           const models::Vocabulary& target) {
  std::vector<std::string> rows;
  for (const std::int64_t token : t.tokens) rows.push_back(target.word(token));
  rows.emplace_back("<eos>");
  rows.resize(static_cast<std::size_t>(t.cross_weights.size(1)));
  return rows;
}

}  // namespace qkv::cli
