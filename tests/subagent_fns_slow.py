"""A subagent module that takes 2 s to import (a worker importing torch and a model on a loaded machine)."""

import time

from tests.subagent_fns import solve  # noqa: F401 (re-exported: the function the pool calls)

time.sleep(2.0)
