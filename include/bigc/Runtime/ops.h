// The instruction set of the program format: include/bigc/Format/ops.h.
#pragma once

#include "bigc/Format/ops.h"
#include "bigc/Runtime/format.h"
