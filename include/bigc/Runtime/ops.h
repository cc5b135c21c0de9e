// The instruction set of the program format: include/bigc/format/ops.h.
#pragma once

#include "bigc/format/ops.h"
