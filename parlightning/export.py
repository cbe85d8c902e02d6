# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.export`: the entry point; the program is `parlightning.cli.export`, and importing `parlightning.export` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

if __name__ == "__main__":  # a file of the working folder hiding a module it needs is one line
    from parlightning.cli.shadow import import_program

    import_program("parlightning.cli.export").main()
else:
    from parlightning.cli import export as _program

    sys.modules[__name__] = _program
