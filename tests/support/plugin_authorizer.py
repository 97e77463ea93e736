"""The StandardAuthorizer as a plug-in with keys of its own (an LDAP password, say): it
declares no ``config_keys``, so kgw hands it whatever ``authorizer.config`` holds, as it does
any custom authorizer that does not declare its keys."""

from __future__ import annotations

from authz.standard_authorizer import StandardAuthorizer

__all__ = ["PluginAuthorizer"]


class PluginAuthorizer(StandardAuthorizer):
    """See the module doc."""

    config_keys = None
