"""Shared fixtures. No fixture is named ``client`` (pytest-django's)."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from durablecache.cache import services as cache_services

ALL_DBS = ["default", "node"]


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user("bob", password="pw-bob-123")


@pytest.fixture
def operator(db):
    return get_user_model().objects.create_user(
        "olga", password="pw-olga-123", is_staff=True
    )


@pytest.fixture
def token(user):
    return Token.objects.create(user=user).key


@pytest.fixture
def other_token(other_user):
    return Token.objects.create(user=other_user).key


@pytest.fixture
def operator_token(operator):
    return Token.objects.create(user=operator).key


@pytest.fixture
def api(token):
    """A REST client authenticated as the plain user ``alice``."""
    api_client = APIClient()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api_client


@pytest.fixture
def operator_api(operator_token):
    api_client = APIClient()
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {operator_token}")
    return api_client


@pytest.fixture
def region(db):
    return cache_services.region_create(name="prices")
