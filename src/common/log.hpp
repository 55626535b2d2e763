// Logging: spdlog, one logger per component ("vfio", "dma", ...), so a
// line says where it came from. Components call log::get("vfio").
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace openib::log {

// The named logger, created on first use, sharing the default sink.
std::shared_ptr<spdlog::logger> get(const std::string& component);

// Set every logger's level from a name ("trace", "debug", "info", "warn",
// "error", "off"); also honours OPENIB_LOG in the environment at startup.
void set_level(const std::string& level);

}  // namespace openib::log
