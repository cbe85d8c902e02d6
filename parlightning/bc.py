# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.bc`: the entry point; the program is `parlightning.cli.bc`, and importing `parlightning.bc` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

from parlightning.cli import bc as _program

if __name__ == "__main__":
    _program.main()
else:
    sys.modules[__name__] = _program
