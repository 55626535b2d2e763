#include "common/log.hpp"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace openib::log {

namespace {
std::mutex g_mu;
spdlog::level::level_enum g_level = [] {
  const char* env = std::getenv("OPENIB_LOG");
  return env ? spdlog::level::from_str(env) : spdlog::level::info;
}();
}  // namespace

std::shared_ptr<spdlog::logger> get(const std::string& component) {
  std::lock_guard lk(g_mu);
  if (auto l = spdlog::get(component)) return l;
  auto l = spdlog::stderr_color_mt(component);
  l->set_level(g_level);
  l->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  return l;
}

void set_level(const std::string& level) {
  std::lock_guard lk(g_mu);
  g_level = spdlog::level::from_str(level);
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(g_level); });
}

}  // namespace openib::log
