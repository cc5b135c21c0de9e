// The program file as the runtime sees it: the format library (include/bigc/format/, format/),
// all of it but the op table and the verifier. No MLIR here.
#pragma once

#include "bigc/format/program.h"
#include "bigc/format/reader.h"
#include "bigc/format/validator.h"
#include "bigc/format/writer.h"
