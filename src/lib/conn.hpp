// The control connection to ibd: one request, one reply (docs/library.md
// "Errors"). Requests are serialized by a mutex so that objects of one
// Context may be created and destroyed from several threads.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"
#include "common/fd.hpp"

namespace openib::lib {

struct Reply {
  proto::Bytes payload;
  std::vector<UniqueFd> fds;
};

class Conn {
 public:
  static Result<Conn*> connect(const std::string& path);  // owned by the caller
  Conn(UniqueFd sock, int timeout_ms) : sock_(std::move(sock)), timeout_ms_(timeout_ms) {}

  void set_timeout(int ms) { timeout_ms_ = ms; }
  // The socket, for waits that must also notice ibd going away (EPOLLRDHUP).
  int socket_fd() const { return sock_.get(); }
  bool broken() {
    std::lock_guard lock(mu_);
    return broken_;
  }

  // Sends op with `body` and `fds`, waits up to the timeout for the reply
  // of the same op and seq (ETIMEDOUT), returns its payload or the errno
  // ibd answered. ibd gone: ECONNRESET / EPIPE.
  Result<Reply> call(proto::Op op, std::span<const std::byte> body, std::span<const int> fds = {});

  template <class Rep, class Req>
  Result<Rep> call(proto::Op op, const Req& req, std::span<const int> fds = {}) {
    auto body = proto::encode(req);
    OPENIB_TRY_ASSIGN(Reply r, call(op, body, fds));
    auto rep = proto::decode<Rep>(r.payload);
    if (!rep) return err(EPROTO, "ibd: {} reply: {}", proto::op_name(uint16_t(op)), rep.error().message);
    return std::move(rep).value();
  }
  template <class Req>
  Result<void> call_void(proto::Op op, const Req& req) {
    OPENIB_TRY_ASSIGN(Reply r, call(op, proto::encode(req)));
    (void)r;
    return ok();
  }

 private:
  std::mutex mu_;
  UniqueFd sock_;
  int timeout_ms_;
  uint32_t seq_ = 0;
  bool broken_ = false;  // a framing error or the peer gone: every later call fails
  Error broken_err_;
};

}  // namespace openib::lib
