"""Shared fixtures. No fixture is named ``client`` (pytest-django's)."""

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from durablecache.cache import services as cache_services

ALL_DBS = ["default", "node"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, then, before it drops the test databases: end the
    other sessions on them. The code under test keeps a connection per
    database thread (the HTTP request pool, the write rounds' thread,
    ``database_sync_to_async``'s) for the life of the process, as a node
    does; PostgreSQL refuses to drop a database while they are open, which
    pytest-django only reported as a warning."""
    yield
    with django_db_blocker.unblock():
        for alias in ALL_DBS:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                continue
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()"
                    )
            except DatabaseError:  # not allowed: the warning, as before
                pass


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
