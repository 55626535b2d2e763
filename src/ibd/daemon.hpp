// ibd's whole life (docs/operations.md): options, the device through the
// driver table, the services, the loop, the teardown. main.cpp calls it; a
// test's daemon registers a driver of its own first (hca::add_driver), then
// calls it too.
#pragma once

namespace openib::ibd {

int daemon_main(int argc, char** argv);

}  // namespace openib::ibd
