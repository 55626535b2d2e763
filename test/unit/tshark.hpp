// Helpers for tests that decode captures with Debian's tshark.
#pragma once

#include <cstdio>
#include <string>

namespace openib::test {

// tshark 4.0's heuristic dissectors that claim arbitrary InfiniBand
// payloads (RPC-over-RDMA, SMB Direct, NVMe-oF, iSER, ...) and then call
// them malformed; our payloads are test bytes, so they are switched off.
inline const std::string kTsharkNoHeuristics =
    " --disable-heuristic rpcrdma_infiniband --disable-heuristic smb_direct_infiniband"
    " --disable-heuristic nvme_rdma --disable-heuristic iser_infiniband"
    " --disable-heuristic lnet_ib --disable-heuristic smcr_infiniband"
    " --disable-heuristic sdp_infiniband --disable-heuristic fc_infiniband"
    " --disable-heuristic mellanox_eoib --disable-heuristic eth_over_ib";

// `tshark -n -r FILE` with those heuristics off.
inline std::string tshark_read(const std::string& file) {
  return "tshark -n -r " + file + kTsharkNoHeuristics;
}

// Runs a shell command, returning its stdout; the exit status via `status`.
// stderr is folded in, minus tshark's "Running as user root" warning.
inline std::string run_command(const std::string& cmd, int& status) {
  std::string out;
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  status = ::pclose(p);
  const std::string root_warning = "Running as user \"root\"";
  if (out.rfind(root_warning, 0) == 0) out.erase(0, out.find('\n') + 1);
  return out;
}

}  // namespace openib::test
