"""Example paradigms to copy: a parallelism strategy (`block_planner.BlockPlanner`) and a task sampler
(`hardest_first.HardestFirst`). They ship with the package as `parlightning.examples` (this folder);
in a checkout `callbacks.<module>` names the same files."""
