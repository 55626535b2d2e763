// `ibdctl mcast join MGID ...` and `ibdctl service set ...`: a multicast
// join (MCAST_JOIN) or a service registration (SERVICE_SET) through ibd's
// SA client (docs/sa.md "Multicast joins", "Service registrations"). They
// belong to ibdctl's connection: with --hold it stays open, one line
// printed once joined / registered, until stdin closes or SIGTERM/SIGINT,
// then MCAST_LEAVE / SERVICE_DELETE is sent and the connection closed (a
// killed ibdctl's joins are left by ibd all the same). Without --hold the
// join lasts as long as the command.
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "sa/mcmember_record.hpp"
#include "sa/service_record.hpp"
#include "tools/ibdctl.hpp"

namespace openib::ibdctl {

namespace {

bool parse_gid(const std::string& s, std::array<uint8_t, 16>& out) {
  return ::inet_pton(AF_INET6, s.c_str(), out.data()) == 1;
}
std::string gid_str(const sa::Gid& g) {
  char b[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, g.data(), b, sizeof b);
  return b;
}

// Until stdin reaches its end, SIGTERM or SIGINT comes, or ibd closes the
// connection (false: then there is nothing left to undo).
bool hold(int sock) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  const int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);
  pollfd p[3] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}, {sock, POLLIN, 0}};
  for (;;) {
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return true;
    }
    if (p[2].revents) return false;  // ibd said something unasked, or closed
    if (p[1].revents) return true;
    if (p[0].revents) {
      char buf[256];
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) return true;
    }
  }
}

int fail(const Error& e) {
  std::fprintf(stderr, "ibdctl: %s\n", e.str().c_str());
  return 1;
}

struct Common {
  std::string socket;
  unsigned port = 1;
  bool hold = false;
};

// HELLO on a new connection.
Result<UniqueFd> open_session(const std::string& socket) {
  OPENIB_TRY_ASSIGN(UniqueFd fd, connect_to(socket));
  proto::HelloReq hello;
  hello.flags = proto::kHelloNoUar;
  OPENIB_TRY(call(fd.get(), proto::Op::kHello, 1, proto::encode(hello)));
  return fd;
}

// Holds with --hold, then undoes with `undo` (its op and body).
int finish(int fd, bool with_hold, proto::Op undo, const proto::Bytes& body) {
  std::fflush(stdout);
  if (!with_hold) return 0;
  if (!hold(fd)) {
    std::fprintf(stderr, "ibdctl: ibd closed the connection\n");
    return 1;
  }
  if (auto r = call(fd, undo, 3, body); !r) return fail(r.error());
  return 0;
}

int mcast_join(const Common& c, const std::string& mgid, const std::string& state, uint32_t qkey, unsigned pkey,
               unsigned sl, bool no_create) {
  proto::McastJoinReq req;
  req.port = static_cast<uint8_t>(c.port);
  if (!parse_gid(mgid, req.mgid)) {
    std::fprintf(stderr, "ibdctl: '%s' is not a GID (IPv6 notation, e.g. ff12:601b::1)\n", mgid.c_str());
    return 2;
  }
  req.join_state = state == "full"  ? sa::join_state::kFullMember
                   : state == "non" ? sa::join_state::kNonMember
                                    : sa::join_state::kSendOnlyNonMember;
  req.flags = no_create ? 0 : proto::kMcastCreate;
  req.qkey = qkey;
  req.pkey = static_cast<uint16_t>(pkey);
  req.sl = static_cast<uint8_t>(sl);
  auto fd = open_session(c.socket);
  if (!fd) return fail(fd.error());
  auto r = call(fd->get(), proto::Op::kMcastJoin, 2, proto::encode(req));
  if (!r) return fail(r.error());
  auto rep = proto::decode<proto::McastJoinRep>(*r);
  if (!rep) return fail(rep.error());
  auto rec = sa::decode_mcmember_record(std::as_bytes(std::span(rep->record)));
  if (!rec) return fail(rec.error());
  std::printf("joined %s mlid %#x qkey %#x pkey %#x mtu %u rate %u sl %u join_state %#x\n",
              gid_str(rec->mgid).c_str(), rec->mlid, rec->qkey, rec->pkey, rec->mtu, rec->rate, rec->sl,
              rec->join_state);
  proto::McastLeaveReq leave;
  leave.port = req.port;
  leave.mgid = req.mgid;
  return finish(fd->get(), c.hold, proto::Op::kMcastLeave, proto::encode(leave));
}

