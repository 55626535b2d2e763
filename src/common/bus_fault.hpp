// Copies that survive a bus error on the memory they touch.
//
// Memory mapped from another process's file can fault with SIGBUS when
// touched: a page the kernel cannot supply (the file was truncated under
// the mapping, a hugetlbfs page that cannot be allocated, a poisoned page).
// A device model reaching client memory must turn that into an error on
// that one access, as hardware turns a failed DMA into an error completion,
// instead of dying (docs/simhca.md §11.2; SPDK does the same for a BAR
// that vanished).
//
// How: guarded_copy() arms a thread-local recovery point (sigsetjmp) around
// one memcpy; the SIGBUS handler, if the fault was raised by the kernel on
// a thread inside a guarded copy, siglongjmps back to it. Any other SIGBUS
// (outside a guarded copy, or sent by kill) goes to the handler that was
// installed before ours, by default the core-dumping default action. The
// handler runs with SA_NODEFER and the jump does not restore the signal
// mask, so a guarded copy costs no system call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace openib {

// Installs the SIGBUS handler unless it is already the current one; the
// handler it replaces gets every fault that is not ours. Call it before the
// first guarded_copy() (a test framework may have replaced it in between:
// calling again reinstalls it).
void install_bus_fault_handler();

// memcpy(dst, src, n), or false if it raised SIGBUS. The copy then stopped
// part way: some bytes of dst may have been written. Nothing else may be in
// flight in the copy (no locks, no allocation), which memcpy guarantees.
bool guarded_copy(void* dst, const void* src, size_t n);

// Guarded copies that faulted, in this process.
uint64_t bus_faults_recovered();

}  // namespace openib
