// Shell commands for tests that set up interfaces with iproute2 (stderr
// joined to the output): sh() answers the status and output, must()
// requires success and shows the output when it fails.
#pragma once

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace openib::test {

struct Shell {
  int status;
  std::string out;
};

inline Shell sh(const std::string& cmd) {
  Shell r{-1, {}};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p);
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  r.status = ::pclose(p);
  return r;
}

inline void must(const std::string& cmd) {
  auto r = sh(cmd);
  INFO(cmd << ": " << r.out);
  REQUIRE(r.status == 0);
}

}  // namespace openib::test
