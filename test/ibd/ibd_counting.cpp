// ibd whose driver table puts CountingDevice (counting_device.hpp) around
// simhca's built-in driver, for simhca's PCI ID: the daemon, its services
// and its clients then reach the device through the seam alone.
// OPENIB_COUNTING_ETHERNET_PORTS (port numbers, comma-separated) makes
// those ports say they are Ethernet (counting_device.hpp).
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "counting_device.hpp"
#include "hca/driver_table.hpp"
#include "ibd/daemon.hpp"

int main(int argc, char** argv) {
  using namespace openib;
  const auto& table = hca::drivers();
  auto simhca = std::find_if(table.begin(), table.end(), [](const hca::Driver& d) { return d.name == "simhca"; });
  if (simhca == table.end()) return 1;
  hca::Driver counting = *simhca;
  counting.name = "counting";
  std::set<uint8_t> ethernet;
  if (const char* e = std::getenv("OPENIB_COUNTING_ETHERNET_PORTS"))
    for (std::string_view s(e); !s.empty();) {
      const size_t comma = std::min(s.find(','), s.size());
      if (int p = std::atoi(std::string(s.substr(0, comma)).c_str()); p > 0 && p < 256) ethernet.insert(uint8_t(p));
      s.remove_prefix(std::min(comma + 1, s.size()));
    }
  counting.open = [inner = simhca->open, ethernet](vfio::Device& d, boost::asio::io_context& io)
      -> Result<std::unique_ptr<hca::Device>> {
    OPENIB_TRY_ASSIGN(auto dev, inner(d, io));
    return std::unique_ptr<hca::Device>(std::make_unique<testing::CountingDevice>(std::move(dev), ethernet));
  };
  hca::add_driver(std::move(counting));
  // The embedded simhca is the build's (this binary is not next to it).
  std::vector<char*> args(argv, argv + argc);
  std::string simhca_arg = "--simhca=" OPENIB_SIMHCA_PATH;
  if (std::none_of(args.begin() + 1, args.end(), [](const char* a) {
        const std::string_view v(a);
        return v == "--simhca" || v.starts_with("--simhca=");
      }))
    args.push_back(simhca_arg.data());
  args.push_back(nullptr);
  return ibd::daemon_main(static_cast<int>(args.size() - 1), args.data());
}
