# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.evaluate`: the entry point; the program is `parlightning.cli.evaluate`, and importing `parlightning.evaluate` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a file of the working folder hiding a module it needs is one line
    from parlightning.cli.shadow import import_program

    import_program("parlightning.cli.evaluate").main()
else:
    from parlightning.cli import evaluate as _program

    sys.modules[__name__] = _program
