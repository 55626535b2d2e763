// Opening the file behind a client's shared mapping (client_mapping.hpp;
// docs/client-protocol.md §3 "MAP_MEM_SHARED", docs/library.md "Memory").
//
// Everything is read through one directory fd of /proc/PID: once that
// process is gone, every lookup under it fails (ESRCH), even if its pid is
// used again, so the checks, the maps and the file all belong to one
// process. The checks stand in for the kernel's own for map_files
// (ptrace access, then CAP_SYS_ADMIN, which ibd has): ibd opens the file
// as root, so it opens only what the client itself mapped writable.
#include "ibd/client_mapping.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <vector>

namespace openib::ibd {

namespace {

// A hex or decimal number at the start of s, then s past it.
template <int Base>
bool number(std::string_view& s, uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, Base);
  if (ec != std::errc() || p == s.data()) return false;
  s.remove_prefix(size_t(p - s.data()));
  return true;
}
bool skip(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

Result<std::string> read_all(int dirfd, const char* name) {
  UniqueFd f(::openat(dirfd, name, O_RDONLY | O_CLOEXEC));
  if (!f) return sys_err("open /proc/PID/{}", name);
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_err("read /proc/PID/{}", name);
    if (n == 0) return out;
    out.append(buf, size_t(n));
  }
}

// The mappings that cover [s, e), in order; EINVAL at a hole.
Result<std::vector<MapsLine>> covering(int dirfd, uint64_t s, uint64_t e) {
  OPENIB_TRY_ASSIGN(std::string text, read_all(dirfd, "maps"));
  std::vector<MapsLine> out;
  uint64_t cur = s;
  std::string_view rest(text);
  while (!rest.empty() && cur < e) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    auto m = parse_maps_line(line);
    if (!m || m->hi <= cur) continue;
    if (m->lo > cur) break;
    cur = m->hi;
    out.push_back(*m);
  }
  if (cur < e) return err(EINVAL, "{:#x} is not mapped", cur);
  return out;
}

bool same(const MapsLine& a, const MapsLine& b) {
  return a.lo == b.lo && a.hi == b.hi && a.offset == b.offset && a.major == b.major && a.minor == b.minor &&
         a.ino == b.ino && std::string_view(a.perms) == b.perms;
}

// The process is still the client's: its IDs are the ones the socket
// was connected with, and it is dumpable (the kernel gives /proc/PID of a
// process that is not to root).
Result<void> check_credentials(int dirfd, uid_t uid, gid_t gid) {
  struct stat st{};
  if (::fstat(dirfd, &st) < 0) return sys_err("fstat /proc/PID");
  OPENIB_TRY_ASSIGN(std::string status, read_all(dirfd, "status"));
  auto ids = [&](std::string_view key, uint64_t want) {
    const size_t at = status.find(key);
    if (at == std::string::npos) return false;
    std::string_view v = std::string_view(status).substr(at + key.size());
    for (int i = 0; i < 4; ++i) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      uint64_t n = 0;
      if (!number<10>(v, n) || n != want) return false;
    }
    return true;
  };
  if (!ids("\nUid:", uid) || !ids("\nGid:", gid) || (uid != 0 && (st.st_uid != uid || st.st_gid != gid)))
    return err(EPERM, "the client's process (pid of its connection) no longer runs as uid {} gid {} or is not "
                      "dumpable (a set-user-ID exec?): its memory is not the client's to register", uid, gid);
  return ok();
}

}  // namespace

std::optional<MapsLine> parse_maps_line(std::string_view s) {
  MapsLine m;
  uint64_t maj = 0, min = 0;
  if (!number<16>(s, m.lo) || !skip(s, '-') || !number<16>(s, m.hi) || !skip(s, ' ') || s.size() < 5) return {};
  // show_map_vma's four flags: r or -, w or -, x or -, s or p.
  static constexpr std::string_view kSet[4] = {"r-", "w-", "x-", "sp"};
  for (size_t i = 0; i < 4; ++i) {
    if (kSet[i].find(s[i]) == std::string_view::npos) return {};
    m.perms[i] = s[i];
  }
  s.remove_prefix(4);
  if (!skip(s, ' ') || !number<16>(s, m.offset) || !skip(s, ' ') || !number<16>(s, maj) || !skip(s, ':') ||
      !number<16>(s, min) || !skip(s, ' ') || !number<10>(s, m.ino))
    return {};
  if (m.hi <= m.lo || maj > 0xfff || min > 0xfffff) return {};
  m.major = unsigned(maj);
  m.minor = unsigned(min);
  return m;
}

