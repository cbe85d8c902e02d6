"""Runtime services shared by the package: processes (`parlightning.runtime.processes`), checkpoints,
preflight, the DDP rank watch and declared waits (`parlightning.runtime.waits.expected_wait`)."""
