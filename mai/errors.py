"""Errors a user can act on."""


class ConfigError(ValueError):
    """A configuration that cannot run. Raised before any model loads; the message says what to fix."""


class ModelLoadError(RuntimeError):
    """A model that could not load in this process (a host's libraries, memory or GPU): the message names the model,
    the host and the cause. A fanned-out run takes that host out (mai.host_faults)."""
