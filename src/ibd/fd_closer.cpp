#include "ibd/fd_closer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace openib::ibd {

namespace {

// One thread for the life of the process, started on first use and never
// joined (a close it is blocked in must not hold up ibd's exit); its state
// is never destroyed for the same reason.
class Closer {
 public:
  static Closer& get() {
    static Closer* c = new Closer;  // intentionally never freed (see above)
    return *c;
  }
  void push(UniqueFd fd) {
    if (!fd) return;
    {
      std::lock_guard lk(mu_);
      q_.push_back(fd.release());
      if (!started_) {
        started_ = true;
        std::thread([this] { run(); }).detach();
      }
    }
    ++count_;
    ++pending_;
    cv_.notify_one();
  }
  uint64_t count() const { return count_.load(); }
  uint64_t pending() const { return pending_.load(); }

 private:
  void run() {
    for (;;) {
      int fd;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return !q_.empty(); });
        fd = q_.front();
        q_.pop_front();
      }
      ::close(fd);
      --pending_;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> q_;
  bool started_ = false;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> pending_{0};  // handed over, not yet closed
};

}  // namespace

FdKind fd_kind(int fd) {
  char buf[64];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n > 0 && std::string_view(buf, static_cast<size_t>(n)) == "anon_inode:[eventfd]") return FdKind::kEventfd;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::fcntl(fd, F_GET_SEALS) >= 0) return FdKind::kMemfd;
  return FdKind::kOther;
}

const char* fd_kind_name(FdKind k) {
  switch (k) {
    case FdKind::kEventfd: return "an eventfd";
    case FdKind::kMemfd: return "a memfd";
    case FdKind::kOther: break;
  }
  return "neither an eventfd nor a memfd";
}

void dispose_fds(std::vector<UniqueFd>& fds) {
  for (UniqueFd& f : fds) {
    if (!f) continue;
    if (fd_kind(f.get()) == FdKind::kOther) close_off_loop(std::move(f));
    else f.reset();
  }
  fds.clear();
}

void close_off_loop(UniqueFd fd) { Closer::get().push(std::move(fd)); }

uint64_t fds_closed_off_loop() { return Closer::get().count(); }

uint64_t fds_closing_off_loop() { return Closer::get().pending(); }

}  // namespace openib::ibd
