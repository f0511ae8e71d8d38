#pragma once
// The seq2seq translator of `qkv demo`, on the nn modules: a synthetic parallel corpus with its
// true word alignments, a pre-norm Transformer encoder-decoder, its training loop, greedy and
// beam search on a KV cache, BLEU and alignment accuracy, and its safetensors file.
#include "qkv/models/checkpoint.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/decode.hpp"
#include "qkv/models/evaluate.hpp"
#include "qkv/models/metrics.hpp"
#include "qkv/models/rnn_translator.hpp"
#include "qkv/models/seq2seq.hpp"
#include "qkv/models/train.hpp"
#include "qkv/models/translator.hpp"
