// rsockets (<rdma/rsocket.h>) over our librdmacm.so.1 and libibverbs.so.1:
// stream sockets on RC connections, wire-compatible with rdma-core's
// (wire.hpp), written against the public verbs and RDMA CM calls only, as
// an application would (docs/library.md "rsockets").
//
// Each socket is a Socket, found by its number: an eventfd of its own
// (unique in the process, pollable, and signalled when the socket's state
// changes). The CM's events are handled by one service thread per process
// (service.cpp): it drives connections (address, route, connect), accepts
// (a listener's connections share its event channel, hence its ibd
// context), and notes disconnects. The data path runs in the caller's
// thread: each call polls the socket's CQ (transfer.cpp) and, when it must
// wait, poll()s the CQ's completion channel and the socket's eventfd.
//
// Locks: the service lock (svc_mu, service.cpp) before a socket's mu, never
// the other way round.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <poll.h>
#include <sys/uio.h>

#include "abi/rdmacm/rsocket/wire.hpp"

namespace openib::rsocket {

enum class State {
  kInit,
  kBound,
  kListening,
  kResolvingAddr,
  kResolvingRoute,
  kConnecting,    // REQ sent
  kAccepting,     // REP sent, waiting for the RTU (passive side, before raccept)
  kConnected,     // readable/writable say which directions are open
  kConnectError,  // err says why
  kDisconnected,  // both directions closed, the QP flushed or about to be
  kError,         // the QP failed (err = EIO) or the peer broke the protocol
};

// An event channel and how many sockets' ids are on it: a listener shares
// its own with every connection it accepts.
struct ChannelRef {
  rdma_event_channel* ch = nullptr;
  ~ChannelRef();
};

// A riomap()ed buffer: where the peer may write (PROT_WRITE, announced in
// the peer's iomap entry `index`) or a local registration (PROT_NONE).
struct IoMapping {
  void* buf = nullptr;
  size_t len = 0;
  uint64_t offset = 0;
  ibv_mr* mr = nullptr;
  int index = -1;     // the peer's iomap entry, -1 for PROT_NONE
  bool sent = false;  // announced
};

struct Datagram;  // datagram.hpp

struct Socket {
  int fd = -1;  // the number the application uses: an eventfd
  int domain = AF_INET;
  std::mutex mu;
  State state = State::kInit;
  bool readable = false, writable = false;
  bool established = false;  // ever connected
  int err = 0;               // SO_ERROR
  int file_flags = 0;        // rfcntl F_GETFL/F_SETFL
  int waiters = 0;           // threads in wait()
  bool closed = false;       // rclose()d: a thread that waited in it finds EBADF
  int retries = 0;           // address/route resolutions timed out

  // Options (rsetsockopt), copied to the sockets a listener accepts.
  uint32_t sbuf_size = 0, rbuf_size = 0;
  uint16_t sq_size = 0, rq_size = 0, sq_inline = 0;
  uint32_t target_iomap_size = 0;
  uint32_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;  // bit per option set
  int keepalive_time = 7200;

  // CM.
  std::shared_ptr<ChannelRef> channel;
  rdma_cm_id* id = nullptr;
  int backlog = 0;
  std::deque<std::shared_ptr<Socket>> accept_queue;  // listener: connected, not yet raccept()ed
  std::vector<std::shared_ptr<Socket>> accepting;     // listener: REP sent
  std::weak_ptr<Socket> listener;                     // accepting: whose

  // The endpoint (endpoint.cpp).
  ibv_comp_channel* cch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  bool armed = false;
  uint8_t* sbuf = nullptr;    // send staging ring, then kCtrlSlots Sge slots
  uint8_t* target = nullptr;  // target SGL (kSglEntries Sge), then the iomap
  uint8_t* rbuf = nullptr;    // receive ring
  ibv_mr *smr = nullptr, *tmr = nullptr, *rmr = nullptr;
  bool peer_swapped = false;  // peer of the other byte order

  // Sending.
  uint32_t sqe_avail = 0;
  uint32_t sbuf_avail = 0, sbuf_head = 0;
  uint16_t sseq_no = 0, sseq_comp = 0;
  uint32_t target_sge = 0;
  // Where our data goes: entry 0 from the peer's ConnData, then each entry
  // the peer writes into our target SGL, copied here once its SGL message
  // has completed (the memory itself is the peer's to write: never ours).
  Sge send_target[kSglEntries]{};
  uint32_t next_sgl = 1;  // the entry the peer's next SGL message fills
  uint32_t ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
  Sge remote_sgl{};    // the peer's target SGL, where our receive buffers go
  uint32_t remote_sge = 1;
  Sge remote_iomap{};  // the peer's iomap (length = entries)
  std::vector<IoMapping> iomaps;

  // Receiving.
  std::deque<uint32_t> rmsg;  // lengths of data messages received, not yet read
  uint64_t rmsg_bytes = 0;
  uint32_t rbuf_offset = 0, rbuf_avail = 0, rbuf_free_offset = 0;
  uint16_t rseq_no = 0, rseq_comp = 0;
  uint32_t recv_missing = 0;  // receives consumed and not yet posted again

