// The client protocol codec and framing (src/clientproto,
// docs/client-protocol.md): byte layouts, exact-length decoding, and the
// SOCK_SEQPACKET transport with SCM_RIGHTS.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "clientproto/messages.hpp"
#include "clientproto/socket.hpp"

using namespace openib;
using namespace openib::proto;

namespace {
std::vector<uint8_t> u8(std::span<const std::byte> b) {
  std::vector<uint8_t> v;
  for (auto x : b) v.push_back(static_cast<uint8_t>(x));
  return v;
}
struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};
}  // namespace

TEST_CASE("header layout: magic, version, op, seq, nfds, little-endian", "[clientproto]") {
  Header h;
  h.op = static_cast<uint16_t>(Op::kCreateQp);
  h.seq = 0x01020304;
  h.nfds = 1;
  std::array<std::byte, kHeaderSize> out;
  encode_header(out, h);
  CHECK(u8(out) == std::vector<uint8_t>{'O', 'I', 'B', 'D', 1, 0, 15, 0, 4, 3, 2, 1, 1, 0, 0, 0});
  auto back = decode_header(out);
  REQUIRE(back.ok());
  CHECK(back->op == h.op);
  CHECK(back->seq == h.seq);
  CHECK(back->nfds == 1);
}

TEST_CASE("header: bad magic, version, reserved bytes, fd count and length are rejected", "[clientproto]") {
  std::array<std::byte, kHeaderSize> good;
  encode_header(good, Header{});
  auto corrupt = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = std::byte{v};
    return decode_header(b);
  };
  CHECK(corrupt(0, 'X').error().code == EPROTO);
  CHECK(corrupt(4, 2).error().code == EPROTO);
  CHECK(corrupt(13, 1).error().code == EPROTO);
  CHECK(corrupt(12, kMaxFds + 1).error().code == EPROTO);
  CHECK(decode_header(std::span(good).first(15)).error().code == EPROTO);
}

TEST_CASE("bodies: fields in visit order, exact length required", "[clientproto]") {
  MapMemRep r{0x11223344, 0x0102030405060708};
  Bytes b = encode(r);
  CHECK(u8(b) == std::vector<uint8_t>{0x44, 0x33, 0x22, 0x11, 8, 7, 6, 5, 4, 3, 2, 1});
  auto back = decode<MapMemRep>(b);
  REQUIRE(back.ok());
  CHECK(back->handle == r.handle);
  CHECK(back->iova == r.iova);
  b.push_back(std::byte{0});
  CHECK(decode<MapMemRep>(b).error().code == EPROTO);
  b.resize(11);
  CHECK(decode<MapMemRep>(b).error().code == EPROTO);
  CHECK(body_size<Empty>() == 0);
  CHECK(decode<Empty>({}).ok());

  ModifyQpReq m;
  m.qp = 7;
  m.attr.mask = 0x1ff;
  m.attr.av.dgid[15] = 0xee;
  m.attr.av.dlid = 0xbeef;
  auto mb = decode<ModifyQpReq>(encode(m));
  REQUIRE(mb.ok());
  CHECK(mb->qp == 7);
  CHECK(mb->attr.mask == 0x1ff);
  CHECK(mb->attr.av.dgid[15] == 0xee);
  CHECK(mb->attr.av.dlid == 0xbeef);
}

// docs/client-protocol.md §12: the multicast and service bodies' layouts.
TEST_CASE("MCAST_JOIN and SERVICE_SET bodies: sizes and offsets as documented", "[clientproto]") {
  CHECK(body_size<McastJoinReq>() == 37);
  CHECK(body_size<McastJoinRep>() == 52);
  CHECK(body_size<McastLeaveReq>() == 17);
  CHECK(body_size<ServiceReq>() == 177);
  CHECK(body_size<ServiceRep>() == 176);
  McastJoinReq j;
  j.port = 2;
  j.join_state = 4;
  j.pkey = 0x8001;
  j.flags = kMcastCreate;
  j.mgid[0] = 0xff;
  j.qkey = 0x11223344;
  j.hop_limit = 9;
  const auto b = u8(encode(j));
  CHECK(b[0] == 2);
  CHECK(b[1] == 4);
  CHECK(b[2] == 0x01);
  CHECK(b[3] == 0x80);
  CHECK(b[4] == 1);
  CHECK(b[8] == 0xff);
  CHECK(b[24] == 0x44);
  CHECK(b[36] == 9);
  auto back = decode<McastJoinReq>(encode(j));
  REQUIRE(back.ok());
  CHECK(back->qkey == 0x11223344);
  CHECK(back->mgid == j.mgid);
}

TEST_CASE("replies: status then payload or message", "[clientproto]") {
  Bytes ok_reply = encode_reply(0, encode(HandleRep{9}));
  auto v = decode_reply(ok_reply);
  REQUIRE(v.ok());
  CHECK(v->status == 0);
  CHECK(decode<HandleRep>(v->payload)->handle == 9);
  Bytes e = encode_error_reply(ENOENT, "no such QP");
  auto ev = decode_reply(e);
  REQUIRE(ev.ok());
  CHECK(ev->status == ENOENT);
  CHECK(std::string(reinterpret_cast<const char*>(ev->payload.data()), ev->payload.size()) == "no such QP");
  CHECK(decode_reply(Bytes(3)).error().code == EPROTO);
  Bytes negative = encode_reply(-1, {});
  CHECK(decode_reply(negative).error().code == EPROTO);
}

TEST_CASE("socket: a message with fds arrives whole; the fds are live", "[clientproto]") {
  Pair p;
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  UniqueFd r(pipefd[0]), w(pipefd[1]);
  Header h;
  h.op = static_cast<uint16_t>(Op::kMapMem);
  h.seq = 5;
  Bytes body = encode(MapMemReq{4096});
  int fds[] = {w.get()};
  REQUIRE(send_message(p.a.get(), h, body, fds).ok());
  auto m = recv_message(p.b.get());
  REQUIRE(m.ok());
  CHECK(m->header.seq == 5);
  CHECK(m->header.nfds == 1);
  REQUIRE(m->fds.size() == 1);
  CHECK(decode<MapMemReq>(m->body)->length == 4096);
  REQUIRE(::write(m->fds[0].get(), "x", 1) == 1);  // the received fd is the pipe's write end
  char c = 0;
  REQUIRE(::read(r.get(), &c, 1) == 1);
  CHECK(c == 'x');
}

TEST_CASE("socket: oversized, short, fd-count mismatch and closed peer are errors", "[clientproto]") {
  Pair p;
  std::vector<char> big(kMaxMessage + 100, 0);
  REQUIRE(::send(p.a.get(), big.data(), big.size(), 0) == static_cast<ssize_t>(big.size()));
  CHECK(recv_message(p.b.get()).error().code == EPROTO);

  REQUIRE(::send(p.a.get(), "OIBD", 4, 0) == 4);
  CHECK(recv_message(p.b.get()).error().code == EPROTO);

  // Header says 2 fds, none attached.
  std::array<std::byte, kHeaderSize> head;
  Header h;
  h.nfds = 2;
  encode_header(head, h);
  REQUIRE(::send(p.a.get(), head.data(), head.size(), 0) == kHeaderSize);
  CHECK(recv_message(p.b.get()).error().code == EPROTO);

  CHECK(recv_message(p.b.get(), true).error().code == EAGAIN);
  p.a.reset();
  CHECK(recv_message(p.b.get()).error().code == ECONNRESET);
}
