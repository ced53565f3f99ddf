"""The one exception type for errors a user can cause (STYLE.md principle 14)."""


class LoopcertError(ValueError):
    """A bad config, checkpoint, flag, token or depth. The message names the offending value."""
