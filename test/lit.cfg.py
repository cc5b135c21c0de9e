# lit configuration: tests named after the pass flags (test/Passes/<flag>.mlir), the dialect's
# round-trip and error tests (test/Dialect), and driver tests (test/Driver).
import os
import lit.formats

config.name = "bigc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.join(config.bigc_src_root, "test")
config.test_exec_root = os.path.join(config.bigc_obj_root, "test")
config.excludes = ["unit", "e2e", "fuzz", "gpu", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.bigc_obj_root, "bin"), config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
