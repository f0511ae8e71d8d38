#include "qkv/version.hpp"

namespace qkv {

std::string_view version() noexcept { return QKV_VERSION; }

}  // namespace qkv
