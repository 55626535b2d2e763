// The measurement core of openib-perf (perftest's ib_send/write/read_bw/lat
// on libopenib), usable in process (bench/): build the resources of one
// side, connect two sides' RC QPs, then run a test on each side (each in
// its own thread or process) and format perftest-like tables.
//
//   auto a = perf::make_side(ctxA, 65536, 128), b = perf::make_side(ctxB, 65536, 128);
//   perf::connect(*a, b->dest(), port, Mtu::k1024); perf::connect(*b, a->dest(), ...);
//   perf::Params p{perf::Test::kSend, 8, 1000};
//   perf::prepare(p, *a); perf::prepare(p, *b);              // receives for SEND tests
//   std::thread t([&] { perf::run_lat(p, *b, false); });     // the passive side
//   auto r = perf::run_lat(p, *a, true); t.join();           // the initiator
//   perf::print_lat_header(); perf::print_lat(*r);
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "openib/verbs.hpp"

namespace openib::perf {

enum class Test { kSend, kWrite, kRead };

// One side: an RC QP, one CQ for both queues, one MR of 2 × max_size
// bytes: [0, max_size) is the target the peer writes/reads/sends into,
// [max_size, 2 × max_size) the local source.
struct Side {
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<Mr> mr;
  size_t max_size = 0;
  uint16_t lid = 0;
  uint32_t psn = 0;
  uint64_t remote_addr = 0;  // the peer's target area
  uint32_t remote_rkey = 0;
  uint32_t posted_recvs = 0;  // receives outstanding
  uint32_t depth = 0;
  uint8_t max_rd_atomic = 1, max_dest_rd_atomic = 1;

  struct Dest {
    uint16_t lid = 0;
    uint32_t qpn = 0, psn = 0, rkey = 0;
    uint64_t addr = 0;
  };
  Dest dest() const;
  uint8_t* target() const { return static_cast<uint8_t*>(mr->addr()); }
  uint8_t* source() const { return target() + max_size; }
};

// depth: send and receive queue sizes (the bandwidth window is ≤ depth);
// max_inline: SENDs and WRITEs up to this size (and the device's limit)
// go inline, 0 for none (perftest's -I).
Result<std::unique_ptr<Side>> make_side(Context& ctx, size_t max_size, uint32_t depth, uint8_t port = 1,
                                        uint32_t max_inline = 64);
// RESET→INIT→RTR→RTS towards the peer (remote access for WRITE/READ).
Result<void> connect(Side& s, const Side::Dest& peer, uint8_t port, Mtu mtu);

struct Params {
  Test test = Test::kSend;
  size_t size = 8;
  uint64_t iters = 1000;
  uint32_t window = 64;  // bandwidth: WRs outstanding
};

struct LatResult {  // microseconds
  size_t bytes = 0;
  uint64_t iters = 0;
  double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;
};
struct BwResult {
  size_t bytes = 0;
  uint64_t iters = 0;
  double bw_peak = 0, bw_avg = 0;  // MB/sec, MB = 2^20 bytes (perftest's default)
  double msg_rate = 0;             // Mpps
};

// Posts the receives a SEND test needs on this side (both sides, before
// the two sides synchronize and start).
Result<void> prepare(const Params& p, Side& s);
// Both sides call run_lat concurrently, `initiator` on exactly one. SEND
// and WRITE latency: ping-pong, half the round trip per iteration
// (ib_send_lat; ib_write_lat polls the last byte of its target area).
// READ: the initiator's READ round trip; the passive side returns at once.
// The passive side's result is its own view (SEND/WRITE) or empty.
Result<LatResult> run_lat(const Params& p, Side& s, bool initiator);
// Bandwidth: the initiator keeps `window` WRs outstanding. SEND: the
// passive side receives `iters` messages and returns; WRITE/READ: the
// passive side returns at once (the caller keeps it alive until the
// initiator finished).
Result<BwResult> run_bw(const Params& p, Side& s, bool initiator);

void print_lat_header();
void print_lat(const LatResult& r);
void print_bw_header();
void print_bw(const BwResult& r);
const char* test_name(Test t);

}  // namespace openib::perf
