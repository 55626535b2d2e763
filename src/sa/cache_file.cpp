// Atomic save and checked load of the path cache file.
#include "sa/cache_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/fd.hpp"
#include "common/log.hpp"

namespace openib::sa {

namespace {

constexpr std::size_t kMaxFileBytes = 256u << 20;

Result<void> write_all(int fd, ConstBytes b, const std::string& what) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_err("write {}", what);
    b = b.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Result<ByteVec> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_err("open {}", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_err("stat {}", path);
  if (!S_ISREG(st.st_mode)) return err(EINVAL, "{} is not a regular file", path);
  if (static_cast<std::size_t>(st.st_size) > kMaxFileBytes)
    return err(EFBIG, "{} has {} bytes, more than a path cache file may", path, st.st_size);
  ByteVec buf(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::read(fd.get(), buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_err("read {}", path);
    if (n == 0) break;  // shrank under us: the decoder sees it truncated
    got += static_cast<std::size_t>(n);
  }
  buf.resize(got);
  return buf;
}

}  // namespace

std::string cache_file_path(const std::string& dir, std::uint8_t port) {
  return fmt::format("{}/path-cache-port{}.bin", dir, port);
}

Result<void> save_cache_file(const std::string& path, const CacheFile& f) {
  const ByteVec bytes = encode_cache_file(f);
  std::string tmp = path + ".XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd) return sys_err("create a temporary file beside {}", path);
  auto fail = [&tmp](Error e) -> Result<void> {
    ::unlink(tmp.c_str());
    return e;
  };
  if (auto r = write_all(fd.get(), bytes, tmp); !r) return fail(r.take_error());
  if (::fchmod(fd.get(), 0644) != 0) return fail(sys_err("chmod {}", tmp));
  if (::fsync(fd.get()) != 0) return fail(sys_err("fsync {}", tmp));
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(sys_err("rename {} to {}", tmp, path));
  // The rename is durable once the directory is.
  const std::string dir = dir_of(path);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return sys_err("open directory {}", dir);
  if (::fsync(dfd.get()) != 0) return sys_err("fsync directory {}", dir);
  return {};
}

Result<CacheFile> load_cache_file(const std::string& path, const CacheFileTag& expected, std::uint64_t now_unix_ms) {
  static const auto log = log::get("sa");
  auto ignored = [&path](Error e) -> Result<CacheFile> {
    if (e.code == ENOENT)
      log->debug("no path cache file {}: starting cold", path);
    else
      log->warn("ignoring path cache file {}: {}", path, e.str());
    return e;
  };
  auto bytes = read_file(path);
  if (!bytes) return ignored(bytes.take_error());
  auto f = decode_cache_file(*bytes, expected);
  if (!f) return ignored(f.take_error());
  if (now_unix_ms > f->saved_unix_ms) {
    const auto since = std::chrono::milliseconds(static_cast<std::int64_t>(
        std::min<std::uint64_t>(now_unix_ms - f->saved_unix_ms, INT64_MAX / 4)));
    for (auto& p : f->paths) p.age += since;
  }
  return f;
}

}  // namespace openib::sa
