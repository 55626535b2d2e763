// PathResolver (include/openib/path.hpp; docs/library.md "Path resolution"):
// the shared path table mapped read-only (src/sa/path_table.hpp), PATH_QUERY
// on the Context's connection for resolve(), and for resolve_async() a
// connection of the resolver's own, non-blocking, one request on the wire
// at a time (docs/client-protocol.md "Request handling"), plus an eventfd
// for completions known at once; fd() is an epoll fd over both.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "lib/objects.hpp"
#include "openib/path.hpp"
#include "sa/path_table.hpp"

namespace openib {

namespace lib {
namespace {

using proto::Op;

proto::PathQueryReq to_req(const PathQuery& q) {
  proto::PathQueryReq r;
  r.port = q.port;
  r.pkey = q.pkey;
  r.flags = q.fresh ? proto::kPathFresh : 0;
  r.dgid = q.dgid.raw;
  return r;
}

PathSource source_of(const proto::PathRep& p) {
  return p.source == proto::kPathFromCache ? PathSource::kIbdCache : PathSource::kSa;
}

class PathResolverImpl final : public PathResolver {
 public:
  explicit PathResolverImpl(ContextImpl& ctx) : ctx_(ctx) {}
  ~PathResolverImpl() override {
    if (table_) ::munmap(const_cast<std::byte*>(table_), table_bytes_);
  }

  Result<void> init();

  Result<PathRecord> resolve(const PathQuery& q) override {
    if (!q.fresh)
      if (auto hit = from_table(q)) return *hit;
    ++socket_queries_;
    OPENIB_TRY_ASSIGN(auto rep, ctx_.conn().call<proto::PathRep>(Op::kPathQuery, to_req(q)));
    return decode_path_record(rep.record);
  }
  std::optional<PathRecord> lookup(const PathQuery& q) override { return from_table(q); }

  Result<uint64_t> resolve_async(const PathQuery& q, uint64_t cookie) override;
  int fd() const override { return ep_.get(); }
  std::vector<PathCompletion> poll() override;
  size_t pending() const override {
    std::lock_guard lock(mu_);
    return queue_.size() + (inflight_ ? 1 : 0) + ready_.size();
  }
  bool has_table() const override { return reader_.has_value(); }
  PathResolverCounters counters() const override {
    return {table_hits_.load(), table_misses_.load(), table_busy_.load(), socket_queries_.load()};
  }

 private:
  struct Req {
    uint64_t id = 0, cookie = 0;
    PathQuery q;
  };

  std::optional<PathRecord> from_table(const PathQuery& q);
  void complete(const Req& r, PathSource s, Result<PathRecord> p);  // under mu_
  void send_next();                                                 // under mu_
  void receive();                                                   // under mu_
  void fail_all(const Error& e);                                    // under mu_
  void watch_writable(bool on);                                     // under mu_

  ContextImpl& ctx_;
  const std::byte* table_ = nullptr;
  size_t table_bytes_ = 0;
  std::optional<sa::PathTableReader> reader_;
  std::unique_ptr<Conn> conn_;  // the resolver's own, HELLO'd, then used non-blocking
  UniqueFd efd_, ep_;
  mutable std::mutex mu_;
  std::deque<Req> queue_;
  std::optional<Req> inflight_;
  uint32_t inflight_seq_ = 0, seq_ = 1;  // HELLO was seq 1
  std::vector<PathCompletion> ready_;
  uint64_t next_id_ = 0;
  bool writable_watch_ = false;
  std::optional<Error> broken_;
  std::atomic<uint64_t> table_hits_{0}, table_misses_{0}, table_busy_{0}, socket_queries_{0};
};

Result<void> PathResolverImpl::init() {
  // The table: EOPNOTSUPP when ibd publishes none (every lookup asks ibd).
  auto t = ctx_.conn().call(Op::kPathTable, proto::encode(proto::Empty{}));
  if (t) {
    OPENIB_TRY_ASSIGN(auto rep, proto::decode<proto::PathTableRep>(t->payload));
    if (t->fds.size() != 1) return err(EPROTO, "PATH_TABLE reply with {} fds, expected 1", t->fds.size());
    struct stat st{};
    if (::fstat(t->fds[0].get(), &st) < 0) return sys_err("fstat of the shared path table");
    if (rep.bytes == 0 || rep.bytes > static_cast<uint64_t>(st.st_size))
      return err(EPROTO, "PATH_TABLE says {} bytes, the memfd has {}", rep.bytes, st.st_size);
    void* p = ::mmap(nullptr, rep.bytes, PROT_READ, MAP_SHARED, t->fds[0].get(), 0);
    if (p == MAP_FAILED) return sys_err("mmap of the shared path table");
    table_ = static_cast<const std::byte*>(p);
    table_bytes_ = rep.bytes;
    OPENIB_TRY_ASSIGN(auto r, sa::PathTableReader::attach(std::span(table_, table_bytes_)));
    reader_.emplace(r);
  } else if (t.error().code != EOPNOTSUPP) {
    return t.take_error();
  }
  // The asynchronous side: its own connection, a management-only HELLO
  // (no UAR, version 1: no status page), then non-blocking.
  OPENIB_TRY_ASSIGN(Conn * c, Conn::connect(ctx_.socket_path()));
  conn_.reset(c);
  conn_->set_timeout(ctx_.timeout_ms());
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  OPENIB_TRY_ASSIGN(Reply hr, conn_->call(Op::kHello, proto::encode(hello)));
  (void)hr;
  const int s = conn_->socket_fd();
  if (::fcntl(s, F_SETFL, ::fcntl(s, F_GETFL) | O_NONBLOCK) < 0) return sys_err("O_NONBLOCK on the resolver's socket");
  efd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!efd_) return sys_err("eventfd");
  ep_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep_) return sys_err("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, efd_.get(), &ev) < 0) return sys_err("epoll_ctl (eventfd)");
  ev.events = EPOLLIN | EPOLLRDHUP;
  if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, s, &ev) < 0) return sys_err("epoll_ctl (socket)");
  return ok();
}

