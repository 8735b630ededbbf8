"""REST token authentication (common.auth.SqlTokenAuthentication)."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework import exceptions
from rest_framework.authtoken.models import Token
from rest_framework.test import APIRequestFactory

from common.auth import SqlTokenAuthentication

pytestmark = pytest.mark.django_db


def _authenticate(header: str | None):
    factory = APIRequestFactory()
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    request = factory.get("/api/v1/regions/", **extra)
    return SqlTokenAuthentication().authenticate(request)


def test_a_token_names_its_user_with_the_fields_permissions_read():
    user = get_user_model().objects.create_user(
        "op", email="op@example.com", is_staff=True
    )
    key = Token.objects.create(user=user).key
    found, token = _authenticate(f"Token {key}")
    assert found.pk == user.pk
    assert found.username == "op"
    assert found.is_active is True
    assert found.is_staff is True
    assert found.is_superuser is False
    assert found.is_authenticated
    assert found.email == "op@example.com"  # deferred: loaded on first use
    assert token.key == key
    assert token.user_id == user.pk


def test_an_unknown_token_is_refused_like_drf():
    with pytest.raises(exceptions.AuthenticationFailed, match="Invalid token"):
        _authenticate("Token " + "0" * 40)


def test_a_deleted_token_is_refused_at_once():
    user = get_user_model().objects.create_user("gone")
    token = Token.objects.create(user=user)
    token.delete()
    with pytest.raises(exceptions.AuthenticationFailed, match="Invalid token"):
        _authenticate(f"Token {token.key}")


def test_an_inactive_user_is_refused_like_drf():
    user = get_user_model().objects.create_user("idle", is_active=False)
    key = Token.objects.create(user=user).key
    with pytest.raises(exceptions.AuthenticationFailed, match="inactive"):
        _authenticate(f"Token {key}")


def test_no_header_is_no_authentication():
    assert _authenticate(None) is None
