// The Result type lives in the public headers (include/openib/result.hpp),
// since libopenib's API returns it.
#pragma once

#include "openib/result.hpp"
