// ibd's configuration (docs/operations.md): command-line flags (CLI11) over
// an optional TOML file (toml++); a flag given on the command line wins.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "ibd/quota.hpp"

namespace openib::ibd {

// One device ibd serves (docs/operations.md "Several devices"): from a
// `--device` flag or a `[[device]]` table of the config file; the first
// one also from the per-device flags (--cable, --lid, --ipoib, ...).
struct DeviceOptions {
  std::string name;  // the clients' name for it (OPENIB_DEVICE); default simhca<i>
  std::string spec;  // "vfio:<PCI>" / "vfio-user:<socket>"; empty: an embedded simhca
  std::string cable, pcap, faults;       // passed to the embedded simhca
  std::vector<std::string> simhca_args;  // more arguments for it
  uint16_t lid = 1;  // static port-1 setup (SET_PORT); 0: leave the port to an SM
  std::string ipoib;  // IPoIB's TAP interface (empty: none), P_Key, port, Q_Key
  uint16_t ipoib_pkey = 0xFFFF;
  uint8_t ipoib_port = 1;
  uint32_t ipoib_qkey = 0x0b1b;
  std::string ipoib_mode = "datagram";  // or "connected" (RFC 4755)
  std::string netdev;  // an Ethernet port's netdev, a TAP (empty: none), and its port
  uint8_t netdev_port = 1;
  // Derived: its client socket (the first device's is --socket, the others'
  // proto::device_socket beside it), its embedded simhca's socket, its saved
  // state (none when empty).
  std::string socket, simhca_socket, state_dir;
  bool embedded() const { return spec.empty(); }
};

struct Options {
  std::string device;        // "vfio:<PCI>" / "vfio-user:<socket>"; empty: embedded simhca
  std::string socket = "/run/ibd/ibd.sock";
  mode_t socket_mode = 0666;
  std::string socket_group;  // empty: the daemon's group
  std::string run_dir;       // empty: the socket's directory
  // Saved state (the path cache, docs/sa.md "Saved to disk"): empty gives
  // /var/lib/openib for the default socket, else the socket's directory;
  // "none": nothing is saved or loaded.
  std::string state_dir;
  // The shared path table (docs/sa.md "Shared table"): slots, 0 for none.
  uint32_t path_table_slots = 65536;
  // IPoIB over a TAP interface (docs/ipoib.md): its name (empty: off), P_Key, port.
  std::string ipoib;
  uint16_t ipoib_pkey = 0xFFFF;
  uint8_t ipoib_port = 1;
  // The Q_Key ibd creates the broadcast group with when the SA has none
  // (docs/ipoib.md "Security": bit 31 set, a controlled Q_Key no
  // unprivileged client can send with).
  uint32_t ipoib_qkey = 0x0b1b;
  // IPoIB's mode at start (docs/ipoib.md "Connected mode"): "datagram" or
  // "connected"; `ibdctl ipoib mode` changes it at run time.
  std::string ipoib_mode = "datagram";
  // An Ethernet (RoCE) port's netdev (docs/operations.md "RoCE ports"): the
  // TAP interface's name (empty: none) and the port.
  std::string netdev;
  uint8_t netdev_port = 1;
  // The connection manager (docs/cm.md): CM events ibd keeps for a client
  // that does not read its CM socket before closing it (overrun).
  uint32_t cm_max_queued_events = 65536;
  std::string simhca;        // empty: found next to ibd (simhca_path())
  std::string cable, pcap, faults;  // passed to the embedded simhca
  std::vector<std::string> simhca_args;  // more arguments for it (--guid, --node-desc, ...)
  // Who may open the user-MAD service (docs/operations.md "Privileges"):
  // false (--umad-user-access=none): root and CAP_NET_ADMIN only; true
  // (gmp): every user for GMPs on QP1, QP0 and SMP classes still not.
  bool umad_user_gmp = false;
  uint16_t lid = 1;          // static port setup (SET_PORT) until an SM exists; 0: leave the port
  // Device recovery (docs/operations.md §5): bring-up attempts after a
  // device loss (backoff 100 ms doubling to 5 s) before ibd gives up and
  // exits 1; 0 exits at once, as before recovery existed.
  unsigned restart_limit = 10;
  std::string log = "info";
  std::string config;        // the TOML file read, if any
  Limits limits;             // per client and per uid (quota.hpp)
  // The devices served, in order (at least one): the first from --device
  // (its first value) and the per-device flags above, more from further
  // --device values or the config's [[device]] tables.
  std::vector<DeviceOptions> devices;
};

// Parses argv (and the --config file). std::nullopt with exit_code set
// when the program should exit now (--help, or a usage error, printed).
struct ParseOutcome {
  std::optional<Options> options;
  int exit_code = 0;
};
ParseOutcome parse_options(int argc, char** argv);

// "0666" / "660" / "0o660" -> mode bits (octal, at most 0777).
Result<mode_t> parse_mode(const std::string& s);

// The embedded simhca binary: the build tree's src/sim/simhca/simhca next
// to src/ibd/ibd, or simhca in ibd's own directory, or `simhca` on PATH.
std::string default_simhca_path();

}  // namespace openib::ibd
