// bad_files DIR MODEL: writes into DIR the broken files test_cli_files.cmake gives to qkv, made
// from MODEL, a model.safetensors written by qkv demo:
//   truncated.safetensors  MODEL cut in half
//   random.safetensors     4096 bytes from Philox
//   past_end.safetensors   a header length of 1000 with 2 bytes after it
//   array.safetensors      a header that is JSON but not an object: [1, 2, 3]
//   newline.safetensors    a tensor named "a\nb" of dtype I64 (the error quotes the name)
//   no_tensor.safetensors  MODEL without decoder.norm.weight, a tensor the translator needs
//   layers.safetensors     MODEL whose config claims 10^9 encoder layers
//   empty.safetensors      no bytes at all
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "qkv/philox.hpp"
#include "qkv/safetensors.hpp"

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file: the 8-byte little-endian header length, the header, then `data`.
std::string safetensors(const std::string& header, const std::string& data) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return bytes + header + data;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bad_files DIR MODEL\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  std::ifstream model_file(argv[2], std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(model_file)),
                          std::istreambuf_iterator<char>());

  write(dir / "truncated.safetensors", model.substr(0, model.size() / 2));
  qkv::Generator generator(13);
  std::string random;
  while (random.size() < 4096) random.push_back(static_cast<char>(generator.next_u32() & 0xff));
  write(dir / "random.safetensors", random);
  std::string past_end = safetensors("{}", "");
  past_end[0] = static_cast<char>(1000 & 0xff);
  past_end[1] = static_cast<char>(1000 >> 8);
  write(dir / "past_end.safetensors", past_end);
  write(dir / "array.safetensors", safetensors("[1, 2, 3]", ""));
  write(dir / "newline.safetensors",
        safetensors(R"({"a\nb": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})",
                    std::string(8, '\0')));
  write(dir / "empty.safetensors", "");

  qkv::SafetensorsContents contents = qkv::load_safetensors(argv[2]);
  qkv::NamedTensors without = contents.tensors;
  without.erase("decoder.norm.weight");
  qkv::save_safetensors(dir / "no_tensor.safetensors", without, contents.metadata);
  std::string& config = contents.metadata.at("qkv.translator.config");
  const std::string key = "\"encoder_layers\":";
  const std::size_t value = config.find(key) + key.size();
  config.replace(value, config.find_first_of(",}", value) - value, "1000000000");
  qkv::save_safetensors(dir / "layers.safetensors", contents.tensors, contents.metadata);
  return 0;
}
