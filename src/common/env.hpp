// Switches read from the environment, for A/B runs of one build.
#pragma once

#include <cstdlib>
#include <cstring>

namespace openib {

// Whether the variable `name` is set to exactly "0" (a feature turned off,
// e.g. OPENIB_UDP_POLLED=0); unset or any other value: false.
inline bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::strcmp(e, "0") == 0;
}

}  // namespace openib
