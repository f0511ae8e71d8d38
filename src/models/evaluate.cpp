// Held-out evaluation of the translator: exact match, BLEU by length, alignment accuracy.
#include "qkv/models/evaluate.hpp"

#include <algorithm>
#include <chrono>

#include "qkv/error.hpp"
#include "qkv/models/decode.hpp"

namespace qkv::models {

namespace {

// Pairs [begin, end) -> source batch [n, S] and teacher-forcing inputs [n, T + 1]
std::pair<Batch, Batch> batches(const std::vector<SentencePair>& pairs, std::size_t begin,
                                std::size_t end, const Vocabulary& source,
                                const Vocabulary& target) {
  std::vector<std::vector<std::int64_t>> sources, inputs;
  for (std::size_t i = begin; i < end; ++i) {
    sources.push_back(source.encode(pairs[i].source));
    std::vector<std::int64_t> in = {Vocabulary::kBos};
    const std::vector<std::int64_t> ids = target.encode(pairs[i].target);
    in.insert(in.end(), ids.begin(), ids.end());
    inputs.push_back(std::move(in));
  }
  return {make_batch(sources), make_batch(inputs)};
}

}  // namespace

Evaluation evaluate(Seq2Seq& model, const Vocabulary& source, const Vocabulary& target,
                    const std::vector<SentencePair>& pairs, const EvaluationOptions& options) {
  if (options.batch_size < 1) {
    throw Error("options.batch_size", ">= 1", std::to_string(options.batch_size));
  }
  if (options.beam < 1) throw Error("options.beam", ">= 1", std::to_string(options.beam));
  if (options.keep_attention < 0) {
    throw Error("options.keep_attention", ">= 0", std::to_string(options.keep_attention));
  }
  const auto& bounds = options.bucket_bounds;
  if (bounds.size() < 2 || !std::is_sorted(bounds.begin(), bounds.end())) {
    throw Error("options.bucket_bounds", "at least two increasing bounds",
                std::to_string(bounds.size()) + " bounds");
  }
  model.eval();
  Evaluation e;
  e.sentences = static_cast<std::int64_t>(pairs.size());
  const std::int64_t max_length = model.max_length();
  AlignmentCount alignment;
  double decode_seconds = 0;
  const auto batch = static_cast<std::size_t>(options.batch_size);
  std::vector<Tensor> kept;  // [H, T_i, S_i] per kept pair
  for (std::size_t begin = 0; begin < pairs.size(); begin += batch) {
    const std::size_t end = std::min(pairs.size(), begin + batch);
    const auto [source_batch, target_in] = batches(pairs, begin, end, source, target);
    const auto decode_start = std::chrono::steady_clock::now();
    if (options.beam == 1) {
      DecodeOptions d;
      d.max_length = max_length;
      for (const Translation& t : greedy_decode(model, source_batch, d)) {
        e.hypotheses.push_back(target.decode(t.tokens));
      }
    } else {
      BeamOptions b;
      b.beam = options.beam;
      b.length_alpha = options.length_alpha;
      b.decode.max_length = max_length;
      for (std::size_t i = begin; i < end; ++i) {
        e.hypotheses.push_back(
            target.decode(beam_search(model, source.encode(pairs[i].source), b).tokens));
      }
    }
    decode_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
    // Alignment, teacher-forced: cross [n, H, T + 1, S] (a model without attention has none)
    if (!model.attends()) continue;
    autograd::NoGrad no_grad;
    Tensor cross;
    model.decode(model.encode(source_batch), source_batch, target_in, &cross);
    for (std::size_t i = begin; i < end; ++i) {
      const auto row = static_cast<std::int64_t>(i - begin);
      const Tensor w = cross.slice(0, row, row + 1).reshape({cross.size(1), cross.size(2), -1});
      const AlignmentCount c = alignment_hits(w, pairs[i].alignment);
      alignment.hits += c.hits;
      alignment.total += c.total;
      if (static_cast<std::int64_t>(i) < options.keep_attention) {
        const auto rows = static_cast<std::int64_t>(pairs[i].target.size()) + 1;
        const auto keys = static_cast<std::int64_t>(source.encode(pairs[i].source).size());
        kept.push_back(w.slice(1, 0, rows).slice(2, 0, keys).to(DType::f32));
        e.attention.query_lengths.push_back(rows);
        e.attention.key_lengths.push_back(keys);
      }
    }
  }
  if (!kept.empty()) {
    std::int64_t rows = 0, keys = 0;
    for (const Tensor& w : kept) {
      rows = std::max(rows, w.size(1));
      keys = std::max(keys, w.size(2));
    }
    const auto n = static_cast<std::int64_t>(kept.size());
    e.attention.weights = Tensor::zeros({n, kept[0].size(0), rows, keys}, DType::f32);
    for (std::int64_t i = 0; i < n; ++i) {
      const Tensor& w = kept[static_cast<std::size_t>(i)];
      Tensor into =
          e.attention.weights.slice(0, i, i + 1).slice(2, 0, w.size(1)).slice(3, 0, w.size(2));
      into.copy_from(w.reshape({1, w.size(0), w.size(1), w.size(2)}));
    }
  }
  e.seconds = decode_seconds;
  e.alignment_accuracy = alignment.accuracy();
  std::vector<Words> references;
  std::int64_t exact = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    references.push_back(pairs[i].target);
    exact += e.hypotheses[i] == pairs[i].target ? 1 : 0;
  }
  e.exact_match = pairs.empty() ? 0.0 : static_cast<double>(exact) / e.sentences;
  e.bleu = corpus_bleu(e.hypotheses, references);
  for (std::size_t b = 0; b + 1 < bounds.size(); ++b) {
    BucketScore bucket;
    bucket.min_length = bounds[b];
    bucket.max_length = bounds[b + 1] - 1;
    std::vector<Words> hyps, refs;
    std::int64_t bucket_exact = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto n = static_cast<std::int64_t>(pairs[i].source.size());
      if (n < bounds[b] || n >= bounds[b + 1]) continue;
      hyps.push_back(e.hypotheses[i]);
      refs.push_back(pairs[i].target);
      bucket_exact += e.hypotheses[i] == pairs[i].target ? 1 : 0;
    }
    bucket.sentences = static_cast<std::int64_t>(hyps.size());
    if (!hyps.empty()) {
      bucket.exact_match = static_cast<double>(bucket_exact) / bucket.sentences;
      bucket.bleu = corpus_bleu(hyps, refs);
    }
    e.buckets.push_back(bucket);
  }
  return e;
}

}  // namespace qkv::models
