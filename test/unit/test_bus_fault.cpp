// common/bus_fault.hpp (docs/simhca.md §11.2): a copy from or into memory
// the file no longer backs fails instead of killing the process; a SIGBUS
// anywhere else still has its default action. Faults that must kill are
// taken in a forked child, reaped by PID with a bounded wait.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/bus_fault.hpp"
#include "common/fd.hpp"

using namespace openib;

namespace {

constexpr size_t kPg = 4096;

// Two pages of a memfd mapped shared; the second truncated away.
struct HalfGone {
  UniqueFd fd{::memfd_create("bus-fault", MFD_CLOEXEC)};
  std::byte* p = nullptr;
  HalfGone() {
    REQUIRE(fd.valid());
    REQUIRE(::ftruncate(fd.get(), 2 * kPg) == 0);
    void* m = ::mmap(nullptr, 2 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<std::byte*>(m);
    std::memset(p, 0x5a, 2 * kPg);
    REQUIRE(::ftruncate(fd.get(), kPg) == 0);
  }
  ~HalfGone() { ::munmap(p, 2 * kPg); }
};

// Runs f in a child with the default SIGBUS action under our handler; its
// wait status (or -1 if it did not end within 10 s, then killed).
template <class F>
int in_child(F f) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGBUS, SIG_DFL);  // not the test framework's handler
    install_bus_fault_handler();
    f();
    ::_exit(0);
  }
  for (int i = 0; i < 1000; ++i) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

}  // namespace

TEST_CASE("bus_fault: a guarded copy that faults returns false; the process goes on", "[bus_fault]") {
  install_bus_fault_handler();
  HalfGone m;
  std::byte buf[2 * kPg];
  const uint64_t before = bus_faults_recovered();
  CHECK(guarded_copy(buf, m.p, kPg));  // the page still backed
  CHECK(buf[0] == std::byte{0x5a});
  CHECK_FALSE(guarded_copy(buf, m.p, 2 * kPg));  // reads past the end of the file
  CHECK_FALSE(guarded_copy(m.p + kPg, buf, 64));  // writes there
  CHECK(bus_faults_recovered() == before + 2);
  // Each copy is on its own: good memory still copies, on this thread and others.
  CHECK(guarded_copy(m.p, buf, 64));
  bool other = false;
  std::thread([&] { other = !guarded_copy(buf, m.p + kPg, 8) && guarded_copy(buf, m.p, 8); }).join();
  CHECK(other);
  // The file backs the page again: the same memory works (zeros).
  REQUIRE(::ftruncate(m.fd.get(), 2 * kPg) == 0);
  CHECK(guarded_copy(buf, m.p + kPg, 8));
  CHECK(buf[0] == std::byte{0});
}

TEST_CASE("bus_fault: a SIGBUS outside a guarded copy keeps its default action", "[bus_fault]") {
  SECTION("a fault on unguarded access") {
    int st = in_child([] {
      HalfGone m;
      guarded_copy(m.p, m.p + kPg, 8);  // recovered
      volatile std::byte b = m.p[kPg];  // not guarded: killed here
      (void)b;
    });
    REQUIRE(st != -1);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGBUS);
  }
  SECTION("a SIGBUS sent by kill") {
    int st = in_child([] { ::kill(::getpid(), SIGBUS); });
    REQUIRE(st != -1);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGBUS);
  }
}
