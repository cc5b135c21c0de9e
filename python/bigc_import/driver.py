"""The contract with the bigc driver that runs this package as a child process
(include/bigc/Driver/PythonTool.h).

Under the driver, $BIGC_STAGING maps each output directory (its real path) to a staging directory
beside it, and $BIGC_RESULT_FD names an inherited pipe: the tool writes every output file into
staging and reports, as one JSON object on the pipe, either {"files": [final paths], "message":
"..."} (the driver moves the files into place and prints the message) or {"error": "..."} (it
printed the error itself). Run directly (python -m bigc_import), neither is set: files are written
in place, atomically, and the message printed."""

import json
import os

_reported = False


def under_driver():
    return "BIGC_RESULT_FD" in os.environ


def final_path(path):
    """The absolute path a file will have (its directory resolved as the driver resolves it)."""
    d = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    return os.path.join(d, os.path.basename(path))


def write_path(path):
    """Where to write `path` now: its staging place under the driver, else the path itself."""
    st = os.environ.get("BIGC_STAGING")
    if not under_driver() or st is None:
        return path
    final = final_path(path)
    staging = json.loads(st).get(os.path.dirname(final))
    if not staging:
        raise RuntimeError(f"the bigc driver gave no staging directory for {os.path.dirname(final)}")
    return os.path.join(staging, os.path.basename(final))


def report(obj):
    """The one result of the run, on the driver's pipe (nothing when run directly)."""
    global _reported
    if _reported or not under_driver():
        return
    _reported = True
    try:
        fd = int(os.environ["BIGC_RESULT_FD"])
        os.write(fd, json.dumps(obj).encode())
        os.close(fd)
    except (OSError, ValueError):
        pass


def done(paths, message):
    """Success: the files written (final paths) and the line to print."""
    if under_driver():
        report({"files": [final_path(p) for p in paths], "message": message})
    else:
        print(message)


def failed(message):
    report({"error": message})
