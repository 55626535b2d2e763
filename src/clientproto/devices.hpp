// Where each of ibd's devices is served (docs/client-protocol.md §2.1
// "Devices"): one socket per device, as the kernel has one uverbs file per
// device. The daemon's socket (`--socket`, $OPENIB_SOCKET) serves its
// first device; every device, the first included, is also reachable as
// `<dir>/<stem>-<name>.sock` beside it (the first one's is a symlink to
// the daemon's socket). Listing the devices is listing those names, as
// rdma-core lists /sys/class/infiniband_verbs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace openib::proto {

// A device name: 1 to 31 of [A-Za-z0-9_], as Linux's IB_DEVICE_NAME_MAX
// (64) and ibv_get_device_name allow, but narrow enough to sit in a path.
bool valid_device_name(std::string_view name);

// The socket of device `name` of the daemon serving `main`:
// "/run/ibd/ibd.sock", "simhca1" -> "/run/ibd/ibd-simhca1.sock".
std::string device_socket(std::string_view main, std::string_view name);

struct DeviceEntry {
  std::string name, socket;
};

// The devices of the daemon serving `main`, by name (sorted): the sockets
// `<stem>-<name>.sock` beside it that accept a connection (a stale socket
// a killed daemon left is skipped). Empty when there are none, also when
// the directory cannot be read.
std::vector<DeviceEntry> list_devices(std::string_view main);

// The socket to open for device `name` (empty: the daemon's first device,
// `main` itself): its device socket; ENODEV when the daemon serving `main`
// has no such device, EINVAL for a name that cannot be one.
Result<std::string> socket_for_device(std::string_view main, std::string_view name);

}  // namespace openib::proto
