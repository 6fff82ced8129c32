"""The one error every converter raises."""


class ConversionError(RuntimeError):
    """A release checkpoint could not be converted; the message names the file and keys."""
