// Built against the installed package with qkv::viz alone in target_link_libraries: it must bring
// qkv::qkv, C++20 and libpng with it, and draw one row of uniform attention weights as a PNG.
#include <cstdio>
#include <filesystem>
#include <qkv/qkv.hpp>
#include <qkv/viz/heatmap.hpp>

int main() {
  const std::filesystem::path png = std::filesystem::temp_directory_path() / "qkv_consumer.png";
  qkv::viz::write_heatmap(qkv::Tensor::full({1, 4}, 0.25), {}, png);  // [R, C] weights
  const bool drawn = std::filesystem::file_size(png) > 0;
  std::filesystem::remove(png);
  if (!drawn) {
    std::printf("consumer: %s is empty\n", png.c_str());
    return 1;
  }
  std::printf("consumer: qkv::viz found, linked, drew a heatmap\n");
  return 0;
}
