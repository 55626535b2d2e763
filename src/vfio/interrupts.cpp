#include "vfio/interrupts.hpp"
