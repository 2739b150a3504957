"""JSON as the chat protocol accepts it: finite numbers and text that is valid Unicode.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``1e999`` (as ``inf``), and reads an
unpaired surrogate escape (``"\\ud800"``) into a ``str`` that cannot be encoded as UTF-8. Both
pass validation and fail much later, wherever the value is written out (the database, a socket,
a rendered form). ``loads`` refuses them at the door, with a message that says what to fix.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from chatbridge.author.exceptions import ChatBridgeError

__all__ = ["NotStrictJson", "loads"]

# \uD800-\uDFFF, any case: only text with such an escape can decode to a lone surrogate, so
# only that text (rare: json.dumps writes emoji as pairs like this) pays for the full check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotStrictJson(ChatBridgeError, ValueError):
    """The text is not JSON the protocol accepts; the message says why."""


def _no_constants(name: str) -> Any:
    raise NotStrictJson(f"{name} is not a JSON number.")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        shown = literal if len(literal) <= 40 else f"{literal[:37]}..."
        raise NotStrictJson(f"the number {shown} is out of range; numbers must be finite.")
    return value


def loads(text: str) -> Any:
    """Decode ``text``; ``NotStrictJson`` if it is not JSON, has a number that is not finite or
    a string with an unpaired surrogate."""
    try:
        value = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except NotStrictJson:
        raise
    except RecursionError:
        raise NotStrictJson("it is nested too deeply.") from None
    except json.JSONDecodeError as exc:
        raise NotStrictJson(f"{exc}.") from None
    except ValueError:  # the only other one: Python's limit on integer digits
        limit = sys.get_int_max_str_digits()
        raise NotStrictJson(f"an integer has more than {limit} digits.") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJson(
                "a string has an unpaired surrogate escape (\\uD800-\\uDFFF). Send characters "
                "as UTF-8, or escape them as complete surrogate pairs."
            ) from None
    return value
