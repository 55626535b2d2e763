// simhca's command line (docs/simhca.md §13).
//
//   simhca [--log LEVEL] [--spin-us N] [--spin-mode yield|pause] [--contended-us N] [--helper] DEVICE [--device DEVICE]...
//
// `--device` starts the next device's options, so the arguments are cut at
// each `--device` and every group is parsed by its own CLI11 app: the
// device options go to that group's device, the process-wide ones
// (--log, --spin-us, --spin-mode, --contended-us, --helper) may stand in any group.
#include "sim/simhca/options.hpp"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace openib::simhca::server {

namespace {

constexpr const char* kUsage =
    "usage: simhca [--log LEVEL] [--spin-us N] [--spin-mode yield|pause] [--contended-us N] [--helper] [--start-delay-ms N] DEVICE [--device DEVICE]...\n"
    "  DEVICE: --socket PATH [--guid HEX] [--cmd-delay-ms N]\n"
    "          [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]\n"
    "           | --port1 IFACE=NAME (with --link-layer ethernet)]\n"
    "          [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]\n"
    "          [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port2 IFACE=NAME] [--node-desc TEXT]\n"
    "          [--link-layer infiniband|ethernet] [--eth-mtu BYTES]\n";

// "k1=v1,k2=v2" -> calls f(k, v); false if a pair has no '=' or f refuses it.
template <typename F>
bool parse_pairs(std::string_view s, F&& f) {
  while (!s.empty()) {
    const size_t comma = s.find(',');
    std::string_view kv = s.substr(0, comma);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || !f(kv.substr(0, eq), std::string(kv.substr(eq + 1)))) return false;
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return true;
}

bool parse_rate(const std::string& v, double& out) {
  char* end = nullptr;
  out = std::strtod(v.c_str(), &end);
  return end != v.c_str() && *end == '\0' && out >= 0 && out <= 1;
}

bool parse_u64(const std::string& s, int base, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s.c_str(), &end, base);
  return errno == 0 && end != s.c_str() && *end == '\0';
}

// A refused value: CLI11 reports it and parse_options() prints the usage.
void require(bool ok, const std::string& what) {
  if (!ok) throw CLI::ValidationError(what);
}

// §13, §16.2 IFACE=NAME: a host interface as the cable end (AF_PACKET,
// docs/cables.md "Host interfaces"); alone in its SPEC.
void parse_iface(const std::string& opt, const std::string& name, bool others,
                 std::optional<sim::PacketLinkOptions>& out) {
  require(!others, opt + ": IFACE= stands alone (no LOCAL=, PEER=, SHM=, END=, CRC=)");
  if (auto r = sim::check_iface_name(name); !r) require(false, opt + ": " + r.error().str());
  sim::PacketLinkOptions po;
  po.name = opt.substr(2);  // "port1", "port2"
  po.iface = name;
  out = po;
}

// §13 --port1: the port's cable end, UDP, shared memory or a host interface.
void parse_port1(const std::string& v, DeviceConfig& c) {
  sim::UdpLinkOptions lo;
  sim::ShmLinkOptions so;
  lo.name = so.name = "port1";
  bool shm = false, end_given = false, others = false;
  std::optional<std::string> iface;
  require(parse_pairs(v, [&](std::string_view k, std::string x) {
            if (k == "IFACE") {
              iface = x;
              return true;
            }
            others = true;
            if (k == "LOCAL") lo.local = x;
            else if (k == "PEER") lo.peer = x;
            else if (k == "SHM") shm = true, so.path = x;
            else if (k == "END" && x.size() == 1) end_given = true, so.end = x[0];
            else if (k == "CRC" && (x == "always" || x == "offload")) so.crc_offload = x == "offload";
            else return false;
            return true;
          }),
          "--port1: LOCAL=ADDR:PORT,PEER=ADDR:PORT, SHM=FILE,END=A|B[,CRC=always|offload] or IFACE=NAME");
  if (iface) return parse_iface("--port1", *iface, others, c.port1_iface);
  require(shm == end_given, "--port1: SHM= and END= go together");
  if (shm) c.port1_shm = so;
  else c.port1 = lo;
}

