"""Credentials in URLs, masked wherever a URL may be shown: errors, logs, records.

A database URL carries its password either in the user-info (``user:password@host``) or
in the query string (``?password=...``, which pg8000 and PyMySQL accept); a URL of another
service may carry a token or key there. :func:`mask` replaces each such value by ``***``
in any text, so it also covers a URL inside a driver's own message. Query parameters are
masked by name: ``password``, ``passwd``, ``pwd``, ``secret``, ``token`` or ``key``, alone
or at the end of the name (``api_key``, ``access_token``, ``client_secret``), any case.
Hand-written (a regular expression, not SQLAlchemy's URL parser): the text may hold more
than a URL, and SQLAlchemy hides only the user-info password.

A JSON setting (``--custom_config``) is masked by key: wherever it is recorded (the run's
identity in ``manifest.json``, the store's parameters), the value of each key whose name
contains ``key``, ``secret``, ``token``, ``password``, ``passwd``, ``pwd`` or
``credential`` (any case, at any depth) is ``***``: :func:`mask_json`. The module still
receives the real values; a change of a secret's value alone is not a change of the run.

Example::

    mask("postgresql+pg8000://me:pw@db/meta?password=pw&sslmode=require")
    # -> "postgresql+pg8000://me:***@db/meta?password=***&sslmode=require"
    mask_json('{"api_key": "k1", "epochs": 3}')  # -> '{"api_key": "***", "epochs": 3}'
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MASK", "mask", "mask_json", "is_secret_key", "is_secret_parameter"]

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


_SECRET_KEY = re.compile(r"key|secret|token|password|passwd|pwd|credential", re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    """Whether a JSON setting's key names a secret (see the module docstring)."""
    return _SECRET_KEY.search(name) is not None


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: MASK if is_secret_key(str(k)) and v is not None else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def mask_json(text: str) -> str:
    """JSON ``text`` with the value of every secret-looking key as ``***`` (at any depth);
    the text unchanged when it has none (or is not JSON: it is refused where parsed)."""
    try:
        parsed = json.loads(text)
    except (TypeError, ValueError):
        return text
    masked = _masked(parsed)
    return text if masked == parsed else json.dumps(masked)
