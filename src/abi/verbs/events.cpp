// Completion events (ibv_get_cq_event, ibv_ack_cq_events) and
// asynchronous events (ibv_get_async_event, ibv_ack_async_event; IBA
// 11.6.3): blocking unless the application made the fd non-blocking, as
// with the kernel's uverbs files.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>

#include "abi/verbs/objects.hpp"

namespace openib::verbs {

void note_object(Context& ctx, const void* impl, void* o) {
  std::lock_guard lk(ctx.mu);
  ctx.objects[impl] = o;
}

void forget_object(Context& ctx, const void* impl) {
  std::lock_guard lk(ctx.mu);
  auto it = ctx.objects.find(impl);
  if (it == ctx.objects.end()) return;
  const void* o = it->second;
  ctx.objects.erase(it);
  // An event already queued for it names a destroyed object: drop it
  // (libibverbs makes destroy wait for the ack instead; see docs).
  std::erase_if(ctx.async_events, [&](const ibv_async_event& e) {
    return e.element.cq == o || e.element.qp == o || e.element.srq == o;
  });
}

namespace {

bool nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

// Whether a wait a signal handler interrupted resumes. The kernel's event
// files are read(), which a handler installed with SA_RESTART restarts and
// one without it ends with EINTR (signal(7)): qperf's SIGALRM (no
// SA_RESTART) ends its ibv_get_cq_event when the test's time is up. poll()
// is never restarted and does not say which signal came: resume only if
// every handler the process has is SA_RESTART (signal()'s default), else
// report EINTR as that read could.
bool resumes_after_signal() {
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    const bool caught = (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != nullptr
                                                   : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
    if (caught && !(sa.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

// Waits until fd is readable: 0, or -1 with errno (EINTR as above).
int wait_readable(int fd) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, -1) >= 0) return 0;
    if (errno != EINTR || !resumes_after_signal()) return -1;
  }
}

// libopenib's events into ours, under ctx.mu; openib's own (a cached path
// changed, type 64) are not verbs events and are left out.
void take(Context& ctx, const std::vector<openib::AsyncEvent>& evs) {
  for (const auto& e : evs) {
    if (e.type == openib::AsyncEventType::kPathChanged) continue;
    ibv_async_event a{};
    a.event_type = ibv_event_type(e.type);
    const void* impl = e.cq ? static_cast<const void*>(e.cq)
                       : e.qp ? static_cast<const void*>(e.qp)
                              : static_cast<const void*>(e.srq);
    if (impl) {
      auto it = ctx.objects.find(impl);
      if (it == ctx.objects.end()) continue;  // destroyed since
      if (e.cq) a.element.cq = static_cast<ibv_cq*>(it->second);
      if (e.qp) a.element.qp = static_cast<ibv_qp*>(it->second);
      if (e.srq) a.element.srq = static_cast<ibv_srq*>(it->second);
    } else {
      a.element.port_num = e.port;
    }
    ctx.async_events.push_back(a);
  }
}

}  // namespace

}  // namespace openib::verbs

using namespace openib::verbs;

extern "C" {

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (!channel || !cq || !cq_context) {
    errno = EINVAL;
    return -1;
  }
  auto* ch = ours<Channel>(channel);
  const bool block = !nonblocking(channel->fd);
  openib::Result<openib::Cq*> r = nullptr;
  for (;;) {
    // (the wait ours, libopenib's resumes after every signal)
    if (block && wait_readable(channel->fd) < 0) return -1;
    r = ch->impl->get_event(0);
    if (r || r.error().code != ETIMEDOUT) break;
    if (!block) {
      errno = EAGAIN;
      return -1;
    }
    // another thread took the event
  }
  if (!r) {
    errno = fail_int("ibv_get_cq_event", r.error());
    return -1;
  }
  std::lock_guard lk(ch->mu);
  auto it = ch->cqs.find(*r);
  if (it == ch->cqs.end()) {
    errno = EAGAIN;  // the CQ was destroyed meanwhile
    return -1;
  }
  *cq = &it->second->cq;
  *cq_context = (*cq)->cq_context;
  return 0;
}
OPENIB_VERBS_1_1(ibv_get_cq_event);

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!cq) return;
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}
OPENIB_VERBS_1_1(ibv_ack_cq_events);

int ibv_get_async_event(ibv_context* c, ibv_async_event* event) {
  if (!c || !event) {
    errno = EINVAL;
    return -1;
  }
  Context& ctx = *ctx_of(c);
  for (;;) {
    auto r = ctx.impl->get_async_events();
    if (!r) {
      errno = fail_int("ibv_get_async_event", r.error());
      return -1;
    }
    {
      std::lock_guard lk(ctx.mu);
      take(ctx, *r);
      if (!ctx.async_events.empty()) {
        *event = ctx.async_events.front();
        ctx.async_events.pop_front();
        return 0;
      }
    }
    if (nonblocking(c->async_fd)) {
      errno = EAGAIN;
      return -1;
    }
    if (wait_readable(c->async_fd) < 0) return -1;
  }
}
OPENIB_VERBS_1_1(ibv_get_async_event);

void ibv_ack_async_event(ibv_async_event* event) {
  (void)event;  // nothing waits for acks: destroying an object drops its queued events
}
OPENIB_VERBS_1_1(ibv_ack_async_event);

}  // extern "C"
