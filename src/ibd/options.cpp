// ibd's flags and config file (docs/operations.md "Configuration").
#include "ibd/options.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <toml++/toml.h>

#include <algorithm>
#include <limits>

#include "clientproto/devices.hpp"
#include <fmt/format.h>

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

// A `[[device]]` table of the config file, or one more --device value.
struct DeviceTable {
  DeviceOptions d;
  std::vector<std::string> keys;  // the keys it set
};

// "NAME=SPEC" or "SPEC"; SPEC "embedded" is the embedded simhca.
Result<DeviceOptions> parse_device_spec(const std::string& text) {
  DeviceOptions d;
  std::string spec = text;
  if (auto eq = text.find('='); eq != std::string::npos && !text.starts_with("vfio")) {
    d.name = text.substr(0, eq);
    spec = text.substr(eq + 1);
  }
  d.spec = spec == "embedded" ? "" : spec;
  return d;
}

template <class T>
Result<void> table_int(const toml::table& t, const char* key, T& out, const std::string& where) {
  const auto* n = t.get(key);
  if (!n) return ok();
  auto v = n->value<int64_t>();
  if (!v || *v < 0 || uint64_t(*v) > std::numeric_limits<T>::max())
    return err(EINVAL, "{}: '{}' must be an integer from 0 to {}", where, key, uint64_t(std::numeric_limits<T>::max()));
  out = T(*v);
  return ok();
}

// One [[device]] table (docs/operations.md "Several devices").
Result<DeviceTable> parse_device_table(const toml::table& t, const std::string& where) {
  static const std::vector<std::string> known = {"name", "device", "cable", "pcap", "faults", "simhca-arg",
                                                 "lid", "ipoib", "ipoib-pkey", "ipoib-port", "ipoib-qkey",
                                                 "ipoib-mode", "netdev", "netdev-port"};
  DeviceTable out;
  for (auto&& [key, node] : t) {
    const std::string k(key.str());
    if (std::find(known.begin(), known.end(), k) == known.end()) return err(EINVAL, "{}: unknown key '{}'", where, k);
    out.keys.push_back(k);
  }
  auto str = [&](const char* key, std::string& v) -> Result<void> {
    if (const auto* n = t.get(key)) {
      auto s = n->value<std::string>();
      if (!s) return err(EINVAL, "{}: '{}' must be a string", where, key);
      v = *s;
    }
    return ok();
  };
  std::string spec = "embedded";
  OPENIB_TRY(str("name", out.d.name));
  OPENIB_TRY(str("device", spec));
  out.d.spec = spec == "embedded" ? "" : spec;
  OPENIB_TRY(str("cable", out.d.cable));
  OPENIB_TRY(str("pcap", out.d.pcap));
  OPENIB_TRY(str("faults", out.d.faults));
  OPENIB_TRY(str("ipoib", out.d.ipoib));
  OPENIB_TRY(str("ipoib-mode", out.d.ipoib_mode));
  if (out.d.ipoib_mode != "datagram" && out.d.ipoib_mode != "connected")
    return err(EINVAL, "{}: 'ipoib-mode' must be \"datagram\" or \"connected\"", where);
  OPENIB_TRY(str("netdev", out.d.netdev));
  if (const auto* n = t.get("simhca-arg")) {
    const auto* a = n->as_array();
    if (!a) return err(EINVAL, "{}: 'simhca-arg' must be an array of strings", where);
    for (const auto& e : *a) {
      auto s = e.value<std::string>();
      if (!s) return err(EINVAL, "{}: 'simhca-arg' must be an array of strings", where);
      out.d.simhca_args.push_back(*s);
    }
  }
  OPENIB_TRY(table_int(t, "lid", out.d.lid, where));
  OPENIB_TRY(table_int(t, "ipoib-pkey", out.d.ipoib_pkey, where));
  OPENIB_TRY(table_int(t, "ipoib-port", out.d.ipoib_port, where));
  OPENIB_TRY(table_int(t, "ipoib-qkey", out.d.ipoib_qkey, where));
  OPENIB_TRY(table_int(t, "netdev-port", out.d.netdev_port, where));
  return out;
}

