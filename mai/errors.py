"""Errors a user can act on."""


class ConfigError(ValueError):
    """A configuration that cannot run. Raised before any model loads; the message says what to fix."""


class RunFailed(RuntimeError):
    """A run that failed for a reason of its own (not its configuration's, not a host's: mai.host_faults), which
    would fail the same on every host: the message says where and why in one line; the traceback is in the logs of
    the flow run that failed."""


class ModelLoadError(RuntimeError):
    """A model that could not load in this process (a host's libraries, memory or GPU): the message names the model,
    the host and the cause. A fanned-out run takes that host out (mai.host_faults)."""
