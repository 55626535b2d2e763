// ibd: the root daemon (docs/operations.md); daemon.cpp is all of it.
#include "ibd/daemon.hpp"

int main(int argc, char** argv) { return openib::ibd::daemon_main(argc, argv); }
