"""Whole numbers read from text a client or a file wrote.

`str.isdigit` takes superscripts and other digits that `int` refuses (`'²'`), and `int`
refuses strings past 4,300 digits: both were 500s where a client chose the text. Every
reader of a number in a header, a query argument or an outside file goes through here.
"""


def ascii_int(text: str | bytes, cap: int) -> int | None:
    """The value of `text` when it is ASCII digits only (no sign, no spaces), at most
    `cap`; None when it is anything else. A longer number than `cap` has digits is `cap`,
    without `int` ever seeing it."""
    if not text or not (text.isascii() and text.isdigit()):
        return None
    digits = (text.decode() if isinstance(text, bytes) else text).lstrip("0") or "0"
    if len(digits) > len(str(cap)):
        return cap
    return min(int(digits), cap)
