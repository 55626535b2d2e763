// Test fixture for ibd (meson test 'ibd'): runs the ibd program (path from
// OPENIB_IBD) with its embedded simhca (OPENIB_SIMHCA) on a socket in a
// fresh temporary directory, and a small client speaking the client
// protocol (docs/client-protocol.md) with proto::send_message/recv_message.
// Every wait is bounded.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "clientproto/socket.hpp"

namespace openib::test {

inline std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE(v != nullptr);
  return v;
}

class IbdProcess {
 public:
  explicit IbdProcess(std::vector<std::string> extra = {}, std::string dir = {}) {
    if (dir.empty()) {
      char tmpl[] = "/tmp/ibd-test-XXXXXX";
      REQUIRE(::mkdtemp(tmpl) != nullptr);
      dir_ = tmpl;
      own_dir_ = true;
    } else {
      dir_ = dir;
    }
    socket_ = dir_ + "/ibd.sock";
    pid_ = start(extra);
    // Ready once the socket accepts; bounded.
    for (int i = 0; i < 1000 && !connectable(); ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("ibd exited during start-up, status " << st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(connectable());
  }
  ~IbdProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      if (wait_exit(5000) == -1) {
        ::kill(pid_, SIGKILL);
        int st;
        ::waitpid(pid_, &st, 0);
      }
    }
    std::error_code ec;
    if (own_dir_) std::filesystem::remove_all(dir_, ec);
  }

  // Starts another ibd on the same socket and run dir; its exit status
  // within timeout_ms, or -1 (then it is killed).
  int run_second(int timeout_ms) {
    pid_t p = start({});
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
      int st = 0;
      if (::waitpid(p, &st, WNOHANG) == p) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(p, SIGKILL);
    int st;
    ::waitpid(p, &st, 0);
    return -1;
  }

  bool connectable() const {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, socket_.c_str());
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }

  // The wait status, or -1 if still running after timeout_ms.
  int wait_exit(int timeout_ms) {
    for (int waited = 0; pid_ > 0 && waited <= timeout_ms; waited += 10) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  // The embedded simhca: ibd's only child.
  pid_t simhca_pid() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children");
    pid_t p = -1;
    in >> p;
    return p;
  }

  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }

 private:
  pid_t start(const std::vector<std::string>& extra) {
    std::vector<std::string> args{env_or_fail("OPENIB_IBD"), "--socket", socket_, "--simhca",
                                  env_or_fail("OPENIB_SIMHCA"), "--log", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_t p = ::fork();
    REQUIRE(p >= 0);
    if (p == 0) {
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    return p;
  }

  std::string dir_, socket_;
  bool own_dir_ = false;
  pid_t pid_ = -1;
};

// The reply to one request.
struct Answer {
  int status = -1;
  proto::Bytes payload;
  std::string message;  // status != 0
  std::vector<UniqueFd> fds;
  template <class M> M as() const {
    auto r = proto::decode<M>(payload);
    REQUIRE(r.ok());
    return *r;
  }
};

class IbdClient {
 public:
  explicit IbdClient(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }

  Answer raw(uint16_t op, std::span<const std::byte> body, std::span<const int> fds = {}) {
    proto::Header h;
    h.op = op;
    h.seq = ++seq_;
    REQUIRE(proto::send_message(fd_.get(), h, body, fds).ok());
    REQUIRE(readable(5000));
    auto m = proto::recv_message(fd_.get());
    REQUIRE(m.ok());
    CHECK(m->header.op == (op | proto::kReplyBit));
    CHECK(m->header.seq == h.seq);
    auto r = proto::decode_reply(m->body);
    REQUIRE(r.ok());
    Answer a;
    a.status = r->status;
    if (a.status == 0) a.payload.assign(r->payload.begin(), r->payload.end());
    else a.message.assign(reinterpret_cast<const char*>(r->payload.data()), r->payload.size());
    a.fds = std::move(m->fds);
    return a;
  }
  template <class M>
  Answer call(proto::Op op, const M& body, std::vector<int> fds = {}) {
    auto b = proto::encode(body);
    return raw(static_cast<uint16_t>(op), b, fds);
  }
  template <class R, class M>
  R must(proto::Op op, const M& body, std::vector<int> fds = {}) {
    Answer a = call(op, body, fds);
    INFO(proto::op_name(static_cast<uint16_t>(op)) << ": " << a.message);
    REQUIRE(a.status == 0);
    return a.template as<R>();
  }

  proto::HelloRep hello(int async_fd = -1) {
    proto::HelloReq r;
    std::vector<int> fds;
    if (async_fd >= 0) {
      r.flags = proto::kHelloAsyncFd;
      fds.push_back(async_fd);
    }
    Answer a = call(proto::Op::kHello, r, fds);
    REQUIRE(a.status == 0);
    uar_fds_ = std::move(a.fds);
    return a.as<proto::HelloRep>();
  }
  const std::vector<UniqueFd>& uar_fds() const { return uar_fds_; }

  nlohmann::json info(uint32_t flags = 0) {
    Answer a = call(proto::Op::kInfo, proto::InfoReq{flags});
    REQUIRE(a.status == 0);
    return nlohmann::json::parse(std::string(reinterpret_cast<const char*>(a.payload.data()), a.payload.size()));
  }

  // True once the socket is readable (a reply, or the peer closed).
  bool readable(int timeout_ms) {
    pollfd p{fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1;
  }

 private:
  UniqueFd fd_;
  uint32_t seq_ = 0;
  std::vector<UniqueFd> uar_fds_;
};

// A memfd of `size` bytes (the client's ring and buffer memory).
inline UniqueFd make_memfd(size_t size) {
  UniqueFd fd(::memfd_create("ibd-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(fd.valid());
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK) == 0);  // MAP_MEM requires it
  return fd;
}

}  // namespace openib::test
