# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.fit`: the entry point; the program is `parlightning.cli.fit`, and importing `parlightning.fit` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a shadowing file, or a signal while importing, is one line
    from parlightning.cli.entry import run_program

    run_program("parlightning.cli.fit")
else:
    from parlightning.cli import fit as _program

    sys.modules[__name__] = _program
