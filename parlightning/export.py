# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.export`: the entry point; the program is `parlightning.cli.export`, and importing `parlightning.export` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a shadowing file, or a signal while importing, is one line
    from parlightning.cli.entry import run_program

    run_program("parlightning.cli.export")
else:
    from parlightning.cli import export as _program

    sys.modules[__name__] = _program
