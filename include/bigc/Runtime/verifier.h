// The plan verifier: include/bigc/Format/verifier.h.
#pragma once

#include "bigc/Format/verifier.h"
#include "bigc/Runtime/format.h"
