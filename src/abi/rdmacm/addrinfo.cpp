// rdma_getaddrinfo over libopenib's (getaddrinfo(3) for the RDMA CM), and
// rdma_get_devices: the contexts of our libibverbs' devices.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "abi/rdmacm/objects.hpp"

using namespace openib::rdmacm;

namespace {

sockaddr* copy_addr(const openib::IpEndpoint& ep, socklen_t& len) {
  sockaddr_storage ss{};
  len = ep.to_sockaddr(ss);
  auto* out = static_cast<sockaddr*>(std::malloc(len));
  if (out) std::memcpy(out, &ss, len);
  return out;
}

// Contexts live as long as the process (rdma-core keeps its list open too).
std::mutex g_devices_mu;
std::vector<ibv_context*> g_contexts;

}  // namespace

extern "C" {

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (!res || (!node && !service)) return fail("rdma_getaddrinfo", EINVAL, "no node or service");
  const bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
  const int family = hints ? hints->ai_family : AF_UNSPEC;
  auto ep = openib::rdma_getaddrinfo(node, service ? service : "0", family);
  if (!ep) return fail("rdma_getaddrinfo", ep.error());
  auto* ai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!ai) return fail("rdma_getaddrinfo", ENOMEM, "calloc");
  ai->ai_flags = hints ? hints->ai_flags : 0;
  ai->ai_family = ep->family;
  ai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  ai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  if (passive) {
    ai->ai_src_addr = copy_addr(*ep, ai->ai_src_len);
  } else {
    ai->ai_dst_addr = copy_addr(*ep, ai->ai_dst_len);
    if (node) ai->ai_dst_canonname = strdup(node);
    if (hints && hints->ai_src_addr && hints->ai_src_len) {
      ai->ai_src_addr = static_cast<sockaddr*>(std::malloc(hints->ai_src_len));
      if (ai->ai_src_addr) std::memcpy(ai->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
      ai->ai_src_len = hints->ai_src_len;
    }
  }
  if ((passive && !ai->ai_src_addr) || (!passive && !ai->ai_dst_addr)) {
    rdma_freeaddrinfo(ai);
    return fail("rdma_getaddrinfo", ENOMEM, "malloc");
  }
  *res = ai;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

ibv_context** rdma_get_devices(int* num_devices) {
  std::lock_guard lk(g_devices_mu);
  if (g_contexts.empty()) {
    int n = 0;
    if (ibv_device** list = ibv_get_device_list(&n)) {
      for (int k = 0; k < n; ++k)
        if (ibv_context* c = ibv_open_device(list[k])) g_contexts.push_back(c);
      ibv_free_device_list(list);
    }
  }
  auto** out = static_cast<ibv_context**>(std::calloc(g_contexts.size() + 1, sizeof(ibv_context*)));
  if (!out) {
    fail("rdma_get_devices", ENOMEM, "calloc");
    return nullptr;
  }
  std::copy(g_contexts.begin(), g_contexts.end(), out);
  if (num_devices) *num_devices = int(g_contexts.size());
  return out;
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

}  // extern "C"