Result<SharedFile> open_shared_range(pid_t pid, uid_t uid, gid_t gid, uint64_t addr, uint64_t length) {
  if (pid <= 0) return err(EPERM, "the client's pid is not known here (another pid namespace)");
  const uint64_t end = addr + length;
  const std::string dir = "/proc/" + std::to_string(pid);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return err(ESRCH, "the client's process {} is gone", pid);
  OPENIB_TRY(check_credentials(d.get(), uid, gid));
  OPENIB_TRY_ASSIGN(auto maps, covering(d.get(), addr, end));
  const MapsLine& first = maps.front();
  for (size_t i = 0; i < maps.size(); ++i) {
    const MapsLine& m = maps[i];
    // A file has a device; its inode may be 0: a SysV segment's is its id,
    // and an IPC namespace's first segment is id 0 (perftest's
    // --use_hugepages on a fresh machine).
    if (m.perms[3] != 's' || (m.ino == 0 && m.major == 0 && m.minor == 0))
      return err(EINVAL, "[{:#x}, {:#x}) is not a shared mapping of a file ({})", m.lo, m.hi, m.perms);
    if (m.perms[0] != 'r' || m.perms[1] != 'w')
      return err(EACCES, "[{:#x}, {:#x}) is mapped shared but not read-write ({})", m.lo, m.hi, m.perms);
    if (i > 0 && (m.major != first.major || m.minor != first.minor || m.ino != first.ino ||
                  m.offset != first.offset + (m.lo - first.lo)))
      return err(EINVAL, "[{:#x}, {:#x}) spans mappings of more than one file or of non-consecutive offsets", addr,
                 end);
  }
  const std::string link = "map_files/" + fmt::format("{:x}-{:x}", first.lo, first.hi);
  UniqueFd f(::openat(d.get(), link.c_str(), O_RDWR | O_CLOEXEC));
  if (!f) {
    if (errno == ENOENT) return err(EINVAL, "the mapping at {:#x} changed while being opened", first.lo);
    return sys_err("open /proc/{}/{}", pid, link);
  }
  struct stat st{};
  if (::fstat(f.get(), &st) < 0) return sys_err("fstat the file mapped at {:#x}", first.lo);
  if (!S_ISREG(st.st_mode) || st.st_ino != first.ino || major(st.st_dev) != first.major ||
      minor(st.st_dev) != first.minor)
    return err(EINVAL, "the mapping at {:#x} changed while being opened", first.lo);
  // The same mappings after the open: the file is the one they map.
  OPENIB_TRY(check_credentials(d.get(), uid, gid));
  OPENIB_TRY_ASSIGN(auto again, covering(d.get(), addr, end));
  if (again.size() != maps.size()) return err(EINVAL, "the mappings of [{:#x}, {:#x}) changed", addr, end);
  for (size_t i = 0; i < maps.size(); ++i)
    if (!same(maps[i], again[i])) return err(EINVAL, "the mappings of [{:#x}, {:#x}) changed", addr, end);
  struct statfs fs{};
  if (::fstatfs(f.get(), &fs) < 0) return sys_err("fstatfs the file mapped at {:#x}", first.lo);
  SharedFile out;
  if (fs.f_type == HUGETLBFS_MAGIC) {
    out.page_size = uint64_t(st.st_blksize);
  } else if (fs.f_type == TMPFS_MAGIC) {
    out.page_size = 4096;
  } else {
    // As Linux since 6.5 for a long-term writable pin (what ibv_reg_mr
    // takes) of a file on a file system with writeback: the page cache of
    // such a file is not the device's to write behind the file system.
    return err(EINVAL, "[{:#x}, {:#x}) maps a file on a {:#x} file system: only tmpfs (shared anonymous memory, "
               "memfds, /dev/shm) and hugetlbfs files can be registered", addr, end, uint64_t(fs.f_type));
  }
  out.offset = first.offset + (addr - first.lo);
  out.fd = std::move(f);
  return out;
}

}  // namespace openib::ibd
