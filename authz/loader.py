"""Load an authorizer class from its import path (``authorizer.class.name``).

Theory of operation
-------------------
The config names the class as ``package.module:Class`` (preferred, unambiguous)
or ``package.module.Class`` (Java style; the last dot separates the class).
The class is imported, checked to be an ``Authorizer`` subclass, and returned
uninstantiated: the gateway instantiates it with no arguments and then drives
the lifecycle in ``authz.authorizer``.  Every failure raises
``AuthorizerLoadError`` whose message names the configured path.
"""

from __future__ import annotations

import importlib

from .authorizer import Authorizer

__all__ = ["load_authorizer", "AuthorizerLoadError", "STANDARD_AUTHORIZER_PATH"]

#: The import path of kgw's built-in authorizer.
STANDARD_AUTHORIZER_PATH = "authz.standard_authorizer:StandardAuthorizer"


class AuthorizerLoadError(ImportError):
    """The configured authorizer class could not be loaded."""


def load_authorizer(import_path: str) -> type[Authorizer]:
    """Resolve ``"package.module:Class"`` or ``"package.module.Class"``.

    :raises AuthorizerLoadError: if the path is malformed, the module cannot be
        imported, the attribute is missing, or it is not an ``Authorizer``
        subclass.  The message always names ``import_path``.
    """
    if not isinstance(import_path, str) or not import_path.strip():
        raise AuthorizerLoadError(f"authorizer class path {import_path!r} is empty")
    path = import_path.strip()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
    else:
        module_name, _, attr_path = path.rpartition(".")
    if not module_name or not attr_path:
        raise AuthorizerLoadError(
            f"authorizer class path {import_path!r} must look like 'package.module:Class' "
            "or 'package.module.Class'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or an error raised while importing it
        raise AuthorizerLoadError(
            f"cannot load authorizer {import_path!r}: importing module {module_name!r} failed: {exc}"
        ) from exc
    obj: object = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise AuthorizerLoadError(
                f"cannot load authorizer {import_path!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from exc
    if not isinstance(obj, type) or not issubclass(obj, Authorizer):
        raise AuthorizerLoadError(
            f"cannot load authorizer {import_path!r}: {obj!r} is not a subclass of authz.authorizer.Authorizer"
        )
    return obj