// Applies one top-level TOML key unless the same option was given on the
// command line; [[device]] tables go to `tables`.
Result<void> apply_toml(const std::string& file, CLI::App& app, std::vector<DeviceTable>& tables) {
  toml::table t;
  try {
    t = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    return err(EINVAL, "{}: {}", file, std::string(e.description()));
  }
  for (auto&& [key, node] : t) {
    const std::string k(key.str());
    if (k == "device" && node.is_array_of_tables()) {
      size_t i = 0;
      for (const auto& e : *node.as_array()) {
        OPENIB_TRY_ASSIGN(auto d, parse_device_table(*e.as_table(), fmt::format("{}: [[device]] {}", file, i++)));
        tables.push_back(std::move(d));
      }
      continue;
    }
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
  return ok();
}

void add_daemon_flags(CLI::App& app, Options& o, std::string& mode_text, std::string& umad_users) {
  app.add_option("--config", o.config, "TOML file with the same keys as the long flags; flags win");
  app.add_option("--socket", o.socket, "client socket (SOCK_SEQPACKET) of the first device")->capture_default_str();
  app.add_option("--socket-mode", mode_text, "client socket mode, octal")->capture_default_str();
  app.add_option("--socket-group", o.socket_group, "group owning the client socket");
  app.add_option("--run-dir", o.run_dir, "simhca sockets and locks; default: the socket's directory");
  app.add_option("--state-dir", o.state_dir,
                 "saved state (the path cache); default: /var/lib/openib with the default socket, else the "
                 "socket's directory; 'none': nothing saved");
  app.add_option("--simhca", o.simhca, "simhca binary for the embedded device");
  app.add_option("--umad-user-access", umad_users,
                 "user-MAD service for users without CAP_NET_ADMIN: none, or gmp (QP1 only)")
      ->check(CLI::IsMember({"none", "gmp"}))
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
  app.add_option("--cm-max-queued-events", o.cm_max_queued_events,
                 "CM events kept for a client that does not read its CM socket; past that its CM socket is "
                 "closed (docs/client-protocol.md \"Connection manager\")")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  add_limit_options(app, o.limits);
  app.add_option("--log", o.log, "log level: trace, debug, info, warn, error, off")->capture_default_str();
}

// The first device's flags (the per-device keys of a [[device]] table).
void add_device_flags(CLI::App& app, Options& o, std::vector<std::string>& specs) {
  app.add_option("--device", specs,
                 "[NAME=]SPEC, repeatable: one device each; SPEC vfio:<PCI address>, vfio-user:<socket> or "
                 "embedded (an embedded simhca child, the default)");
  app.add_option("--cable", o.cable,
                 "embedded simhca: --port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT (UDP), SHM=FILE,END=A|B[,CRC=always|offload] (same "
                 "host) or IFACE=NAME (a host interface, Ethernet ports: docs/cables.md)");
  app.add_option("--pcap", o.pcap, "embedded simhca: --pcap FILE");
  app.add_option("--faults", o.faults, "embedded simhca: --faults drop=P,dup=P,...");
  app.add_option("--simhca-arg", o.simhca_args,
                 "embedded simhca: one more argument (repeat: --simhca-arg=--node-desc --simhca-arg=Hca1)");
  app.add_option("--lid", o.lid, "static LID for port 1 (SET_PORT, state Active); 0: leave the port")
      ->capture_default_str();
  app.add_option("--ipoib", o.ipoib, "IPoIB: create this TAP interface (docs/ipoib.md); empty: no IPoIB");
  app.add_option("--ipoib-pkey", o.ipoib_pkey, "IPoIB: the P_Key (must be the port's P_Key at index 0)")
      ->capture_default_str();
  app.add_option("--ipoib-port", o.ipoib_port, "IPoIB: the HCA port")->capture_default_str();
  app.add_option("--ipoib-qkey", o.ipoib_qkey,
                 "IPoIB: the Q_Key of the broadcast group when ibd creates it (bit 31 set: a controlled Q_Key, "
                 "docs/ipoib.md \"Security\"); a group the SM made keeps its own")
      ->capture_default_str();
  app.add_option("--ipoib-mode", o.ipoib_mode,
                 "IPoIB: datagram or connected mode (RFC 4755, MTU 65520; docs/ipoib.md \"Connected mode\"); "
                 "`ibdctl ipoib mode` changes it at run time")
      ->check(CLI::IsMember({"datagram", "connected"}))
      ->capture_default_str();
  app.add_option("--netdev", o.netdev,
                 "RoCE: create this TAP interface as the Ethernet port's netdev (docs/operations.md \"RoCE ports\"); "
                 "empty: none");
  app.add_option("--netdev-port", o.netdev_port, "RoCE: the netdev's HCA port (an Ethernet port)")
      ->capture_default_str();
}

// The first device from the per-device flags; a [[device]] table's key
// wins over the flag's default, never over a flag given.
DeviceOptions first_device(const CLI::App& app, const Options& o, const DeviceTable* t) {
  DeviceOptions d{.name = "", .spec = o.device, .cable = o.cable, .pcap = o.pcap, .faults = o.faults,
                  .simhca_args = o.simhca_args, .lid = o.lid, .ipoib = o.ipoib, .ipoib_pkey = o.ipoib_pkey,
                  .ipoib_port = o.ipoib_port, .ipoib_qkey = o.ipoib_qkey, .ipoib_mode = o.ipoib_mode, .netdev = o.netdev,
                  .netdev_port = o.netdev_port};
  if (!t) return d;
  auto from_table = [&](const char* key) {
    return std::find(t->keys.begin(), t->keys.end(), key) != t->keys.end() &&
           app.get_option(std::string("--") + key)->count() == 0;
  };
  d.name = t->d.name;
  if (from_table("device")) d.spec = t->d.spec;
  if (from_table("cable")) d.cable = t->d.cable;
  if (from_table("pcap")) d.pcap = t->d.pcap;
  if (from_table("faults")) d.faults = t->d.faults;
  if (from_table("simhca-arg")) d.simhca_args = t->d.simhca_args;
  if (from_table("lid")) d.lid = t->d.lid;
  if (from_table("ipoib")) d.ipoib = t->d.ipoib;
  if (from_table("ipoib-pkey")) d.ipoib_pkey = t->d.ipoib_pkey;
  if (from_table("ipoib-port")) d.ipoib_port = t->d.ipoib_port;
  if (from_table("ipoib-qkey")) d.ipoib_qkey = t->d.ipoib_qkey;
  if (from_table("ipoib-mode")) d.ipoib_mode = t->d.ipoib_mode;
  if (from_table("netdev")) d.netdev = t->d.netdev;
  if (from_table("netdev-port")) d.netdev_port = t->d.netdev_port;
  return d;
}

// The devices: --device values if given, else the config's tables, else
// one embedded simhca; names, sockets and state directories filled in.
Result<void> resolve_devices(const CLI::App& app, Options& o, const std::vector<std::string>& specs,
                             const std::vector<DeviceTable>& tables) {
  std::vector<DeviceOptions> more;
  if (!specs.empty()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      OPENIB_TRY_ASSIGN(auto d, parse_device_spec(specs[i]));
      if (i == 0) {
        o.device = d.spec;
        auto first = first_device(app, o, nullptr);
        first.name = d.name;
        o.devices.push_back(std::move(first));
      } else {
        more.push_back(std::move(d));
      }
    }
  } else {
    o.devices.push_back(first_device(app, o, tables.empty() ? nullptr : &tables[0]));
    for (size_t i = 1; i < tables.size(); ++i) more.push_back(tables[i].d);
  }
  for (auto& d : more) o.devices.push_back(std::move(d));
  o.device = o.devices[0].spec;
  for (size_t i = 0; i < o.devices.size(); ++i) {
    DeviceOptions& d = o.devices[i];
    if (d.name.empty()) d.name = fmt::format("simhca{}", i);
    if (!proto::valid_device_name(d.name))
      return err(EINVAL, "device name '{}': 1 to 31 of A-Z, a-z, 0-9 and _", d.name);
    for (size_t j = 0; j < i; ++j)
      if (o.devices[j].name == d.name) return err(EINVAL, "two devices named '{}'", d.name);
    if (!d.spec.empty() && !d.spec.starts_with("vfio:") && !d.spec.starts_with("vfio-user:"))
      return err(EINVAL, "device '{}': --device must be vfio:<PCI address>, vfio-user:<socket> or embedded", d.name);
    if (!d.spec.empty() && (!d.cable.empty() || !d.pcap.empty() || !d.faults.empty() || !d.simhca_args.empty()))
      return err(EINVAL, "device '{}': cable, pcap, faults and simhca-arg apply to an embedded simhca only", d.name);
    d.socket = i == 0 ? o.socket : proto::device_socket(o.socket, d.name);
    d.simhca_socket = o.run_dir + (i == 0 ? std::string("/simhca.sock") : "/simhca-" + d.name + ".sock");
    d.state_dir = o.state_dir.empty() || i == 0 ? o.state_dir : o.state_dir + "/" + d.name;
  }
  return ok();
}

}  // namespace

ParseOutcome parse_options(int argc, char** argv) {
  Options o;
  std::string mode_text = "0666", umad_users = "none";
  std::vector<std::string> specs;
  std::vector<DeviceTable> tables;
  CLI::App app{"ibd: the openib daemon; owns HCAs and serves clients over UNIX sockets (docs/operations.md)"};
  add_daemon_flags(app, o, mode_text, umad_users);
  add_device_flags(app, o, specs);
  try {
    app.parse(argc, argv);
    if (!o.config.empty()) {
      if (auto r = apply_toml(o.config, app, tables); !r) {
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
  if (auto r = resolve_devices(app, o, specs, tables); !r) {
    std::fprintf(stderr, "ibd: %s\n", r.error().message.c_str());
    return {std::nullopt, 2};
  }
  return {std::move(o), 0};
}

}  // namespace openib::ibd
