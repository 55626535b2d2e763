// simhca: the emulated HCA as a vfio-user server (docs/simhca.md §13).
//
//   simhca [--log LEVEL] [--spin-us N] [--spin-mode yield|pause] [--contended-us N] [--helper] [--start-delay-ms N] DEVICE [--device DEVICE]...
//   DEVICE: --socket PATH [--guid HEX] [--cmd-delay-ms N]
//           [--port1 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port1 SHM=FILE,END=A|B[,CRC=always|offload]
//            | --port1 IFACE=NAME (with --link-layer ethernet)]
//           [--pcap FILE] [--faults drop=P,dup=P,reorder=P,corrupt=P,seed=N]
//           [--ports 1|2] [--port2 LOCAL=ADDR:PORT,PEER=ADDR:PORT | --port2 IFACE=NAME] [--node-desc TEXT]
//           [--link-layer infiniband|ethernet]
//
// One process serves one device, or several (`--device` starts the next
// one's options): each its own vfio-user socket, client and state, as
// separate HCAs in one host. One thread, the device loop (§13), runs
// everything every device does: commands (after the doorbell write is
// answered, §5.3), UAR doorbells (it scans the watched pages itself,
// §12.5), packets from a shared-memory cable (taken from the ring in
// place) or from a UDP cable (handed over by the link's receive thread
// through an inbox), and the data path's timers. Busy, it polls all of
// them, yielding the CPU between empty passes; idle for --spin-us, it
// sleeps in futex_waitv on the UAR pages' SCANNER_SLEEPING, the cables'
// RX_SLEEPING and a private word that the UDP receive threads and the
// socket watchers (a thread per device blocked in epoll on its vfio-user
// socket) bump. Two devices cabled to each other in one process pass a
// packet from one to the other within one turn of the loop, without a
// wake-up or a context switch (§13 "Several devices").
//
// The pieces, each in its own file: options.cpp (the command line),
// packet_inbox.hpp, socket_watch.hpp, device.hpp (one device's pass),
// device_loop.cpp (the loop), helper.hpp (the helper thread).
#include <chrono>
#include <csignal>
#include <memory>
#include <thread>
#include <vector>

#include "sim/simhca/device_loop.hpp"
#include "sim/simhca/options.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_fatal = 0;
void on_signal(int) { g_stop = 1; }
void on_fatal_signal(int) { g_fatal = 1; }

}  // namespace

int main(int argc, char** argv) {
  using namespace openib::simhca;
  using namespace openib::simhca::server;
  Options opts;
  if (auto exit = parse_options(argc, argv, opts)) return *exit;

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Test hook (§11.4): SIGUSR1 raises a device fatal error on every device,
  // as a write to SIM_FAULT would.
  struct sigaction fa{};
  fa.sa_handler = on_fatal_signal;
  ::sigaction(SIGUSR1, &fa, nullptr);
  // --start-delay-ms: a device slow to appear (no socket yet), for tests of
  // a driver that waits for it; SIGTERM still ends the wait.
  for (auto waited = std::chrono::milliseconds(0); waited < opts.start_delay && !g_stop;
       waited += std::chrono::milliseconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (g_stop) return 0;

  DeviceWaiter waiter(opts.spin, opts.spin_yield, opts.contended);
  const bool shared = opts.devices.size() > 1;
  std::vector<std::unique_ptr<Device>> devs;
  for (DeviceConfig& c : opts.devices) {
    devs.push_back(std::make_unique<Device>(std::move(c), waiter, shared));
    if (!devs.back()->start()) return 1;
  }
  const int rc = run_device_loop(devs, waiter, opts.use_helper, g_stop, g_fatal);
  for (auto& d : devs) d->finish();
  return rc;
}