// §13 --port2: port 2's UDP cable end, or a host interface.
void parse_port2(const std::string& v, DeviceConfig& c) {
  sim::UdpLinkOptions lo;
  lo.name = "port2";
  bool others = false;
  std::optional<std::string> iface;
  require(parse_pairs(v, [&](std::string_view k, std::string x) {
            if (k == "IFACE") {
              iface = x;
              return true;
            }
            others = true;
            if (k == "LOCAL") lo.local = x;
            else if (k == "PEER") lo.peer = x;
            else return false;
            return true;
          }),
          "--port2: LOCAL=ADDR:PORT,PEER=ADDR:PORT or IFACE=NAME");
  if (iface) return parse_iface("--port2", *iface, others, c.port2_iface);
  c.port2 = lo;
}

void parse_faults(const std::string& v, DeviceConfig& c) {
  require(parse_pairs(v, [&](std::string_view k, std::string x) {
            if (k == "drop") return parse_rate(x, c.faults.drop);
            if (k == "dup") return parse_rate(x, c.faults.duplicate);
            if (k == "reorder") return parse_rate(x, c.faults.reorder);
            if (k == "corrupt") return parse_rate(x, c.faults.corrupt);
            if (k == "seed") return parse_u64(x, 10, c.faults.seed);
            return false;
          }),
          "--faults: drop=P,dup=P,reorder=P,corrupt=P,seed=N (P in [0, 1])");
}

// A duration in microseconds, 0 .. 1 s.
void add_us_option(CLI::App& app, const std::string& name, std::chrono::microseconds& to, const std::string& help) {
  app.add_option_function<std::string>(
         name,
         [name, &to](const std::string& v) {
           uint64_t us = 0;
           require(parse_u64(v, 10, us) && us <= 1000000, name + ": 0 .. 1000000");
           to = std::chrono::microseconds(us);
         },
         help)
      ->type_name("N");
}

// The process-wide options, in every group's app.
void add_global_options(CLI::App& app, Options& o) {
  app.add_option_function<std::string>("--log", [](const std::string& v) { log::set_level(v); },
                                       "log level (trace, debug, info, warn, error)")
      ->type_name("LEVEL");
  add_us_option(app, "--spin-us", o.spin, "busy-poll this long before the device loop sleeps (microseconds)");
  app.add_option_function<std::string>(
      "--spin-mode",
      [&o](const std::string& v) {
        require(v == "yield" || v == "pause", "--spin-mode: yield or pause");
        o.spin_yield = v == "yield";
      },
      "between empty passes: yield the CPU, or pause")
      ->type_name("yield|pause");
  add_us_option(app, "--contended-us", o.contended,
                "a yield of the device loop longer than this sends it to sleep when idle (microseconds; 0: never)");
  app.add_flag_function(
      "--helper", [&o](int64_t) { o.use_helper = true; },
      "several devices: a second thread runs devices during bulk flows");
  app.add_option_function<std::string>(
      "--start-delay-ms",
      [&o](const std::string& v) {
        uint64_t ms = 0;
        require(parse_u64(v, 10, ms) && ms <= 60000, "--start-delay-ms: 0 .. 60000");
        o.start_delay = std::chrono::milliseconds(ms);
      },
      "wait this long before listening (tests of a driver waiting for its device)")
      ->type_name("N");
}

