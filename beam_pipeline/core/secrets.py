"""Credentials in URLs, masked wherever a URL may be shown: errors, logs, records.

A database URL carries its password either in the user-info (``user:password@host``) or
in the query string (``?password=...``, which pg8000 and PyMySQL accept); a URL of another
service may carry a token or key there. :func:`mask` replaces each such value by ``***``
in any text, so it also covers a URL inside a driver's own message. Query parameters are
masked by name: ``password``, ``passwd``, ``pwd``, ``secret``, ``token`` or ``key``, alone
or at the end of the name (``api_key``, ``access_token``, ``client_secret``), any case.
Hand-written (a regular expression, not SQLAlchemy's URL parser): the text may hold more
than a URL, and SQLAlchemy hides only the user-info password.

Example::

    mask("postgresql+pg8000://me:pw@db/meta?password=pw&sslmode=require")
    # -> "postgresql+pg8000://me:***@db/meta?password=***&sslmode=require"
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask", "is_secret_parameter"]

MASK = "***"
_SECRET_NAME = r"[\w.\-]*(?:password|passwd|pwd|secret|token|key)"
# scheme://user:password@ : the password is what lies between the first ':' after the
# scheme and the '@' (no '/', '@' or whitespace in it: a URL encodes those).
_USER_INFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#]*:)[^\s/@]+(?=@)")
# ?name=value, &name=value or ;name=value with a secret name, up to the next separator;
# punctuation that ends the text or precedes a space (a sentence's ':' or '.') is not the
# value's, so that masking a masked text changes nothing.
_QUERY = re.compile(
    rf"(?P<head>[?&;](?:{_SECRET_NAME})=)[^&;#\s'\"]+?(?=[&;#\s'\"]|[:,.;)]*(?:\s|$))",
    flags=re.IGNORECASE,
)


def is_secret_parameter(name: str) -> bool:
    """Whether a URL query parameter's value is a credential (see the module docstring)."""
    return re.fullmatch(_SECRET_NAME, name, flags=re.IGNORECASE) is not None


def mask(text: str) -> str:
    """``text`` with every URL password and secret query parameter's value as ``***``."""
    if "://" not in text and "=" not in text:
        return text
    return _QUERY.sub(rf"\g<head>{MASK}", _USER_INFO.sub(rf"\g<head>{MASK}", text))
