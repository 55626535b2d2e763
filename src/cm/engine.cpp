// The CM state machine (engine.hpp; IBA 12.9). Bodies to follow.
#include "cm/engine.hpp"

namespace openib::cm {

struct Engine::Impl {};

Engine::Engine(boost::asio::io_context&, Env, PortInfo) : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;
void Engine::set_port(const PortInfo&) {}
Result<uint32_t> Engine::listen(uint64_t, uint64_t, uint64_t) { return err(ENOSYS, "cm: not yet"); }
Result<uint32_t> Engine::connect(const ConnectParams&, uint64_t) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::accept(uint32_t, const AcceptParams&) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::reject(uint32_t, uint16_t, Bytes, Bytes) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::send_rtu(uint32_t, Bytes) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::notify_established(uint32_t) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::disconnect(uint32_t, Bytes) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::send_drep(uint32_t, Bytes) { return err(ENOSYS, "cm: not yet"); }
Result<uint32_t> Engine::sidr_request(const SidrParams&, uint64_t) { return err(ENOSYS, "cm: not yet"); }
Result<void> Engine::sidr_reply(uint32_t, uint8_t, uint32_t, uint32_t, Bytes) { return err(ENOSYS, "cm: not yet"); }
void Engine::destroy(uint32_t) {}
void Engine::destroy_owner(uint64_t) {}
void Engine::on_mad(const mad::MadAddress&, Bytes) {}
Result<QpParams> Engine::qp_params(uint32_t, uint8_t) const { return err(ENOSYS, "cm: not yet"); }
std::optional<State> Engine::state(uint32_t) const { return std::nullopt; }
std::array<uint32_t, static_cast<std::size_t>(State::kCount_)> Engine::states() const { return {}; }
std::string Engine::json() const { return "{}"; }
std::size_t Engine::memory_bytes() const { return 0; }
const char* to_string(EventType) { return "?"; }
const char* to_string(State) { return "?"; }

}  // namespace openib::cm
