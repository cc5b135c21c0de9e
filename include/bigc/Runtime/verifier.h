// The plan verifier: include/bigc/format/verifier.h.
#pragma once

#include "bigc/format/verifier.h"
