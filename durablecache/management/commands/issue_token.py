"""``manage.py issue_token USER [--operator]``: print an API token."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create USER if needed and print its API token on the last line."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--operator",
            action="store_true",
            help="make the user an operator (staff; may use the dashboard and admin)",
        )
        parser.add_argument(
            "--new-password",
            action="store_true",
            help="set a fresh random password and print it (for the dashboard login)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=opts["username"]
        )
        if opts["operator"]:
            user.is_staff = True
            user.is_superuser = True
        if opts["new_password"]:
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            self.stdout.write(f"password: {password}")
        elif created:
            user.set_unusable_password()
        user.save()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
