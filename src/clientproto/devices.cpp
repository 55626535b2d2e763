// docs/client-protocol.md §2.1 "Devices".
#include "clientproto/devices.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "clientproto/socket.hpp"

namespace openib::proto {

namespace {

// "/run/ibd/ibd.sock" -> {"/run/ibd", "ibd"}; a name without ".sock" is its own stem.
std::pair<std::string, std::string> dir_and_stem(std::string_view main) {
  const std::filesystem::path p(main);
  std::string stem = p.filename().string();
  if (stem.size() > 5 && stem.ends_with(".sock")) stem.resize(stem.size() - 5);
  std::string dir = p.parent_path().string();
  return {dir.empty() ? "." : dir, stem};
}

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

bool valid_device_name(std::string_view name) {
  if (name.empty() || name.size() > 31) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string device_socket(std::string_view main, std::string_view name) {
  auto [dir, stem] = dir_and_stem(main);
  return dir + "/" + stem + "-" + std::string(name) + ".sock";
}

std::vector<DeviceEntry> list_devices(std::string_view main) {
  auto [dir, stem] = dir_and_stem(main);
  const std::string prefix = stem + "-";
  std::vector<DeviceEntry> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string f = it->path().filename().string();
    if (!f.starts_with(prefix) || !f.ends_with(".sock") || f.size() <= prefix.size() + 5) continue;
    const std::string name = f.substr(prefix.size(), f.size() - prefix.size() - 5);
    if (!valid_device_name(name)) continue;
    const std::string path = it->path().string();
    if (!is_socket(path)) continue;
    if (!connect_socket(path)) continue;  // stale: no daemon answers
    out.push_back({name, path});
  }
  std::sort(out.begin(), out.end(), [](const DeviceEntry& a, const DeviceEntry& b) { return a.name < b.name; });
  return out;
}

Result<std::string> socket_for_device(std::string_view main, std::string_view name) {
  if (name.empty()) return std::string(main);
  if (!valid_device_name(name)) return err(EINVAL, "'{}' is not a device name", name);
  std::string path = device_socket(main, name);
  if (!is_socket(path)) return err(ENODEV, "no device '{}' at {} (no {})", name, main, path);
  return path;
}

}  // namespace openib::proto
