#include "lib/conn.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstring>

namespace openib::lib {

Result<Conn*> Conn::connect(const std::string& path) {
  OPENIB_TRY_ASSIGN(auto s, proto::connect_socket(path));
  return new Conn(std::move(s), 10000);
}

Result<Reply> Conn::call(proto::Op op, std::span<const std::byte> body, std::span<const int> fds) {
  std::lock_guard lock(mu_);
  const char* name = proto::op_name(uint16_t(op));
  if (broken_) return err(broken_err_.code, "ibd: {}: connection unusable: {}", name, broken_err_.message);
  proto::Header h;
  h.op = uint16_t(op);
  h.seq = ++seq_;
  if (auto r = proto::send_message(sock_.get(), h, body, fds); !r) {
    Error e = r.take_error();
    if (e.code == EPIPE || e.code == ECONNRESET || e.code == ENOTCONN) {
      broken_ = true;
      broken_err_ = e;
    }
    return err(e.code, "ibd: {}: {}", name, e.message);
  }
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    int left = -1;
    if (timeout_ms_ >= 0) {
      auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      left = d < 0 ? 0 : static_cast<int>(d);
    }
    pollfd p{sock_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_err("ibd: {}: poll", name);
    if (n == 0) return err(ETIMEDOUT, "ibd: {}: no reply within {} ms", name, timeout_ms_);
    auto m = proto::recv_message(sock_.get(), true);
    if (!m) {
      if (m.error().code == EAGAIN) continue;
      broken_ = true;  // closed, or a framing error: nothing after it can be trusted
      broken_err_ = m.error();
      return err(m.error().code, "ibd: {}: {}", name, m.error().message);
    }
    // A late reply to an earlier request that timed out: skip it.
    if (m->header.seq != h.seq && int32_t(m->header.seq - h.seq) < 0) continue;
    if (m->header.seq != h.seq || m->header.op != (uint16_t(op) | proto::kReplyBit)) {
      broken_ = true;
      broken_err_ = err(EPROTO, "reply op {:#x} seq {} to {} seq {}", m->header.op, m->header.seq, name, h.seq);
      return broken_err_;
    }
    auto rv = proto::decode_reply(m->body);
    if (!rv) return err(EPROTO, "ibd: {}: {}", name, rv.error().message);
    if (rv->status != 0)
      return err(rv->status, "ibd: {}: {}", name,
                 std::string(reinterpret_cast<const char*>(rv->payload.data()), rv->payload.size()));
    Reply out;
    out.payload.assign(rv->payload.begin(), rv->payload.end());
    out.fds = std::move(m->fds);
    return out;
  }
}

}  // namespace openib::lib
