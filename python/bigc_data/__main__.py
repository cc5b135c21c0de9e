"""python -m bigc_data encode ...: exit 0 done, 1 bad input (one line, no traceback), 2 internal
error (a traceback). Under the bigc driver (BIGC_RESULT_FD set) the outcome also goes to that
descriptor as one JSON object: {"files": [...], "message": ...} or {"error": ...}."""

import os
import sys


def _report(line, code):
    """Print the error line, and tell the driver (if any); returns the exit status."""
    try:
        from .encode import clear_progress
        clear_progress()
    except Exception:
        pass
    print(line, file=sys.stderr)
    try:
        from . import output
        output.send_result({"error": line})
    except Exception as e:  # a broken descriptor must not hide the error itself
        print(f"bigc data: (could not report the error to the driver: {e})", file=sys.stderr)
    return code


class _Terminated(BaseException):
    pass


def _on_signal(signum, frame):
    raise _Terminated(signum)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    import signal
    for s in (signal.SIGTERM, signal.SIGHUP):  # the temporary files are removed on the way out
        try:
            signal.signal(s, _on_signal)
        except (OSError, ValueError):
            pass
    try:
        from .errors import UserError
        from .encode import run
    except Exception:  # pragma: no cover - a broken installation
        import traceback
        traceback.print_exc()
        return _report("bigc data: internal error (the encoder failed to load); please report it", 2)
    try:
        return run(argv)
    except UserError as e:
        return _report(f"bigc data: {e}", 1)
    except KeyboardInterrupt:
        return _report("bigc data: interrupted; nothing written", 1)
    except _Terminated as e:
        import signal
        return _report(f"bigc data: stopped by {signal.Signals(e.args[0]).name}; nothing written", 1)
    except MemoryError:
        return _report("bigc data: out of memory; nothing written (a single huge document that cannot be "
                       "cut into pieces is encoded whole: split it, or use a machine with more memory)", 1)
    except SystemExit:
        raise
    except BaseException as e:
        import traceback
        traceback.print_exc()
        return _report(f"bigc data: internal error ({type(e).__name__}: {e}); nothing written (please report "
                       f"it with the traceback above)", 2)


if __name__ == "__main__":
    rc = main()
    if rc:
        # An encode may still run in its worker thread: do not wait for it (the files are gone).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