std::optional<PathRecord> PathResolverImpl::from_table(const PathQuery& q) {
  if (!reader_) return std::nullopt;
  sa::PathTableEntry e;
  switch (reader_->find(sa::PathTableKey{q.port, q.pkey, q.dgid.raw}, &e)) {
    case sa::PathTableReader::Lookup::kHit: {
      ++table_hits_;
      PathRecord p = decode_path_record(e.record);
      p.stale = e.stale;
      return p;
    }
    case sa::PathTableReader::Lookup::kBusy: ++table_busy_; return std::nullopt;
    case sa::PathTableReader::Lookup::kMiss: break;
  }
  ++table_misses_;
  return std::nullopt;
}

void PathResolverImpl::complete(const Req& r, PathSource s, Result<PathRecord> p) {
  ready_.push_back(PathCompletion{r.id, r.cookie, s, std::move(p)});
  const uint64_t one = 1;
  (void)!::write(efd_.get(), &one, sizeof one);
}

Result<uint64_t> PathResolverImpl::resolve_async(const PathQuery& q, uint64_t cookie) {
  std::lock_guard lock(mu_);
  const Req r{++next_id_, cookie, q};
  if (!q.fresh)
    if (auto hit = from_table(q)) {
      complete(r, PathSource::kTable, *hit);
      return r.id;
    }
  if (broken_) {
    complete(r, PathSource::kNone, Error{broken_->code, "ibd: PATH_QUERY: " + broken_->message});
    return r.id;
  }
  queue_.push_back(r);
  send_next();
  return r.id;
}

void PathResolverImpl::watch_writable(bool on) {
  if (on == writable_watch_) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (on ? uint32_t{EPOLLOUT} : 0u);
  if (::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, conn_->socket_fd(), &ev) == 0) writable_watch_ = on;
}

void PathResolverImpl::send_next() {
  while (!inflight_ && !queue_.empty() && !broken_) {
    proto::Header h;
    h.op = static_cast<uint16_t>(Op::kPathQuery);
    h.seq = ++seq_;
    auto sent = proto::send_message(conn_->socket_fd(), h, proto::encode(to_req(queue_.front().q)));
    if (!sent && sent.error().code == EAGAIN) return watch_writable(true);  // sent when the socket drains
    if (!sent) return fail_all(sent.error());
    watch_writable(false);
    ++socket_queries_;
    inflight_ = queue_.front();
    inflight_seq_ = h.seq;
    queue_.pop_front();
  }
}

void PathResolverImpl::fail_all(const Error& e) {
  broken_ = e;
  // A closed socket stays readable: out of fd()'s set, so that an event
  // loop does not spin on it (later lookups complete at once, with `e`).
  ::epoll_ctl(ep_.get(), EPOLL_CTL_DEL, conn_->socket_fd(), nullptr);
  const Error out{e.code, "ibd: PATH_QUERY: " + e.message};
  if (inflight_) complete(*inflight_, PathSource::kNone, out);
  inflight_.reset();
  for (const Req& r : queue_) complete(r, PathSource::kNone, out);
  queue_.clear();
}

void PathResolverImpl::receive() {
  while (inflight_ && !broken_) {
    auto m = proto::recv_message(conn_->socket_fd(), true);
    if (!m && m.error().code == EAGAIN) return;
    if (!m) return fail_all(m.error());
    if (m->header.seq != inflight_seq_ || m->header.op != (static_cast<uint16_t>(Op::kPathQuery) | proto::kReplyBit))
      return fail_all(err(EPROTO, "reply op {:#x} seq {} to PATH_QUERY seq {}", m->header.op, m->header.seq,
                          inflight_seq_));
    const Req r = *inflight_;
    inflight_.reset();
    auto rv = proto::decode_reply(m->body);
    if (!rv) return fail_all(rv.error());
    if (rv->status != 0) {
      complete(r, PathSource::kNone,
               err(rv->status, "ibd: PATH_QUERY: {}",
                   std::string(reinterpret_cast<const char*>(rv->payload.data()), rv->payload.size())));
    } else if (auto rep = proto::decode<proto::PathRep>(rv->payload); !rep) {
      return fail_all(rep.error());
    } else {
      complete(r, source_of(*rep), decode_path_record(rep->record));
    }
    send_next();
  }
}

std::vector<PathCompletion> PathResolverImpl::poll() {
  std::lock_guard lock(mu_);
  uint64_t v;
  (void)!::read(efd_.get(), &v, sizeof v);  // before collecting: later completions signal again
  send_next();
  receive();
  if (!inflight_ && !broken_) {
    // Nothing expected: a readable socket now means ibd went (or spoke out of turn).
    auto m = proto::recv_message(conn_->socket_fd(), true);
    if (!m && m.error().code != EAGAIN) fail_all(m.error());
    else if (m) fail_all(err(EPROTO, "unexpected message op {:#x} from ibd", m->header.op));
  }
  return std::exchange(ready_, {});
}

}  // namespace
}  // namespace lib

Result<std::unique_ptr<PathResolver>> PathResolver::open(Context& ctx) {
  auto r = std::make_unique<lib::PathResolverImpl>(static_cast<lib::ContextImpl&>(ctx));
  OPENIB_TRY(r->init());
  return std::unique_ptr<PathResolver>(std::move(r));
}

}  // namespace openib
