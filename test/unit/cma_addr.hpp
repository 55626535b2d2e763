// IP endpoints for src/cma's tests: ip("198.18.0.1", 7174), ip("fd00::1", 7174).
#pragma once

#include <cstdint>

#include <stdexcept>
#include <string>

#include <arpa/inet.h>
#include <sys/socket.h>

#include "cma/header.hpp"

namespace openib::test {

inline cma::Addr ip(const char* text, std::uint16_t port) {
  cma::Addr a;
  a.port = port;
  if (::inet_pton(AF_INET, text, a.addr.data()) == 1) {
    a.family = AF_INET;
  } else if (::inet_pton(AF_INET6, text, a.addr.data()) == 1) {
    a.family = AF_INET6;
  } else {
    throw std::invalid_argument(std::string("not an IP address: ") + text);  // (also before main)
  }
  return a;
}

}  // namespace openib::test
