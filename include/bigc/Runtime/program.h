// The program file as the runtime sees it: the format library (include/bigc/Format/, format/),
// all of it but the op table and the verifier. No MLIR here.
#pragma once

#include "bigc/Format/program.h"
#include "bigc/Format/reader.h"
#include "bigc/Format/validator.h"
#include "bigc/Format/writer.h"
#include "bigc/Runtime/format.h"
