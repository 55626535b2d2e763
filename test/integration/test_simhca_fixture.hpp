// Test fixture for the simhca integration tests: runs the simhca program
// (path from OPENIB_SIMHCA, set by meson) as a child process on a socket in
// a fresh temporary directory, and ends it by its PID with bounded waits.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "hca/hca.hpp"
#include "vfio/device.hpp"

namespace openib::test {

class SimhcaProcess {
 public:
  explicit SimhcaProcess(std::vector<std::string> extra = {}) {
    const char* bin = std::getenv("OPENIB_SIMHCA");
    REQUIRE(bin != nullptr);
    char tmpl[] = "/tmp/simhca-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/simhca.sock";
    std::vector<std::string> args{bin, "--socket", socket_, "--log", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // The socket appears once simhca listens; bounded wait.
    for (int i = 0; i < 500 && !std::filesystem::exists(socket_); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(std::filesystem::exists(socket_));
  }

  ~SimhcaProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      if (wait_exit(5000) == -1) kill_now();
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& socket() const { return socket_; }
  std::string spec() const { return "vfio-user:" + socket_; }
  pid_t pid() const { return pid_; }

  // SIGKILL by PID and reap.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  // Waits up to timeout_ms for the child to exit; its wait status, or -1.
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

 private:
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

inline std::unique_ptr<vfio::Device> connect(const SimhcaProcess& p) {
  // The socket file exists from bind(), before listen(): a connect in
  // between is refused. Retry for up to 5 s.
  auto d = vfio::open_device(p.spec());
  for (int i = 0; i < 500 && !d.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    d = vfio::open_device(p.spec());
  }
  if (!d.ok()) FAIL(d.error().str());
  return std::move(d).value();
}

// A simhca process, a connection, and the driver brought up on it.
struct HcaFixture {
  explicit HcaFixture(std::vector<std::string> extra = {}) : sim(std::move(extra)) {
    dev = connect(sim);
    auto h = hca::Hca::open(*dev, io);
    if (!h) FAIL(h.error().str());
    hca = std::move(h).value();
  }
  ~HcaFixture() {
    hca.reset();  // the teardown ladder, before the device goes
    dev.reset();
  }
  uint32_t reg(uint64_t off) {
    auto v = dev->read32(VFIO_PCI_BAR0_REGION_INDEX, off);
    REQUIRE(v.ok());
    return *v;
  }

  SimhcaProcess sim;
  boost::asio::io_context io;
  std::unique_ptr<vfio::Device> dev;
  std::unique_ptr<hca::Hca> hca;
};

}  // namespace openib::test
