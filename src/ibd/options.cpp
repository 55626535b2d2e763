// ibd's flags and config file (docs/operations.md "Configuration").
#include "ibd/options.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <toml++/toml.h>

namespace openib::ibd {

Result<mode_t> parse_mode(const std::string& in) {
  std::string s = in;
  if (s.starts_with("0o")) s = s.substr(2);
  if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
    return err(EINVAL, "socket mode '{}' is not an octal mode such as 0660", in);
  const unsigned long v = std::stoul(s, nullptr, 8);
  if (v > 0777) return err(EINVAL, "socket mode '{}' has bits above 0777", in);
  return static_cast<mode_t>(v);
}

std::string default_simhca_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto dir = self.parent_path();
    for (const auto& cand : {dir / "../sim/simhca/simhca", dir / "simhca"}) {
      if (::access(cand.c_str(), X_OK) == 0) return std::filesystem::weakly_canonical(cand, ec).string();
    }
  }
  return "simhca";  // execvp searches PATH
}

namespace {

// Applies one TOML key unless the same option was given on the command line.
Result<void> apply_toml(const std::string& file, CLI::App& app, Options& o, std::string& mode_text) {
  toml::table t;
  try {
    t = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    return err(EINVAL, "{}: {}", file, std::string(e.description()));
  }
  for (auto&& [key, node] : t) {
    const std::string k(key.str());
    CLI::Option* opt = nullptr;
    try {
      opt = app.get_option("--" + k);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!opt || k == "config" || k == "help") return err(EINVAL, "{}: unknown key '{}'", file, k);
    if (opt->count() > 0) continue;  // the flag wins
    std::string text;
    if (auto sv = node.value<std::string>()) {
      text = *sv;
    } else if (auto iv = node.value<int64_t>()) {
      text = std::to_string(*iv);
    } else {
      return err(EINVAL, "{}: key '{}' must be a string or an integer", file, k);
    }
    if (k == "socket-mode" && node.is_integer())
      return err(EINVAL, "{}: socket-mode must be a string such as \"0660\" (TOML integers are decimal)", file);
    try {
      opt->add_result(text);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return err(EINVAL, "{}: key '{}': {}", file, k, e.what());
    }
  }
  (void)o;
  (void)mode_text;
  return ok();
}

}  // namespace

ParseOutcome parse_options(int argc, char** argv) {
  Options o;
  std::string mode_text = "0666";
  CLI::App app{"ibd: the openib daemon; owns one HCA and serves clients over a UNIX socket "
               "(docs/operations.md)"};
  app.add_option("--config", o.config, "TOML file with the same keys as the long flags; flags win");
  app.add_option("--device", o.device,
                 "vfio:<PCI address> or vfio-user:<socket>; default: an embedded simhca child");
  app.add_option("--socket", o.socket, "client socket (SOCK_SEQPACKET)")->capture_default_str();
  app.add_option("--socket-mode", mode_text, "client socket mode, octal")->capture_default_str();
  app.add_option("--socket-group", o.socket_group, "group owning the client socket");
  app.add_option("--run-dir", o.run_dir, "simhca socket and locks; default: the socket's directory");
  app.add_option("--state-dir", o.state_dir,
                 "saved state (the path cache); default: /var/lib/openib with the default socket, else the "
                 "socket's directory; 'none': nothing saved");
  app.add_option("--simhca", o.simhca, "simhca binary for the embedded device");
  app.add_option("--cable", o.cable,
                 "embedded simhca: --port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT (UDP) or SHM=FILE,END=A|B[,CRC=always|offload] (same host)");
  app.add_option("--pcap", o.pcap, "embedded simhca: --pcap FILE");
  app.add_option("--faults", o.faults, "embedded simhca: --faults drop=P,dup=P,...");
  app.add_option("--simhca-arg", o.simhca_args,
                 "embedded simhca: one more argument (repeat: --simhca-arg=--node-desc --simhca-arg=Hca1)");
  std::string umad_users = "none";
  app.add_option("--umad-user-access", umad_users,
                 "user-MAD service for users without CAP_NET_ADMIN: none, or gmp (QP1 only)")
      ->check(CLI::IsMember({"none", "gmp"}))
      ->capture_default_str();
  app.add_option("--lid", o.lid, "static LID for port 1 (SET_PORT, state Active); 0: leave the port")
      ->capture_default_str();
  app.add_option("--restart-limit", o.restart_limit,
                 "device lost: attempts to bring it up again before exiting 1 (0: exit at once)")
      ->capture_default_str();
  app.add_option("--path-table-slots", o.path_table_slots,
                 "slots of the shared path table clients map (PATH_TABLE; 128 bytes each): a power of two "
                 ">= 64, or 0 for none")
      ->check([](const std::string& v) -> std::string {
        unsigned long n = 0;
        try {
          n = std::stoul(v);
        } catch (...) {
          return "not a number";
        }
        return n == 0 || (n >= 64 && n <= (1ul << 24) && (n & (n - 1)) == 0) ? "" : "0, or a power of two from 64 to 2^24";
      })
      ->capture_default_str();
  app.add_option("--ipoib", o.ipoib, "IPoIB: create this TAP interface (docs/ipoib.md); empty: no IPoIB");
  app.add_option("--ipoib-pkey", o.ipoib_pkey, "IPoIB: the P_Key (must be the port's P_Key at index 0)")
      ->capture_default_str();
  app.add_option("--ipoib-port", o.ipoib_port, "IPoIB: the HCA port")->capture_default_str();
  app.add_option("--ipoib-qkey", o.ipoib_qkey,
                 "IPoIB: the Q_Key of the broadcast group when ibd creates it (bit 31 set: a controlled Q_Key, "
                 "docs/ipoib.md \"Security\"); a group the SM made keeps its own")
      ->capture_default_str();
  app.add_option("--cm-max-queued-events", o.cm_max_queued_events,
                 "CM events kept for a client that does not read its CM socket; past that its CM socket is "
                 "closed (docs/client-protocol.md \"Connection manager\")")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  add_limit_options(app, o.limits);
  app.add_option("--log", o.log, "log level: trace, debug, info, warn, error, off")->capture_default_str();
  try {
    app.parse(argc, argv);
    if (!o.config.empty()) {
      if (auto r = apply_toml(o.config, app, o, mode_text); !r) {
        std::fprintf(stderr, "ibd: %s\n", r.error().message.c_str());
        return {std::nullopt, 2};
      }
    }
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e)};
  }
  auto mode = parse_mode(mode_text);
  if (!mode) {
    std::fprintf(stderr, "ibd: %s\n", mode.error().message.c_str());
    return {std::nullopt, 2};
  }
  o.socket_mode = *mode;
  o.umad_user_gmp = umad_users == "gmp";
  if (o.run_dir.empty()) o.run_dir = std::filesystem::path(o.socket).parent_path().string();
  if (o.run_dir.empty()) o.run_dir = ".";
  if (o.state_dir.empty())
    o.state_dir = o.socket == Options{}.socket ? std::string("/var/lib/openib") : o.run_dir;
  if (o.state_dir == "none") o.state_dir.clear();
  if (o.simhca.empty()) o.simhca = default_simhca_path();
  if (!o.device.empty() && !o.device.starts_with("vfio:") && !o.device.starts_with("vfio-user:")) {
    std::fprintf(stderr, "ibd: --device must be vfio:<PCI address> or vfio-user:<socket>\n");
    return {std::nullopt, 2};
  }
  return {std::move(o), 0};
}

}  // namespace openib::ibd
