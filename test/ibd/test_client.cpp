// ibd-test-client: a well-behaved libopenib client with live objects, for
// the kill-loop test (test_kill_loop.cpp) and by hand.
//
//   ibd-test-client [--socket PATH] [--max-seconds N] [--mode MODE]
//
// Opens a Context, a PD, a 64 KiB MR, a CQ (with a completion channel) and
// an RC QP, brings the QP to RTS (connected to itself: dest = its own QPN
// and LID), posts a receive; then an SRQ with receives posted and a second
// RC QP on it (at RTS, connected to itself), an AH (to its own LID), and a
// user-MAD agent (umad_open_port + umad_register through ibd's user-MAD
// service, docs/umad.md; needs root or CAP_NET_ADMIN), so that a client
// that dies holds every kind of object; prints "ready CLIENT_ID QPN" on
// stdout, then
// according to MODE until --max-seconds (default 60) pass:
//   hold          polls its CQ with 1 ms naps (the kill-loop test)
//   control-loop  allocates and frees a PD, again and again
//   wait-event    arms the CQ and blocks in CompChannel::get_event(-1)
//   poll-async    polls its CQ and watches async_fd() (poll(2), 10 ms),
//                 fetching the events when it is readable
//   traffic       sends to itself (RC, 64-byte SENDs, one at a time) and
//                 watches async_fd() (1 ms); prints "flowing" once the
//                 first SEND completed; a post failing with ENODEV (the
//                 device lost) stops the sends; on DEVICE_FATAL prints "fatal
//                 NS" (CLOCK_MONOTONIC) and "sent N", then tries ALLOC_PD
//                 and prints its error as "result ..." (the device-recovery
//                 test)
// A mode that meets an error (or a DEVICE_FATAL event) prints
// "result ERRNO MESSAGE" and exits 3. Exit 0 when the time limit passes;
// 1 with a message on stderr if the setup fails.
#include <infiniband/umad.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "rc_link.hpp"

using namespace openib;
using namespace openib::testing;

