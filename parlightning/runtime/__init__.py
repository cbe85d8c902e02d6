"""Runtime services shared by the package: processes (`parlightning.runtime.processes`)."""