// One device's options (§13), into `c`.
void add_device_options(CLI::App& app, DeviceConfig& c) {
  app.add_option("--socket", c.path, "the device's vfio-user socket (required)")
      ->type_name("PATH");
  app.add_option_function<std::string>(
      "--guid", [&c](const std::string& v) { require(parse_u64(v, 16, c.opts.caps.node_guid), "--guid: HEX"); },
      "node GUID (hex)")
      ->type_name("HEX");
  app.add_option_function<std::string>(
      "--cmd-delay-ms",
      [&c](const std::string& v) {
        uint64_t ms = 0;
        require(parse_u64(v, 10, ms) && ms <= 60000, "--cmd-delay-ms: 0 .. 60000");
        c.opts.cmd_delay = std::chrono::milliseconds(ms);
      },
      "delay every command's completion (milliseconds)")
      ->type_name("N");
  app.add_option_function<std::string>(
      "--port1", [&c](const std::string& v) { parse_port1(v, c); },
      "port 1's cable end: LOCAL=ADDR:PORT,PEER=ADDR:PORT (UDP), SHM=FILE,END=A|B[,CRC=always|offload] or "
      "IFACE=NAME (a host interface, with --link-layer ethernet)")
      ->type_name("SPEC");
  app.add_option("--pcap", c.pcap_path, "capture port 1's packets (pcap, ERF) into FILE")
      ->type_name("FILE");
  app.add_option_function<std::string>(
      "--faults", [&c](const std::string& v) { parse_faults(v, c); },
      "inject faults on port 1's UDP cable: drop=P,dup=P,reorder=P,corrupt=P,seed=N")
      ->type_name("SPEC");
  app.add_option_function<std::string>(
      "--ports",
      [&c](const std::string& v) {
        uint64_t n = 0;
        require(parse_u64(v, 10, n) && n >= 1 && n <= kMaxPorts, "--ports: 1 or 2");
        c.opts.caps.num_ports = static_cast<uint8_t>(n);
      },
      "number of ports, 1 or 2")
      ->type_name("1|2");
  app.add_option_function<std::string>(
      "--port2", [&c](const std::string& v) { parse_port2(v, c); },
      "port 2's cable end (with --ports 2): LOCAL=ADDR:PORT,PEER=ADDR:PORT or IFACE=NAME")
      ->type_name("SPEC");
  app.add_option_function<std::string>(
      "--link-layer",
      [&c](const std::string& v) {
        require(v == "infiniband" || v == "ethernet", "--link-layer: infiniband or ethernet");
        c.opts.link_layer = v == "ethernet" ? kLinkLayerEthernet : kLinkLayerInfiniBand;
      },
      "the ports' link layer (§16): ethernet makes them RoCEv2 ports on Ethernet cables (UDP or IFACE=)")
      ->type_name("infiniband|ethernet");
  app.add_option_function<std::string>(
      "--eth-mtu",
      [&c](const std::string& v) {
        uint64_t n = 0;
        require(parse_u64(v, 10, n) && n >= kMinEthMtu && n <= kMaxEthMtu, "--eth-mtu: 576 .. 9000");
        c.opts.eth_mtu = static_cast<uint16_t>(n);
      },
      "an Ethernet port's IP MTU (§16.1, default 1500): its active MTU is the largest IBA MTU a "
      "RoCEv2 packet of which fits (1500: 1024; 4192 and up, jumbo frames: 4096)")
      ->type_name("BYTES");
  app.add_option("--node-desc", c.opts.node_desc, "NodeDescription (IBA 14.2.5.2)")
      ->type_name("TEXT");
}

}  // namespace

std::optional<int> parse_options(int argc, char** argv, Options& out) {
  // The groups of arguments, one per device (`--device` starts the next).
  std::vector<std::vector<std::string>> groups(1);
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--device") groups.emplace_back();
    else groups.back().emplace_back(argv[i]);
  }
  out.devices.assign(groups.size(), DeviceConfig{});
  for (size_t g = 0; g < groups.size(); ++g) {
    CLI::App app{"simhca: the emulated HCA, one or more PCI functions served over vfio-user "
                 "(docs/simhca.md §13). --device starts the next device's options.",
                 "simhca"};
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.footer(kUsage);
    add_global_options(app, out);
    add_device_options(app, out.devices[g]);
    std::vector<std::string> args(groups[g].rbegin(), groups[g].rend());  // CLI11 takes them reversed
    try {
      app.parse(args);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "simhca: %s\n%s", e.what(), kUsage);
      return 2;
    }
  }
  for (const DeviceConfig& c : out.devices) {
    const bool eth = c.opts.link_layer == kLinkLayerEthernet;
    const char* bad = c.path.empty()                                            ? "every device needs --socket"
                      : (c.port2 || c.port2_iface) && c.opts.caps.num_ports < 2 ? "--port2 needs --ports 2"
                      : c.port1_shm && eth ? "--link-layer ethernet needs a UDP cable (LOCAL=,PEER=) or IFACE=, not SHM="
                      : (c.port1_iface || c.port2_iface) && !eth
                          ? "IFACE= (a host interface) carries Ethernet frames: it needs --link-layer ethernet"
                          : nullptr;
    if (bad) {
      std::fprintf(stderr, "simhca: %s\n%s", bad, kUsage);
      return 2;
    }
  }
  return std::nullopt;
}

}  // namespace openib::simhca::server
