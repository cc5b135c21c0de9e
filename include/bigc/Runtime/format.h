// The runtime works on the program format's data model (include/bigc/Format/, namespace
// bigc::format): its names are the runtime's too.
#pragma once

namespace bigc::format {}
namespace bigc::format::safetensors {}

namespace bigc::rt {
using namespace bigc::format;
namespace safetensors {
using namespace bigc::format::safetensors;
}
} // namespace bigc::rt
