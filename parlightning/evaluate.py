# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.evaluate`: the entry point; the program is `parlightning.cli.evaluate`, and importing `parlightning.evaluate` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a shadowing file, or a signal while importing, is one line
    from parlightning.cli.entry import run_program

    run_program("parlightning.cli.evaluate")
else:
    from parlightning.cli import evaluate as _program

    sys.modules[__name__] = _program
