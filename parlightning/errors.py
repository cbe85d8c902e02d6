"""`ConfigError`: bad configuration, reported as one clear message naming the field and the fix."""


class ConfigError(ValueError):
    """Raised before any rollout for a bad config value; the CLI prints it without a traceback."""
