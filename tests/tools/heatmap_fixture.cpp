// heatmap_fixture DIR: writes the safetensors files test_heatmap_cli.cmake draws and
// test_inspect_cli.cmake diagnoses:
//   DIR/attention.safetensors  one tensor "weights" [B=2, H=2, R=3, C=4], rows summing to 1
//   DIR/two.safetensors        two tensors, "a" and "b", so `qkv heatmap` needs --tensor
//   DIR/heads.safetensors      "weights" [H=3, 6, 6]: head 0 on the diagonal, head 1 uniform,
//                              head 2 on the next key; "alignment" [6] (f32 holding key positions),
//                              the diagonal with row 5 unknown (-1)
#include <cstdio>
#include <filesystem>

#include "qkv/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: heatmap_fixture DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  // [B, H, R, C]: row i of head h puts weight on key (i + h) % C and spreads the rest evenly.
  qkv::Tensor weights = qkv::Tensor::empty({2, 2, 3, 4});
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 2; ++h) {
      for (std::int64_t i = 0; i < 3; ++i) {
        for (std::int64_t j = 0; j < 4; ++j)
          weights.set({b, h, i, j}, j == (i + h) % 4 ? 0.7 : 0.1);
      }
    }
  }
  qkv::save_safetensors(dir / "attention.safetensors", {{"weights", weights}});
  constexpr std::int64_t kT = 6;
  qkv::Tensor heads = qkv::Tensor::empty({3, kT, kT});
  qkv::Tensor alignment = qkv::Tensor::empty({kT});
  for (std::int64_t i = 0; i < kT; ++i) {
    alignment.set({i}, i == kT - 1 ? -1.0 : static_cast<double>(i));
    for (std::int64_t j = 0; j < kT; ++j) {
      heads.set({0, i, j}, j == i ? 0.95 : 0.01);
      heads.set({1, i, j}, 1.0 / kT);
      heads.set({2, i, j}, j == (i + 1) % kT ? 0.95 : 0.01);
    }
  }
  qkv::save_safetensors(dir / "heads.safetensors", {{"weights", heads}, {"alignment", alignment}});
  qkv::save_safetensors(dir / "two.safetensors",
                        {{"a", qkv::Tensor::zeros({2, 2})}, {"b", qkv::Tensor::zeros({2, 2})}});
  return 0;
}
