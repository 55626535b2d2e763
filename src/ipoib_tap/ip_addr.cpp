#include "ipoib_tap/ip_addr.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <charconv>

namespace openib::ipoib {

std::string IpAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if ((family != AF_INET && family != AF_INET6) || !::inet_ntop(family, bytes.data(), buf, sizeof buf))
    return fmt::format("family{}?/{}", family, prefix_len);
  return fmt::format("{}/{}", buf, prefix_len);
}

Result<IpAddr> IpAddr::parse(const std::string& text) {
  auto slash = text.find('/');
  std::string host = text.substr(0, slash);
  IpAddr a;
  a.family = host.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (::inet_pton(a.family, host.c_str(), a.bytes.data()) != 1) return err(EINVAL, "'{}' is no IP address", text);
  unsigned max = a.family == AF_INET ? 32 : 128, len = max;
  if (slash != std::string::npos) {
    const char* b = text.data() + slash + 1;
    const char* e = text.data() + text.size();
    auto [p, ec] = std::from_chars(b, e, len);
    if (ec != std::errc{} || p != e || b == e || len > max) return err(EINVAL, "'{}': bad prefix length", text);
  }
  a.prefix_len = static_cast<std::uint8_t>(len);
  return a;
}

}  // namespace openib::ipoib