  // A datagram socket's state (SOCK_DGRAM; datagram.hpp); null for a stream.
  std::unique_ptr<Datagram> dg;

  Socket() = default;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();  // closes fd

  Sge* target_sgl() { return reinterpret_cast<Sge*>(target); }
  IomapEntry* target_iomap() { return reinterpret_cast<IomapEntry*>(target + kSglEntries * sizeof(Sge)); }
  bool nonblocking(int msg_flags) const;
  bool has_endpoint() const;  // queues exist: buffer and queue sizes are fixed
};

using SocketPtr = std::shared_ptr<Socket>;

// ---- registry and waiting (service.cpp) ----
SocketPtr find(int fd);  // null with errno EBADF
SocketPtr make_socket(int domain, const Socket* inherit);
void add_socket(const SocketPtr& s);
void watch_channel(const std::shared_ptr<ChannelRef>& c);  // the service thread polls it
void signal(Socket& s);  // wakes the socket's waiters and rpoll()s
// Blocks the caller (s.mu held through `lk`, released while waiting) until
// something happens to the socket or timeout_ms (-1: 100 ms slices, for
// ever) passes. 0, or -1 with errno EINTR.
int wait(Socket& s, std::unique_lock<std::mutex>& lk, int timeout_ms = -1);
// The fds wait() sleeps on for the socket: its eventfd first, then its
// completion channels.
void add_wait_fds(Socket& s, std::vector<pollfd>& fds);
// The service thread reads the datagram socket's UDP socket (datagram.cpp's
// ds_udp_input) whenever it is readable.
void watch_udp(const SocketPtr& s);
void unwatch_udp_locked(const Socket& s);  // closing (the service lock held): no longer
// The service lock, for closing.
std::unique_lock<std::mutex> service_lock();
void forget(int fd);
// A non-blocking call found nothing to do: every 64th time in a row the
// thread yields its CPU, so that a program spinning on EAGAIN (rstream's
// default mode) leaves the service thread and the device emulation, which
// share two CPUs with it here, their turn.
void idle_spin();

// ---- datagram sockets (datagram.cpp), s.mu held unless said ----
int ds_open(Socket& s, int domain);  // the UDP socket: 0, or an errno
int ds_bind(Socket& s, const sockaddr* addr, socklen_t len);
int ds_connect(Socket& s, const sockaddr* addr, socklen_t len);
int ds_name(Socket& s, sockaddr* addr, socklen_t* len, bool peer);
int ds_shutdown(Socket& s, int how);
// One datagram of the iovecs' bytes, to `to` or the connected peer.
ssize_t ds_send(Socket& s, std::unique_lock<std::mutex>& lk, const iovec* iov, int n, int flags, const sockaddr* to,
                socklen_t tolen);
// The next datagram into the iovecs (the rest of it discarded, *truncated
// says so), its source in from/fromlen.
ssize_t ds_recv(Socket& s, std::unique_lock<std::mutex>& lk, const iovec* iov, int n, int flags, sockaddr* from,
                socklen_t* fromlen, bool* truncated);
bool ds_process(Socket& s);
bool ds_arm(Socket& s);
short ds_revents(Socket& s, short events);
void ds_wait_fds(Socket& s, std::vector<pollfd>& fds);
void ds_udp_input(const SocketPtr& s);  // the service thread; takes s.mu

// ---- the endpoint (endpoint.cpp) ----
uint8_t* zeroed_pages(size_t len);  // page-aligned, zeroed, for registration (free())
int create_endpoint(Socket& s);  // 0, or an errno
ConnData conn_data(const Socket& s);
int save_conn_data(Socket& s, const void* data, size_t len);  // 0, or an errno
void destroy_endpoint(Socket& s);

// ---- the data path (transfer.cpp), s.mu held ----
bool process(Socket& s);  // polls the CQ (no system call); whether anything changed
// Before sleeping on the completion channel: consumes its events and
// requests the next; whether a completion came meanwhile (then the
// caller looks again instead of sleeping).
bool arm(Socket& s);
bool can_send(Socket& s);
void fail_socket(Socket& s, int code);
int send_ctrl(Socket& s, Ctrl c);
// Posts one message: an RDMA WRITE (WITH IMM when `with_imm`) of `len`
// bytes at `data` (inline, or staged in the send ring) to raddr/rkey.
int post_message(Socket& s, uint64_t wr_kind, const void* data, uint32_t len, uint64_t raddr, uint32_t rkey,
                 bool with_imm, uint32_t imm_value);
int flush_iomaps(Socket& s);  // announces riomap()ed buffers (iomap.cpp)

// wr_id of sends: kind in the top byte, length below.
constexpr uint64_t kWrData = 1ull << 56, kWrCtrl = 2ull << 56, kWrWrite = 3ull << 56, kWrRecv = 1ull << 63;
constexpr uint64_t kWrDisconnect = 4ull << 56;

}  // namespace openib::rsocket
