# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.bc`: the entry point; the program is `parlightning.cli.bc`, and importing `parlightning.bc` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a file of the working folder hiding a module it needs is one line
    from parlightning.cli.shadow import import_program

    import_program("parlightning.cli.bc").main()
else:
    from parlightning.cli import bc as _program

    sys.modules[__name__] = _program
