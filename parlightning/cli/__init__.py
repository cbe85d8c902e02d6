"""The programs behind `python -m parlightning.fit|evaluate|export|bc|plot` and their CLI helpers (default callbacks, the logged config, packaged configs)."""
