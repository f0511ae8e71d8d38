// Batches of token ids for every sequence-to-sequence model (qkv/models/seq2seq.hpp).
#include "qkv/models/seq2seq.hpp"

#include <algorithm>
#include <string>

#include "qkv/error.hpp"

namespace qkv::models {

Batch make_batch(const std::vector<std::vector<std::int64_t>>& sequences) {
  Batch b;
  b.batch = static_cast<std::int64_t>(sequences.size());
  for (const auto& s : sequences) {
    b.length = std::max<std::int64_t>(b.length, static_cast<std::int64_t>(s.size()));
  }
  b.ids.assign(static_cast<std::size_t>(b.batch * b.length), 0);
  for (std::int64_t i = 0; i < b.batch; ++i) {
    const auto& s = sequences[static_cast<std::size_t>(i)];
    if (s.empty())
      throw Error("sequences[" + std::to_string(i) + "]", "at least one token", "none");
    std::copy(s.begin(), s.end(), b.ids.begin() + i * b.length);
    b.lengths.push_back(static_cast<std::int64_t>(s.size()));
  }
  return b;
}

}  // namespace qkv::models