int main(int argc, char** argv) {
  std::string sock;
  int max_seconds = 60;
  std::string mode = "hold";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--socket" && i + 1 < argc) {
      sock = argv[++i];
    } else if (a == "--max-seconds" && i + 1 < argc) {
      max_seconds = std::atoi(argv[++i]);
    } else if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else {
      std::fprintf(stderr, "usage: ibd-test-client [--socket PATH] [--max-seconds N] [--mode MODE]\n");
      return 2;
    }
  }
  auto side = open_side(sock, 64 * 1024);
  if (!side) {
    std::fprintf(stderr, "ibd-test-client: %s\n", side.error().str().c_str());
    return 1;
  }
  Side& s = **side;
  auto channel = s.ctx->create_comp_channel();
  if (!channel) {
    std::fprintf(stderr, "ibd-test-client: comp channel: %s\n", channel.error().str().c_str());
    return 1;
  }
  auto ecq = s.ctx->create_cq(16, channel->get());
  if (!ecq) {
    std::fprintf(stderr, "ibd-test-client: create_cq: %s\n", ecq.error().str().c_str());
    return 1;
  }
  if (auto r = to_rts(*s.qp, s.qp->qp_num(), s.lid); !r) {
    std::fprintf(stderr, "ibd-test-client: to RTS: %s\n", r.error().str().c_str());
    return 1;
  }
  if (int e = post_recv(*s.qp, *s.mr, 0, 4096, 1); e != 0) {
    std::fprintf(stderr, "ibd-test-client: post_recv: %d\n", e);
    return 1;
  }
  // An SRQ with receives posted, and a QP that receives from it.
  auto srq = s.ctx->create_srq(*s.pd, 16, 1);
  if (!srq) {
    std::fprintf(stderr, "ibd-test-client: create_srq: %s\n", srq.error().str().c_str());
    return 1;
  }
  for (uint64_t i = 0; i < 4; ++i) {
    Sge sge{reinterpret_cast<uint64_t>(s.buf() + 8192 + i * 1024), 1024, s.mr->lkey()};
    RecvWr wr;
    wr.wr_id = 200 + i;
    wr.sg = {&sge, 1};
    if (int e = (*srq)->post_recv(wr); e != 0) {
      std::fprintf(stderr, "ibd-test-client: SRQ post_recv: %d\n", e);
      return 1;
    }
  }
  QpInit on_srq;
  on_srq.send_cq = on_srq.recv_cq = s.cq.get();
  on_srq.srq = srq->get();
  auto srq_qp = s.ctx->create_qp(*s.pd, on_srq);
  if (!srq_qp) {
    std::fprintf(stderr, "ibd-test-client: create_qp on the SRQ: %s\n", srq_qp.error().str().c_str());
    return 1;
  }
  if (auto r = to_rts(**srq_qp, (*srq_qp)->qp_num(), s.lid); !r) {
    std::fprintf(stderr, "ibd-test-client: SRQ QP to RTS: %s\n", r.error().str().c_str());
    return 1;
  }
  AddressVector av;
  av.dlid = s.lid;
  auto ah = s.ctx->create_ah(*s.pd, av);
  if (!ah) {
    std::fprintf(stderr, "ibd-test-client: create_ah: %s\n", ah.error().str().c_str());
    return 1;
  }
  // A user-MAD agent: a PerfMgmt client (no methods, so that any number of
  // these clients can hold one at once).
  if (!sock.empty()) ::setenv("OPENIB_SOCKET", sock.c_str(), 1);
  const int umad_port = umad_open_port(nullptr, 1);
  if (umad_port < 0) {
    std::fprintf(stderr, "ibd-test-client: umad_open_port: %d\n", umad_port);
    return 1;
  }
  if (int agent = umad_register(umad_port, 0x04, 1, 0, nullptr); agent < 0) {
    std::fprintf(stderr, "ibd-test-client: umad_register: %d\n", agent);
    return 1;
  }
  std::printf("ready %u %u\n", s.ctx->client_id(), s.qp->qp_num());
  std::fflush(stdout);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(max_seconds);
  auto result = [](const Error& e) {
    std::printf("result %d %s\n", e.code, e.str().c_str());
    std::fflush(stdout);
    return 3;
  };
  Wc wc[4];
  bool send_posted = false;
  bool lost = false;  // a post said ENODEV: wait for DEVICE_FATAL
  uint64_t sent = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (mode == "hold") {
      s.cq->poll(wc);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else if (mode == "control-loop") {
      auto pd = s.ctx->alloc_pd();
      if (!pd) return result(pd.error());
    } else if (mode == "wait-event") {
      if (auto r = (*ecq)->req_notify(); !r) return result(r.error());
      auto ev = (*channel)->get_event(-1);
      if (!ev) return result(ev.error());
    } else if (mode == "poll-async") {
      s.cq->poll(wc);
      pollfd pf{s.ctx->async_fd(), POLLIN, 0};
      if (::poll(&pf, 1, 10) == 1) {
        auto evs = s.ctx->get_async_events();
        if (!evs) return result(evs.error());
        for (auto& e : *evs)
          if (e.type == AsyncEventType::kDeviceFatal)
            return result(Error{ENODEV, "DEVICE_FATAL event"});
      }
    } else if (mode == "traffic") {
      // After the device is gone nothing completes and posts fail with
      // ENODEV (docs/client-protocol.md §6.2); the async event follows.
      if (!send_posted && !lost) {
        const int e = post_send(*s.qp, *s.mr, 4096, 64, 100);
        if (e != 0 && e != ENODEV) return result(Error{e, "post_send"});
        lost = e == ENODEV;
        send_posted = e == 0;
      }
      const int n = s.cq->poll(wc);
      for (int i = 0; i < n; ++i) {
        if (wc[i].wr_id == 100) {
          send_posted = false;
          if (++sent == 1) {
            std::printf("flowing\n");
            std::fflush(stdout);
          }
        } else if (int e = post_recv(*s.qp, *s.mr, 0, 4096, 1); e == ENODEV) {
          lost = true;
        } else if (e != 0) {
          return result(Error{e, "post_recv"});
        }
      }
      pollfd pf{s.ctx->async_fd(), POLLIN, 0};
      if (::poll(&pf, 1, 1) == 1) {
        auto evs = s.ctx->get_async_events();
        if (!evs) return result(evs.error());
        for (auto& e : *evs) {
          if (e.type != AsyncEventType::kDeviceFatal) continue;
          timespec ts{};
          ::clock_gettime(CLOCK_MONOTONIC, &ts);
          std::printf("fatal %lld\nsent %llu\n", static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec,
                      static_cast<unsigned long long>(sent));
          std::fflush(stdout);
          auto pd = s.ctx->alloc_pd();
          return result(pd ? Error{0, "ALLOC_PD succeeded on a lost device"} : pd.error());
        }
      }
    } else {
      std::fprintf(stderr, "ibd-test-client: unknown mode %s\n", mode.c_str());
      return 2;
    }
  }
  umad_close_port(umad_port);
  (*ah).reset();
  (*srq_qp).reset();
  (*srq).reset();
  (*ecq).reset();
  return 0;
}
