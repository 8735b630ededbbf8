"""REST token authentication in one SQL statement.

DRF's ``TokenAuthentication`` looks the token up with
``Token.objects.select_related("user").get(key=...)``; here it is one
plain statement (``common.tokens``), with the same answers and errors.
"""

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from common.tokens import token_user


class SqlTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, as DRF's, looked up in one statement."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        user = token_user(key)
        if user is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token = Token(key=key, user=user)
        token._state.adding = False
        return user, token
