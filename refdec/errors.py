"""The one exception type for errors a user can cause."""


class LoopcertError(ValueError):
    """A bad config, checkpoint, flag, token or depth. The message names the offending value."""
