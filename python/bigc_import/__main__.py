"""python -m bigc_import: exit 0 done, 1 bad input (one line, no traceback), 2 internal error."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        from .cli import run
        from .errors import UserError
    except Exception:  # pragma: no cover - a broken installation
        import traceback
        traceback.print_exc()
        print("bigc import: internal error (the importer failed to load); please report it",
              file=sys.stderr)
        return 2
    from .driver import failed
    try:
        return run(argv)
    except UserError as e:
        print(f"bigc import: {e}", file=sys.stderr)
        failed(str(e))
        return 1
    except KeyboardInterrupt:
        print("bigc import: interrupted; nothing written", file=sys.stderr)
        failed("interrupted")
        return 1
    except MemoryError:
        print("bigc import: out of memory building or capturing the model; nothing written",
              file=sys.stderr)
        failed("out of memory")
        return 1
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        print("bigc import: internal error; nothing written (please report it with the "
              "traceback above)", file=sys.stderr)
        failed("internal error")
        return 2


if __name__ == "__main__":
    sys.exit(main())