int service_set(const Common& c, uint64_t id, const std::string& name, uint32_t lease, const std::string& gid,
                unsigned pkey) {
  sa::ServiceRecord sr;
  sr.service_id = id;
  sr.service_name = name;
  sr.service_lease = lease;
  sr.service_pkey = static_cast<uint16_t>(pkey);
  if (!gid.empty() && !parse_gid(gid, sr.service_gid)) {
    std::fprintf(stderr, "ibdctl: '%s' is not a GID\n", gid.c_str());
    return 2;
  }
  proto::ServiceReq req;
  req.port = static_cast<uint8_t>(c.port);
  sa::encode_service_record(std::as_writable_bytes(std::span(req.record)), sr);
  auto fd = open_session(c.socket);
  if (!fd) return fail(fd.error());
  auto r = call(fd->get(), proto::Op::kServiceSet, 2, proto::encode(req));
  if (!r) return fail(r.error());
  auto rep = proto::decode<proto::ServiceRep>(*r);
  if (!rep) return fail(rep.error());
  auto echo = sa::decode_service_record(std::as_bytes(std::span(rep->record)));
  if (!echo) return fail(echo.error());
  std::printf("registered service %#llx '%s' gid %s lease %u\n", static_cast<unsigned long long>(echo->service_id),
              echo->service_name.c_str(), gid_str(echo->service_gid).c_str(), echo->service_lease);
  return finish(fd->get(), c.hold, proto::Op::kServiceDelete, proto::encode(req));
}

}  // namespace

int sa_member_main(int argc, char** argv, const std::string& socket) {
  Common c;
  c.socket = socket;
  CLI::App app{"ibdctl mcast | service: a multicast join or a service registration, held by this command"};
  app.add_option("--socket", c.socket, "ibd's client socket")->capture_default_str();
  app.require_subcommand(1);
  auto add_common = [&c](CLI::App* s) {
    s->add_option("--port", c.port, "the local port")->capture_default_str()->check(CLI::Range(1, 255));
    s->add_flag("--hold", c.hold, "keep it until stdin closes or SIGTERM/SIGINT, then undo it");
  };

  CLI::App* mcast = app.add_subcommand("mcast", "multicast groups");
  mcast->require_subcommand(1);
  CLI::App* join = mcast->add_subcommand("join", "join MGID (creating it if need be, unless --no-create)");
  std::string mgid, state = "full";
  uint32_t qkey = 0;
  unsigned pkey = 0, sl = 0;
  bool no_create = false;
  join->add_option("mgid", mgid, "the group's GID (IPv6 notation)")->required();
  join->add_option("--state", state, "JoinState")->check(CLI::IsMember({"full", "non", "send-only"}))->capture_default_str();
  join->add_option("--qkey", qkey, "the group's Q_Key when it is created")->capture_default_str();
  join->add_option("--pkey", pkey, "the P_Key (0: the port's at index 0)")->check(CLI::Range(0, 0xffff));
  join->add_option("--sl", sl, "the group's SL when it is created")->check(CLI::Range(0, 15));
  join->add_flag("--no-create", no_create, "join only: send no creation components");
  add_common(join);

  CLI::App* service = app.add_subcommand("service", "service registrations");
  service->require_subcommand(1);
  CLI::App* set = service->add_subcommand("set", "register a ServiceRecord");
  uint64_t id = 0;
  std::string name, gid;
  uint32_t lease = sa::kInfiniteLease;
  unsigned spkey = 0xffff;
  set->add_option("--id", id, "ServiceID")->required();
  set->add_option("--name", name, "ServiceName (at most 64 bytes)")->required()->check(CLI::Validator(
      [](std::string& s) { return s.size() <= 64 ? std::string() : std::string("longer than 64 bytes"); },
      "<=64 bytes"));
  set->add_option("--lease", lease, "ServiceLease in seconds (default none); ibd renews it")->check(CLI::Range(1u, 0xffffffffu));
  set->add_option("--gid", gid, "ServiceGID (default the port's GID 0)");
  set->add_option("--pkey", spkey, "ServiceP_Key")->capture_default_str()->check(CLI::Range(0, 0xffff));
  add_common(set);

  for (CLI::App* sub : {mcast, join, service, set}) sub->fallthrough();  // --socket anywhere
  CLI11_PARSE(app, argc, argv);
  if (join->parsed()) return mcast_join(c, mgid, state, qkey, pkey, sl, no_create);
  return service_set(c, id, name, lease, gid, spkey);
}

}  // namespace openib::ibdctl
